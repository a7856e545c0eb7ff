//! Throw-away `redis-server` processes: one on a port of its own, three joined into a
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

/// A Redis Cluster of three masters without replicas, made of throw-away servers; killed (and
/// its node files removed) when dropped.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers, joins them with `redis-cli --cluster create` and
    /// returns once every node reports `cluster_state:ok`.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let dir_arg = dir.path().to_string_lossy().into_owned();
        let mut nodes: Vec<RedisServer> = Vec::new();
        for _ in 0..3 {
            let taken: Vec<u16> = nodes.iter().map(RedisServer::port).collect();
            let port = free_cluster_port(&taken);
            let conf = format!("nodes-{port}.conf");
            let extra = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                &conf,
                "--dir",
                &dir_arg,
            ];
            nodes.push(RedisServer::start_with(port, &extra).await);
        }
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
        for node in &nodes {
            let mut conn = redis::Client::open(node.url())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
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
