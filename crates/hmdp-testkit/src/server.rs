//! Throw-away `redis-server` processes: one on a port of its own, one to three joined into a
//! cluster, or a primary with replicas watched by Sentinels. Tests kill, restart, freeze and
//! thaw them to play outages on a real server.

use std::{
    net::TcpListener,
    process::{Child, Command, Stdio},
    time::Duration,
};

use crate::{free_port, wait_until};

/// How long a server may take to answer its first PING, or a cluster to become ready.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A private `redis-server` on a local port (no persistence unless `extra` asks for it),
/// killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    /// Its working folder, unless `extra` names another: a replica's full sync writes an RDB
    /// file there even without persistence, and it must not land in the crate being tested.
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// A server on a free port.
    pub async fn start() -> Self {
        Self::start_on(free_port()).await
    }

    /// A server on `port`, e.g. a restart where a killed one was.
    pub async fn start_on(port: u16) -> Self {
        Self::start_with(port, &[]).await
    }

    /// A server on `port` with extra command-line arguments (cluster mode, an AOF …); returns
    /// once it answers PING.
    pub async fn start_with(port: u16, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("a folder for redis-server");
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .args(extra);
        Self::launch(command, port, dir).await
    }

    /// A Sentinel on `port` (`redis-server CONFIG --sentinel`) with the configuration lines
    /// `conf` (written into its folder, where it rewrites them); returns once it answers PING.
    pub async fn start_sentinel(port: u16, conf: &str) -> Self {
        let dir = tempfile::tempdir().expect("a folder for redis-sentinel");
        let file = dir.path().join("sentinel.conf");
        let conf = format!(
            "port {port}\nbind 127.0.0.1\ndir {}\n{conf}\n",
            dir.path().display()
        );
        std::fs::write(&file, conf).expect("write sentinel.conf");
        let mut command = Command::new("redis-server");
        command.arg(&file).arg("--sentinel");
        Self::launch(command, port, dir).await
    }

    async fn launch(mut command: Command, port: u16, dir: tempfile::TempDir) -> Self {
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        let mut server = Self {
            child: Some(child),
            port,
            _dir: dir,
        };
        let client = redis::Client::open(server.url()).unwrap();
        let what = format!("redis-server on port {port} answering PING");
        wait_until(START_TIMEOUT, &what, async || {
            if let Some(status) = server.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("redis-server on port {port} exited at start: {status}");
            }
            answers_ping(&client).await
        })
        .await;
        server
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's process id while it runs (e.g. to read its CPU time from `/proc`).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Freezes the server (SIGSTOP): connections stay open and nothing is answered, a hung
    /// Redis rather than a dead one.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = self.child.as_ref().expect("server running").id();
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet.
        let rc = unsafe { libc::kill(pid as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal}) failed");
    }

    /// Kills the server and waits for it to exit; a second call does nothing.
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

async fn answers_ping(client: &redis::Client) -> bool {
    let ping = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), ping).await,
        Ok(Ok(_))
    )
}

