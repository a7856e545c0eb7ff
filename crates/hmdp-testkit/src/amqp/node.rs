//! A private RabbitMQ node, for the tests where the broker itself goes down and comes back:
//! the shared one cannot be restarted under the other tests' feet, and a cut proxy does not
//! show what a restarted broker keeps (durable queues, persistent messages) and what it loses.

use std::{
    io::{self, Read, Write},
    net::{SocketAddr, TcpStream},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        OnceLock,
        atomic::{AtomicU64, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use crate::{free_port, wait_until};

/// How long a node may take to accept AMQP connections, and to stop.
const START_TIMEOUT: Duration = Duration::from_secs(120);
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// Debian keeps the real scripts here; /usr/sbin's wrappers run them as the rabbitmq user with
/// /var/lib/rabbitmq as the home and logs in /var/log/rabbitmq, the shared node's.
const DEBIAN_SCRIPTS: &str = "/usr/lib/rabbitmq/bin";

/// A RabbitMQ node of a test's own (`rabbitmq-server` under a temporary directory: its data,
/// logs, config, Erlang cookie; no plugins), on a free local port, with the default `guest`
/// user. [`restart`](Self::restart) keeps the data directory, so durable queues and persistent
/// messages survive it; dropping the node kills it and removes the directory.
///
/// Not cheap: a start takes about 9 s on the 2-core test machine (8 s until the AMQP port
/// opens, 1 s for `rabbitmqctl await_startup`), a restart about 11 s (2 s to stop), a start
/// after a kill about 10 s, more under load. It runs as the test's own user (root is not
/// needed) with `HOME` in the directory, where the node and its CLI find their Erlang cookie,
/// and registers with the machine's epmd like any Erlang node. If the test process dies
/// without dropping it (Ctrl-C, a kill), the node gets SIGTERM and stops; its directory stays
/// behind in the temp dir as `hmdp-rabbit-*`.
pub struct RabbitNode {
    dir: tempfile::TempDir,
    node: String,
    port: u16,
    dist_port: u16,
    /// `rabbitmq-server` while the node runs, leader of a process group of its own.
    child: Option<Child>,
}

impl RabbitNode {
    /// Starts a node and returns once it accepts AMQP connections and has finished booting.
    pub async fn start() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let dir = tempfile::Builder::new()
            .prefix("hmdp-rabbit-")
            .tempdir()
            .unwrap();
        let node = format!(
            "hmdp-test-{}-{}@localhost",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let port = free_port();
        let config = format!("listeners.tcp.local = 127.0.0.1:{port}\n");
        std::fs::write(dir.path().join("rabbitmq.conf"), config).unwrap();
        std::fs::write(dir.path().join("enabled_plugins"), "[].\n").unwrap();
        // Instead of /etc/rabbitmq/rabbitmq-env.conf, which names the shared node.
        std::fs::write(dir.path().join("rabbitmq-env.conf"), "").unwrap();
        let mut node = Self {
            dir,
            node,
            port,
            dist_port: free_port(),
            child: None,
        };
        node.launch().await;
        node
    }

    /// `amqp://guest:guest@127.0.0.1:<port>`, without a vhost (the default one, `/`).
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}", self.port)
    }

    /// Where it accepts AMQP connections.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The AMQP port, the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The Erlang node name, `hmdp-test-<pid>-<n>@localhost`.
    pub fn node_name(&self) -> &str {
        &self.node
    }

    /// Whether the node runs (not stopped or killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Stops the node cleanly (`rabbitmqctl stop`, which closes every connection first) and
    /// returns once it has exited; stopping a stopped node does nothing.
    pub async fn stop(&mut self) {
        if self.child.is_none() {
            return;
        }
        self.rabbitmqctl(&["stop"]).await;
        let mut child = self.child.take().unwrap();
        let what = format!("{} exiting after rabbitmqctl stop", self.node);
        wait_until(STOP_TIMEOUT, &what, async || {
            child.try_wait().unwrap().is_some()
        })
        .await;
        self.wait_gone().await;
    }

    /// Kills the node (SIGKILL to all its processes: connections drop without a close, nothing
    /// is flushed) and returns once it is gone; killing a stopped node does nothing.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the process group the node was started in.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.wait();
            self.wait_gone().await;
        }
    }

    /// Stops the node if it runs, then starts it again on the same port with the same data;
    /// returns once it has booted.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.launch().await;
    }

    async fn launch(&mut self) {
        let dir = self.dir.path();
        let log = std::fs::File::create(dir.join("rabbitmq-server.out")).unwrap();
        let mut command = Command::new(script("rabbitmq-server"));
        self.environment(&mut command)
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_PLUGINS_EXPAND_DIR", dir.join("plugins-expanded"))
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0);
        let child = spawn_tied_to_process(command).unwrap_or_else(|e| {
            panic!(
                "cannot run rabbitmq-server ({e}): install rabbitmq-server (scripts/test.sh does)"
            )
        });
        self.child = Some(child);
        let what = format!("{} accepting AMQP on port {}", self.node, self.port);
        let started = Instant::now();
        wait_until(START_TIMEOUT, &what, async || {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "rabbitmq-server for {} exited at start ({status}) after {:?}:\n{}",
                    self.node,
                    started.elapsed(),
                    self.log_tail()
                );
            }
            TcpStream::connect(self.addr()).is_ok()
        })
        .await;
        self.rabbitmqctl(&["await_startup"]).await;
    }

    /// The environment shared by the server and its CLI: the node, the cookie's home, no
    /// system-wide env file.
    fn environment<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        command
            .env("HOME", self.dir.path())
            .env("RABBITMQ_NODENAME", &self.node)
            .env(
                "RABBITMQ_CONF_ENV_FILE",
                self.dir.path().join("rabbitmq-env.conf"),
            )
    }

    /// Runs `rabbitmqctl -n <node> args…` on a blocking thread; panics with its output and the
    /// node's log when it fails.
    async fn rabbitmqctl(&self, args: &[&str]) {
        let mut command = Command::new(script("rabbitmqctl"));
        self.environment(&mut command)
            .args(["-q", "-n", &self.node])
            .args(args)
            .args(["--timeout", &START_TIMEOUT.as_secs().to_string()])
            .stdin(Stdio::null());
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("cannot run rabbitmqctl ({e}): install rabbitmq-server"));
        assert!(
            output.status.success(),
            "rabbitmqctl -n {} {} failed ({}): {}\n{}\nnode log:\n{}",
            self.node,
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stdout).trim(),
            String::from_utf8_lossy(&output.stderr).trim(),
            self.log_tail()
        );
    }

    /// Waits until the node's port is closed and epmd has forgotten its name, so that it can
    /// start again under both.
    async fn wait_gone(&self) {
        let what = format!("{} gone from its port and epmd", self.node);
        wait_until(STOP_TIMEOUT, &what, async || self.gone()).await;
    }

    fn gone(&self) -> bool {
        TcpStream::connect(self.addr()).is_err() && !epmd_names().contains(&self.short_name())
    }

    fn short_name(&self) -> String {
        self.node.split('@').next().unwrap().to_owned()
    }

    /// The end of what the server printed and of its log file, for a failure message.
    fn log_tail(&self) -> String {
        let mut tail = String::new();
        let logs = [
            self.dir.path().join("rabbitmq-server.out"),
            self.dir
                .path()
                .join("log")
                .join(format!("{}.log", self.node)),
        ];
        for path in logs {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(30);
            tail.push_str(&format!(
                "== {}\n{}\n",
                path.display(),
                lines[start..].join("\n")
            ));
        }
        tail
    }
}

