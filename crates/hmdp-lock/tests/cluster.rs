//! The locks over `redis::cluster_async::ClusterConnection` on a real
//! three-master Redis Cluster started by the test.

mod support;

use std::time::Duration;

use hmdp_lock::{LockClient, LockKind, LockOptions};
use hmdp_testkit::{RedisCluster, unique_prefix};
use redis::cluster::ClusterClient;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_on_redis_cluster() {
    let cluster = RedisCluster::start().await;
    let urls = cluster.urls();
    let conn = ClusterClient::new(urls.clone())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let p = unique_prefix();
    // Subscriber on one node only: PUBLISH is broadcast cluster-wide.
    let locks = LockClient::builder(conn.clone())
        .subscriber(redis::Client::open(urls[0].as_str()).unwrap())
        .key_prefix(&p)
        .retry_interval(Duration::from_secs(5))
        .build()
        .unwrap();
    let others = LockClient::builder(conn)
        .subscriber(redis::Client::open(urls[1].as_str()).unwrap())
        .key_prefix(&p)
        .retry_interval(Duration::from_secs(5))
        .build()
        .unwrap();

    // Names spread over all three masters' slots.
    for name in ["a", "b", "c", "d", "e", "f"] {
        for kind in [LockKind::Reentrant, LockKind::Simple] {
            let opts = LockOptions::new().kind(kind).fencing(true);
            let lock = locks.lock_with(name, opts).unwrap();
            let g = lock
                .try_lock(Duration::ZERO, Some(Duration::from_secs(10)))
                .await
                .unwrap()
                .expect("free");
            let t1 = g.fencing_token().unwrap();
            if kind == LockKind::Reentrant {
                let inner = g.reenter().await.unwrap().unwrap();
                assert!(inner.unlock().await.unwrap());
            }
            // A waiter on another client (subscribed via another node) wakes
            // promptly on unlock.
            let wlock = others.lock_with(name, opts).unwrap();
            let task = tokio::spawn(async move {
                let got = wlock
                    .try_lock(Duration::from_secs(5), Some(Duration::from_secs(10)))
                    .await
                    .unwrap()
                    .expect("acquired after unlock");
                (got.fencing_token().unwrap(), Instant::now(), got)
            });
            support::wait_for_waiter(&urls, lock.channel()).await;
            let unlocked_at = Instant::now();
            assert!(g.unlock().await.unwrap());
            let (t2, at, g2) = task.await.unwrap();
            assert!(t2 > t1);
            assert!(
                at - unlocked_at < Duration::from_millis(300),
                "{name}: woke after {:?}",
                at - unlocked_at
            );
            assert!(g2.unlock().await.unwrap());
            assert!(!lock.is_locked().await.unwrap());
            // Next kind uses a fresh key type.
            lock.force_unlock().await.unwrap();
        }
    }

    // Watchdog renewals route to the right node too.
    let wd = LockClient::builder(
        ClusterClient::new(urls.clone())
            .unwrap()
            .get_async_connection()
            .await
            .unwrap(),
    )
    .key_prefix(&p)
    .watchdog_timeout(Duration::from_millis(600))
    .build()
    .unwrap();
    let lock = wd.lock("wd").unwrap();
    let g = lock.lock().await.unwrap();
    // Not a wait: held past the 600 ms lease, which only renewals extend.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(!g.is_lost());
    assert!(lock.is_locked().await.unwrap());
    assert!(g.unlock().await.unwrap());
}
