//! The service on a real three-master Redis Cluster: login, cached shops and the flash sale
//! all keep every multi-key operation inside one hash slot.

use std::{sync::Arc, time::Duration};

use crate::helpers::{
    Backend, Patience, RedisCluster, create_sale, login_many, spawn_app_with, wait_until,
};

/// How many keys each node of the cluster holds.
async fn keys_per_node(cluster: &RedisCluster) -> Vec<i64> {
    let mut out = Vec::new();
    for url in cluster.urls() {
        let mut c = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        out.push(redis::cmd("DBSIZE").query_async(&mut c).await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_runs_on_a_redis_cluster() {
    let cluster = RedisCluster::start().await;
    let url = cluster.urls().join(",");
    let app = Arc::new(
        spawn_app_with(Backend::Sqlite, move |c| {
            c.redis_url = Some(url);
            c.seckill.shards = 4;
            // Unpaid orders close during the test: the deadlines and the returned units on
            // each shard's slot.
            c.seckill.pay_timeout = Duration::from_secs(4);
        })
        .await,
    );
    assert!(matches!(
        app.state.redis,
        hmdp::testing::kv::RedisConn::Cluster(_)
    ));

    // Login: the code scripts touch the code key and its slot mates.
    let token = app.login("13812345678").await;
    assert!(app.get("/api/user/me", Some(&token)).await.success());
    assert_eq!(
        app.send_code("13812345678").await.status,
        429,
        "rate limit keys work"
    );

    // Shops: Bloom filter, cache with the rebuild lock, GEO.
    assert_eq!(app.get("/api/shop/1", None).await.body["data"]["id"], 1);
    assert_eq!(
        app.get("/api/shop/999999", None).await.code(),
        "shop_not_found"
    );
    let near = app
        .get(
            "/api/shop/of/type?typeId=1&current=1&x=104.08&y=30.66",
            None,
        )
        .await;
    assert!(
        !near.body["data"].as_array().unwrap().is_empty(),
        "{near:?}"
    );
    assert!(app.get("/api/shop-type/list", None).await.success());

    // The flash sale across shards, drained by the embedded worker.
    let mut vouchers = Vec::new();
    for _ in 0..4 {
        vouchers.push(create_sale(&app, 10, -60, 3600).await);
    }
    let tokens = login_many(&app, 15).await;
    let mut wins = 0;
    let mut losers = Vec::new();
    for v in &vouchers {
        for t in &tokens {
            let r = app
                .post(&format!("/api/voucher-order/seckill/{v}"), Some(t))
                .await;
            if r.success() {
                wins += 1;
            } else {
                assert_eq!(r.code(), "sold_out", "{r:?}");
                losers.push((*v, t.clone()));
            }
        }
    }
    assert_eq!(wins, 40, "10 per voucher");
    let patience = Patience::new(Duration::from_secs(20)).every(Duration::from_millis(100));
    wait_until(patience, "the 40 orders written", async || {
        let mut persisted = 0;
        for v in &vouchers {
            persisted += app
                .get(&format!("/api/voucher/seckill/{v}/stats"), None)
                .await
                .body["data"]["persisted"]
                .as_i64()
                .unwrap();
        }
        if persisted == 40 {
            Ok(())
        } else {
            Err(format!("{persisted} of 40 orders written"))
        }
    })
    .await;
    // Nobody pays: every order closes and each unit is back, in Redis and the database.
    let patience = Patience::new(Duration::from_secs(30)).every(Duration::from_millis(100));
    wait_until(patience, "the 40 units back on sale", async || {
        for v in &vouchers {
            let stats = app
                .get(&format!("/api/voucher/seckill/{v}/stats"), None)
                .await;
            let (redis, db) = (
                &stats.body["data"]["redisStock"],
                &stats.body["data"]["dbStock"],
            );
            if (redis.as_i64(), db.as_i64()) != (Some(10), Some(10)) {
                return Err(format!("voucher {v}: Redis {redis}, database {db}"));
            }
        }
        Ok(())
    })
    .await;
    for (v, t) in &losers {
        let r = app
            .post(&format!("/api/voucher-order/seckill/{v}"), Some(t))
            .await;
        assert!(r.success(), "a returned unit sells to someone else: {r:?}");
    }
    let spread = keys_per_node(&cluster).await;
    assert!(
        spread.iter().filter(|n| **n > 0).count() >= 2,
        "keys spread over the nodes: {spread:?}"
    );
}
