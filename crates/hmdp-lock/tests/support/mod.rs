//! Shared helpers for the integration tests: a real Redis (never mocked),
//! a random key prefix per test, and throw-away `redis-server` processes.
#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hmdp_lock::LockClient;
use redis::aio::ConnectionManager;

pub fn redis_url() -> String {
    std::env::var("HMDP_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

pub fn prefix() -> String {
    format!("t-{}:", uuid::Uuid::new_v4())
}

pub async fn conn_for(url: &str) -> (redis::Client, ConnectionManager) {
    let client = redis::Client::open(url).expect("valid redis url");
    let conn = client
        .get_connection_manager()
        .await
        .expect("redis reachable (set HMDP_TEST_REDIS_URL)");
    (client, conn)
}

/// A connection manager whose commands never time out on their own, so
/// only the lock crate's own limits bound a call to a hung server.
pub async fn conn_without_response_timeout(url: &str) -> (redis::Client, ConnectionManager) {
    let client = redis::Client::open(url).expect("valid redis url");
    let config = redis::aio::ConnectionManagerConfig::new().set_response_timeout(None);
    let conn = client
        .get_connection_manager_with_config(config)
        .await
        .expect("redis reachable");
    (client, conn)
}

/// A lock client on the shared test Redis with the given prefix.
pub async fn lock_client(prefix: &str) -> LockClient {
    lock_client_with(prefix, |b| b).await
}

pub async fn lock_client_with(
    prefix: &str,
    f: impl FnOnce(
        hmdp_lock::LockClientBuilder<ConnectionManager>,
    ) -> hmdp_lock::LockClientBuilder<ConnectionManager>,
) -> LockClient {
    let (client, conn) = conn_for(&redis_url()).await;
    f(LockClient::builder(conn)
        .subscriber(client)
        .key_prefix(prefix))
    .build()
    .expect("valid lock client")
}

/// A plain connection for inspecting keys behind the locks' backs.
pub async fn raw() -> ConnectionManager {
    conn_for(&redis_url()).await.1
}

/// A `redis-server` on a free local port, killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
}

impl RedisServer {
    pub async fn start() -> RedisServer {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
            l.local_addr().unwrap().port()
        };
        Self::start_on(port).await
    }

    /// Starts (or restarts) a server on a given port.
    pub async fn start_on(port: u16) -> RedisServer {
        Self::start_with(port, &[]).await
    }

    async fn start_with(port: u16, extra: &[&str]) -> RedisServer {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        let server = RedisServer {
            child: Some(child),
            port,
        };
        let client = redis::Client::open(server.url()).unwrap();
        for _ in 0..100 {
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

    fn free_port() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        l.local_addr().unwrap().port()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is
    /// answered — a hung Redis, not a dead one.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("server running").id();
        let status = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .expect("kill on PATH");
        assert!(status.success(), "kill {sig} {pid} failed");
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

/// A three-master Redis Cluster (no replicas) of throw-away processes.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    dir: std::path::PathBuf,
}

impl RedisCluster {
    pub async fn start() -> RedisCluster {
        let dir = std::env::temp_dir().join(format!("hmdp-lock-cluster-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut nodes = Vec::new();
        for _ in 0..3 {
            let port = RedisServer::free_port();
            let conf = format!("nodes-{port}.conf");
            let dir_s = dir.to_string_lossy().into_owned();
            let extra = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                conf.as_str(),
                "--dir",
                dir_s.as_str(),
            ];
            nodes.push(RedisServer::start_with(port, &extra).await);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli on PATH");
        assert!(status.success(), "redis-cli --cluster create failed");
        let cluster = RedisCluster { nodes, dir };
        for node in &cluster.nodes {
            let client = redis::Client::open(node.url()).unwrap();
            let mut ok = false;
            for _ in 0..250 {
                let mut c = client.get_multiplexed_async_connection().await.unwrap();
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                if info.contains("cluster_state:ok") {
                    ok = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(ok, "cluster did not become ready");
        }
        cluster
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Deletes every key under `prefix` on the shared Redis (fencing counters
/// and test data have no TTL).
pub async fn cleanup(prefix: &str) {
    let mut conn = raw().await;
    let mut iter: redis::AsyncIter<String> =
        redis::AsyncCommands::scan_match(&mut conn, format!("{prefix}*"))
            .await
            .unwrap();
    let mut keys = Vec::new();
    while let Some(k) = futures_util::StreamExt::next(&mut iter).await {
        keys.push(k.unwrap());
    }
    drop(iter);
    if !keys.is_empty() {
        let _: i64 = redis::AsyncCommands::del(&mut conn, keys).await.unwrap();
    }
}
