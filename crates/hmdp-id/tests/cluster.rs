//! The generators over `redis::cluster_async::ClusterConnection` on a real
//! three-master Redis Cluster started by the test.

mod support;

use std::collections::HashSet;

use hmdp_id::{IdGenerator, ManualClock, Mode, SegmentOptions, decode};
use hmdp_testkit::RedisCluster;
use redis::cluster::ClusterClient;
use support::assert_distinct;

/// 2025-03-10T12:00:00Z
const MID_DAY: i64 = 1_741_608_000;
const BIZ: [&str; 6] = ["order", "voucher", "blog", "user", "shop", "follow"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_modes_work_on_a_redis_cluster() {
    let cluster = RedisCluster::start().await;
    let conn = ClusterClient::new(cluster.urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let clock = ManualClock::from_unix_seconds(MID_DAY);

    let mut tasks = Vec::new();
    for biz in BIZ {
        for mode in [
            Mode::Compatible,
            Mode::Segment(SegmentOptions::new().step(50)),
        ] {
            let ids = IdGenerator::builder(conn.clone(), biz)
                .mode(mode)
                .clock(clock.clone())
                .build()
                .unwrap();
            for _ in 0..4 {
                let ids = ids.clone();
                tasks.push(tokio::spawn(async move {
                    let mut mine = Vec::new();
                    for _ in 0..100 {
                        mine.push(ids.next_id().await.unwrap());
                    }
                    (biz, mine)
                }));
            }
        }
    }
    let mut per_biz: Vec<(&str, Vec<i64>)> = BIZ.iter().map(|b| (*b, Vec::new())).collect();
    for t in tasks {
        let (biz, ids) = t.await.unwrap();
        per_biz
            .iter_mut()
            .find(|(b, _)| *b == biz)
            .unwrap()
            .1
            .extend(ids);
    }

    let mut c = conn.clone();
    for (biz, ids) in &per_biz {
        // Unique within a business name (the scope of the guarantee).
        assert_eq!(ids.len(), 800);
        assert_distinct(ids);
        let key = hmdp_id::day_key("", biz, MID_DAY);
        let counter: i64 = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut c)
            .await
            .unwrap();
        for &id in ids {
            let (ts, seq) = decode(id);
            assert_eq!(ts, MID_DAY);
            assert!(
                i64::from(seq) <= counter,
                "{biz}: seq {seq} above counter {counter}"
            );
        }
    }

    // The day keys really are spread over several masters.
    let mut nodes_with_keys = HashSet::new();
    for url in cluster.urls() {
        let mut node = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let n: i64 = redis::cmd("DBSIZE").query_async(&mut node).await.unwrap();
        if n > 0 {
            nodes_with_keys.insert(url);
        }
    }
    assert!(nodes_with_keys.len() >= 2, "keys on {nodes_with_keys:?}");
}