impl Drop for RabbitNode {
    /// Kills the node; the directory goes with the `TempDir`.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the process group the node was started in.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.wait();
        }
    }
}

/// Spawns `command` so that it gets SIGTERM when the test process ends, however it ends
/// (`PR_SET_PDEATHSIG`). That signal follows the thread that spawned the child, not the
/// process, so the spawning is done by one thread that lives as long as the process.
fn spawn_tied_to_process(mut command: Command) -> io::Result<Child> {
    type Request = (Command, mpsc::Sender<io::Result<Child>>);
    static SPAWNER: OnceLock<mpsc::Sender<Request>> = OnceLock::new();
    // SAFETY: prctl(2) is async-signal-safe; the closure allocates nothing.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
    }
    let spawner = SPAWNER.get_or_init(|| {
        let (requests, incoming) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("hmdp-rabbit-spawner".into())
            .spawn(move || {
                for (mut command, reply) in incoming {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("a thread to spawn RabbitMQ nodes from");
        requests
    });
    let (reply, answer) = mpsc::channel();
    spawner.send((command, reply)).unwrap();
    answer.recv().unwrap()
}

/// A RabbitMQ script: Debian's real one (not the /usr/sbin wrapper, which switches to the
/// rabbitmq user and the shared node's home), else the one on PATH.
fn script(name: &str) -> PathBuf {
    let debian = Path::new(DEBIAN_SCRIPTS).join(name);
    if debian.exists() {
        debian
    } else {
        PathBuf::from(name)
    }
}

/// The node names epmd knows, asked in its own protocol (NAMES_REQ); empty when no epmd runs.
fn epmd_names() -> Vec<String> {
    let port = std::env::var("ERL_EPMD_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(4369u16);
    let Ok(mut epmd) = TcpStream::connect(("127.0.0.1", port)) else {
        return Vec::new();
    };
    let _ = epmd.set_read_timeout(Some(Duration::from_secs(5)));
    let mut answer = Vec::new();
    if epmd.write_all(&[0, 1, 110]).is_err() || epmd.read_to_end(&mut answer).is_err() {
        return Vec::new();
    }
    // Its own port (4 bytes), then lines of `name <name> at port <port>`.
    String::from_utf8_lossy(answer.get(4..).unwrap_or_default())
        .lines()
        .filter_map(|line| line.strip_prefix("name ")?.split(" at port ").next())
        .map(str::to_owned)
        .collect()
}
