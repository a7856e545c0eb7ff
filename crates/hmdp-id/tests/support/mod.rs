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

/// Deletes every key under `prefix`. Call at the end of each test.
pub async fn cleanup(prefix: &str) {
    let mut c = conn().await;
    let keys = keys_under(&mut c, prefix).await;
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL")
            .arg(&keys)
            .query_async(&mut c)
            .await
            .unwrap();
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
        let client = redis::Client::open(server.url()).unwrap();
        for _ in 0..150 {
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut c).await;
                if pong.is_ok() {
                    return server;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("redis-server on port {port} did not come up");
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