/// A Redis Cluster of one to three (or more) masters without replicas, made of throw-away
/// servers; killed (and its node files removed) when dropped.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers, joins them with `redis-cli --cluster create` and
    /// returns once every node reports `cluster_state:ok`.
    pub async fn start() -> Self {
        Self::with_masters(3).await
    }

    /// Starts `masters` cluster-enabled servers and returns once every node reports
    /// `cluster_state:ok`. Three or more are joined by `redis-cli --cluster create`, which
    /// refuses fewer; one or two get even slot ranges (`CLUSTER ADDSLOTSRANGE`) and meet the
    /// first node (`CLUSTER MEET`) here instead.
    pub async fn with_masters(masters: usize) -> Self {
        assert!(masters >= 1, "a cluster needs a master");
        let dir = tempfile::tempdir().unwrap();
        let dir_arg = dir.path().to_string_lossy().into_owned();
        let mut nodes: Vec<RedisServer> = Vec::new();
        for _ in 0..masters {
            let taken: Vec<u16> = nodes.iter().map(RedisServer::port).collect();
            let port = free_cluster_port(&taken);
            let conf = format!("nodes-{port}.conf");
            let mut extra = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                &conf,
                "--dir",
                &dir_arg,
            ];
            // A node learns its own address from the peers that meet it; a lone master would
            // name itself with an empty host in `CLUSTER SLOTS`, where clients look for it.
            if masters < 3 {
                extra.extend(["--cluster-announce-ip", "127.0.0.1"]);
            }
            nodes.push(RedisServer::start_with(port, &extra).await);
        }
        if masters >= 3 {
            let created = Command::new("redis-cli")
                .args(["--cluster", "create"])
                .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
                .args(["--cluster-replicas", "0", "--cluster-yes"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("redis-cli on PATH");
            assert!(created.success(), "redis-cli --cluster create failed");
        } else {
            join_by_hand(&nodes).await;
        }
        for node in &nodes {
            let mut conn = node_connection(node).await;
            let what = format!("cluster node {} reaching cluster_state:ok", node.port);
            wait_until(START_TIMEOUT, &what, async || {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                info.contains("cluster_state:ok")
            })
            .await;
        }
        Self { nodes, _dir: dir }
    }

    /// The nodes, in the order they were started.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// One `redis://` URL per node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

/// Node `i` of `n` serves the `i`-th of `n` even slot ranges; every node meets the first.
async fn join_by_hand(nodes: &[RedisServer]) {
    const SLOTS: usize = 16_384;
    let n = nodes.len();
    for (i, node) in nodes.iter().enumerate() {
        let mut conn = node_connection(node).await;
        let (first, last) = (i * SLOTS / n, (i + 1) * SLOTS / n - 1);
        let () = redis::cmd("CLUSTER")
            .arg("ADDSLOTSRANGE")
            .arg(first)
            .arg(last)
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("CLUSTER ADDSLOTSRANGE on {}: {e}", node.port));
        if i > 0 {
            let () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(nodes[0].port)
                .query_async(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("CLUSTER MEET from {}: {e}", node.port));
        }
    }
}

async fn node_connection(node: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(node.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A port that is free, and whose cluster bus port (`port + 10000`) is free too; below 55536,
/// so the bus port exists.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Which node's port serves `key`, as the cluster itself answers.
    async fn owner(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> u16 {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(conn)
            .await
            .unwrap();
        let ranges: Vec<(u16, u16, (String, u16))> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async::<Vec<redis::Value>>(conn)
            .await
            .unwrap()
            .into_iter()
            .map(|r| redis::from_redis_value(r).unwrap())
            .map(|(a, b, master): (u16, u16, Vec<redis::Value>)| {
                let host: String = redis::from_redis_value(master[0].clone()).unwrap();
                let port: u16 = redis::from_redis_value(master[1].clone()).unwrap();
                (a, b, (host, port))
            })
            .collect();
        ranges
            .iter()
            .find(|(a, b, _)| (*a..=*b).contains(&slot))
            .map(|(_, _, (_, port))| *port)
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_and_two_masters_serve_every_slot() {
        for masters in [1, 2] {
            let cluster = RedisCluster::with_masters(masters).await;
            assert_eq!(cluster.nodes().len(), masters);
            assert!(cluster.nodes().iter().all(|n| n.pid().is_some()));
            let mut conn = redis::cluster::ClusterClient::new(cluster.urls())
                .unwrap()
                .get_async_connection()
                .await
                .unwrap();
            let mut plain = node_connection(&cluster.nodes()[0]).await;
            let mut owners = std::collections::HashSet::new();
            for tag in 0..12 {
                let key = format!("k{{s{tag}}}");
                let () = redis::cmd("SET")
                    .arg(&key)
                    .arg(tag)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                let back: i64 = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                assert_eq!(back, tag);
                owners.insert(owner(&mut plain, &key).await);
            }
            assert_eq!(owners.len(), masters, "the tags reach every master");
        }
    }
}
