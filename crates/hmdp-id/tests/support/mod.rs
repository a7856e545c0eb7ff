//! Shared helpers for the integration tests: a real Redis (never mocked), a
//! random key prefix per test, key clean-up, and throw-away `redis-server`
//! processes for tests that need a private server.
#![allow(dead_code)]

use std::collections::HashSet;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redis::aio::ConnectionManager;

pub fn redis_url() -> String {
    std::env::var("HMDP_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A fresh key prefix, `t-<uuid>:`, so tests sharing a server never meet.
pub fn prefix() -> String {
    format!("t-{}:", uuid::Uuid::new_v4())
}

pub async fn conn_to(url: &str) -> ConnectionManager {
    redis::Client::open(url)
        .unwrap()
        .get_connection_manager()
        .await
        .expect("redis reachable (set HMDP_TEST_REDIS_URL)")
}

/// A connection to the shared test Redis.
pub async fn conn() -> ConnectionManager {
    conn_to(&redis_url()).await
}

/// Deletes every key under its prefix when dropped, so keys go away even
/// when a test fails half-way. Uses a blocking connection: `Drop` cannot
/// await.
pub struct Cleanup(pub String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(redis_url()) else {
            return;
        };
        let Ok(mut c) = client.get_connection() else {
            return;
        };
        let mut cursor: u64 = 0;
        loop {
            let Ok((next, keys)) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{}*", self.0))
                .arg("COUNT")
                .arg(1000)
                .query::<(u64, Vec<String>)>(&mut c)
            else {
                return;
            };
            if !keys.is_empty() {
                let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&keys).query(&mut c);
            }
            if next == 0 {
                return;
            }
            cursor = next;
        }
    }
}

pub async fn keys_under(c: &mut ConnectionManager, prefix: &str) -> Vec<String> {
    let mut cursor: u64 = 0;
    let mut out = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(c)
            .await
            .unwrap();
        out.extend(batch);
        if next == 0 {
            return out;
        }
        cursor = next;
    }
}

pub async fn get_i64(c: &mut ConnectionManager, key: &str) -> Option<i64> {
    redis::cmd("GET").arg(key).query_async(c).await.unwrap()
}

pub async fn set_i64(c: &mut ConnectionManager, key: &str, value: i64) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(c)
        .await
        .unwrap();
}

/// Panics on the first duplicate; returns the set.
pub fn assert_distinct(ids: &[i64]) -> HashSet<i64> {
    let mut seen = HashSet::with_capacity(ids.len());
    for &id in ids {
        assert!(seen.insert(id), "duplicate id {id}");
    }
    seen
}

pub fn assert_strictly_increasing(ids: &[i64]) {
    for w in ids.windows(2) {
        assert!(w[0] < w[1], "ids not increasing: {} then {}", w[0], w[1]);
    }
}

/// A `redis-server` on a free local port, killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
}

impl RedisServer {
    pub async fn start() -> RedisServer {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        let server = RedisServer {
            child: Some(child),
            port,
        };
        wait_for_ping(&server.url()).await;
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A three-master Redis Cluster without replicas, made of throw-away
/// `redis-server` processes (cluster mode on), killed when dropped.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    dir: std::path::PathBuf,
}

/// A port that is free, and whose cluster bus port (`port + 10000`) is too.
fn free_cluster_port(taken: &[u16]) -> u16 {
    loop {
        let port = 20_000 + (uuid::Uuid::new_v4().as_u128() % 9_000) as u16;
        if taken.contains(&port) {
            continue;
        }
        let a = TcpListener::bind(("127.0.0.1", port));
        let b = TcpListener::bind(("127.0.0.1", port + 10_000));
        if a.is_ok() && b.is_ok() {
            return port;
        }
    }
}

impl RedisCluster {
    pub async fn start() -> RedisCluster {
        let dir = std::env::temp_dir().join(format!("hmdp-id-cluster-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut nodes = Vec::new();
        let mut ports = Vec::new();
        for _ in 0..3 {
            let port = free_cluster_port(&ports);
            ports.push(port);
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .args(["--cluster-enabled", "yes"])
                .arg("--cluster-config-file")
                .arg(dir.join(format!("nodes-{port}.conf")))
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server on PATH");
            nodes.push(RedisServer {
                child: Some(child),
                port,
            });
        }
        let cluster = RedisCluster { nodes, dir };
        for node in &cluster.nodes {
            wait_for_ping(&node.url()).await;
        }
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(ports.iter().map(|p| format!("127.0.0.1:{p}")))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli on PATH");
        assert!(status.success(), "redis-cli --cluster create failed");
        for node in &cluster.nodes {
            let client = redis::Client::open(node.url()).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            let mut ready = false;
            for _ in 0..250 {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                if info.contains("cluster_state:ok") {
                    ready = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(
                ready,
                "cluster node {} never reached cluster_state:ok",
                node.port
            );
        }
        cluster
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn wait_for_ping(url: &str) {
    let client = redis::Client::open(url).unwrap();
    for _ in 0..150 {
        if let Ok(mut c) = client.get_multiplexed_async_connection().await {
            let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut c).await;
            if pong.is_ok() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("redis-server at {url} did not come up");
}
