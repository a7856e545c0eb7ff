//! The service on a real three-master Redis Cluster: login, cached shops and the flash sale
//! all keep every multi-key operation inside one hash slot.

use std::{
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use crate::{
    failures::RedisProcess,
    helpers::{Backend, free_port, spawn_app_with},
    seckill::{create_sale, login_many},
};

/// Three cluster-enabled redis-servers joined into one cluster (no replicas).
struct Cluster {
    _nodes: Vec<RedisProcess>,
    ports: Vec<u16>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut nodes = Vec::new();
        let mut ports = Vec::new();
        for _ in 0..3 {
            let port = free_port();
            let conf = format!("nodes-{port}.conf");
            let d = dir.path().to_string_lossy().into_owned();
            nodes.push(
                RedisProcess::start_with(
                    port,
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        &conf,
                        "--dir",
                        &d,
                    ],
                )
                .await,
            );
            ports.push(port);
        }
        let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let ok = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli on PATH")
            .success();
        assert!(ok, "redis-cli --cluster create failed");
        for p in &ports {
            let client = redis::Client::open(format!("redis://127.0.0.1:{p}")).unwrap();
            let started = Instant::now();
            loop {
                let mut c = client.get_multiplexed_async_connection().await.unwrap();
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "cluster not ready"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Self {
            _nodes: nodes,
            ports,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    async fn keys_per_node(&self) -> Vec<i64> {
        let mut out = Vec::new();
        for p in &self.ports {
            let mut c = redis::Client::open(format!("redis://127.0.0.1:{p}"))
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            out.push(redis::cmd("DBSIZE").query_async(&mut c).await.unwrap());
        }
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_runs_on_a_redis_cluster() {
    let cluster = Cluster::start().await;
    let url = cluster.url();
    let app = Arc::new(
        spawn_app_with(Backend::Sqlite, move |c| {
            c.redis_url = Some(url);
            c.seckill.shards = 4;
        })
        .await,
    );
    assert!(matches!(app.state.redis, hmdp::kv::RedisConn::Cluster(_)));

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
    for v in &vouchers {
        for t in &tokens {
            let r = app
                .post(&format!("/api/voucher-order/seckill/{v}"), Some(t))
                .await;
            if r.success() {
                wins += 1;
            } else {
                assert_eq!(r.code(), "sold_out", "{r:?}");
            }
        }
    }
    assert_eq!(wins, 40, "10 per voucher");
    let started = Instant::now();
    loop {
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
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{persisted} of 40 orders written"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let spread = cluster.keys_per_node().await;
    assert!(
        spread.iter().filter(|n| **n > 0).count() >= 2,
        "keys spread over the nodes: {spread:?}"
    );
}
