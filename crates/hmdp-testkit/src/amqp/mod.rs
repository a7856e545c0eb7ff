//! RabbitMQ for tests: a throw-away vhost per test on the shared broker, and a TCP proxy in
//! front of it that a test can cut.
//!
//! Test binaries run their tests in parallel, several binaries may run at once, and they all
//! share one broker. Queue and exchange names alone would not keep them apart (a consumer that
//! redeclares a queue, a purge, a policy), so each test gets a vhost of its own, made with
//! `rabbitmqctl` because the broker has no management plugin. A vhost left behind by a run that
//! crashed is recognised by the dead pid in its name and deleted by the next run.
//!
//! Fault tests need a broker that goes away without stopping the shared one: [`CuttableProxy`]
//! forwards a local port to it and can drop every connection and refuse new ones until it is
//! restored, on the same port, so a client configured with the proxy's URL reconnects to it.
//! Tests about what a restarted broker keeps use a private node, [`RabbitNode`].

mod node;

use std::{
    collections::HashMap,
    net::{SocketAddr, TcpListener, ToSocketAddrs},
    os::fd::{AsRawFd, RawFd},
    process::{Command, Stdio},
    sync::{
        Arc, Mutex, Once,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{io::AsyncWriteExt, net::TcpStream, task::JoinHandle};

use crate::free_port;

pub use node::RabbitNode;

/// The shared test broker, without a vhost: `HMDP_TEST_AMQP_URL`, default
/// `amqp://guest:guest@127.0.0.1:5672`.
pub fn amqp_url() -> String {
    std::env::var("HMDP_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672".into())
        .trim_end_matches('/')
        .to_owned()
}

/// The socket address of the host and port in an AMQP URL (port 5672 when it names none), e.g.
/// the target of a [`CuttableProxy`] in front of the shared broker.
pub fn amqp_socket_addr(url: &str) -> SocketAddr {
    let host_port = Url::split(url).host_port;
    let has_port = match host_port.rfind(']') {
        Some(bracket) => host_port[bracket..].contains(':'),
        None => host_port.contains(':'),
    };
    let with_port = if has_port {
        host_port.to_owned()
    } else {
        format!("{host_port}:5672")
    };
    with_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .unwrap_or_else(|| panic!("no socket address for {with_port} (from the URL {url})"))
}

/// How long one `rabbitmqctl` call may take; each starts an Erlang VM (about a second, more
/// on a loaded machine).
const RABBITMQCTL_TIMEOUT: Duration = Duration::from_secs(60);

/// Prefix of every vhost [`AmqpVhost`] makes; what follows is `<pid>-<counter>-<random>`.
const VHOST_PREFIX: &str = "hmdp-test-";

/// A vhost of its own on the shared broker ([`amqp_url`]) for one test, with full permissions
/// for the URL's user (guest by default); deleted when dropped.
///
/// Made with one `rabbitmqctl import_definitions` call (about a second). `rabbitmqctl` must
/// reach the broker of `HMDP_TEST_AMQP_URL`: Debian's runs as root or the `rabbitmq` user and
/// talks to the local node; `HMDP_TEST_RABBITMQCTL` names another command for it (split on
/// whitespace, e.g. `docker exec rabbit rabbitmqctl`).
pub struct AmqpVhost {
    name: String,
    url: String,
}

impl AmqpVhost {
    /// Creates `hmdp-test-<pid>-<counter>-<random>` and grants the URL's user configure, write
    /// and read on everything in it. The first call in a process also starts deleting, in the
    /// background, test vhosts whose process is gone.
    ///
    /// Panics, saying what to install or set, when `rabbitmqctl` is missing or fails.
    pub async fn create() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        clean_stale_vhosts_in_background();
        let random = uuid::Uuid::new_v4().simple().to_string();
        let name = format!(
            "{VHOST_PREFIX}{}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            &random[..8]
        );
        let base = amqp_url();
        let user = Url::split(&base).user();
        let definitions = format!(
            r#"{{"vhosts":[{{"name":{name}}}],"permissions":[{{"user":{user},"vhost":{name},"configure":".*","write":".*","read":".*"}}]}}"#,
            name = json_string(&name),
            user = json_string(&user),
        );
        rabbitmqctl(&["-q", "import_definitions"], Some(definitions)).await;
        let url = Url::split(&base).with_path(&format!("/{}", percent_encode(&name)));
        Self { name, url }
    }

    /// The vhost's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The broker's URL with this vhost as its path, percent-encoded.
    pub fn url(&self) -> String {
        self.url.clone()
    }
}

impl Drop for AmqpVhost {
    /// Starts `rabbitmqctl delete_vhost` and returns without waiting for it; a vhost that
    /// survives (the process ended first) is deleted by a later run's stale-vhost cleanup.
    fn drop(&mut self) {
        spawn_detached(&["-q", "delete_vhost", &self.name]);
    }
}

/// The `rabbitmqctl` command: `HMDP_TEST_RABBITMQCTL` split on whitespace, or `rabbitmqctl`
/// (also looked for in /usr/sbin, which is not on every user's PATH).
fn rabbitmqctl_command() -> Vec<String> {
    if let Ok(command) = std::env::var("HMDP_TEST_RABBITMQCTL") {
        let words: Vec<String> = command.split_whitespace().map(str::to_owned).collect();
        if !words.is_empty() {
            return words;
        }
    }
    let sbin = std::path::Path::new("/usr/sbin/rabbitmqctl");
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join("rabbitmqctl").exists()));
    if !on_path && sbin.exists() {
        return vec![sbin.to_string_lossy().into_owned()];
    }
    vec!["rabbitmqctl".to_owned()]
}

/// Runs `rabbitmqctl args…` (with `stdin` as its input) and returns its standard output;
/// panics with what it printed and a hint when it cannot be run or fails.
async fn rabbitmqctl(args: &[&str], stdin: Option<String>) -> String {
    let command = rabbitmqctl_command();
    let shown = format!("{} {}", command.join(" "), args.join(" "));
    let mut child = tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `{shown}` ({e}): install rabbitmq-server (scripts/test.sh does), or \
                 set HMDP_TEST_RABBITMQCTL to a command that manages the broker of \
                 HMDP_TEST_AMQP_URL"
            )
        });
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("`{shown}`: writing its input: {e}"));
    }
    let output = tokio::time::timeout(RABBITMQCTL_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("`{shown}` did not finish within {RABBITMQCTL_TIMEOUT:?}"))
        .unwrap_or_else(|e| panic!("`{shown}`: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "`{shown}` failed ({}): {}\n{}\nIt must reach the broker of HMDP_TEST_AMQP_URL (is \
         rabbitmq-server running? scripts/test.sh starts it) and, with Debian's rabbitmqctl, run \
         as root or the rabbitmq user; HMDP_TEST_RABBITMQCTL names another command.",
        output.status,
        stdout.trim(),
        String::from_utf8_lossy(&output.stderr).trim(),
    );
    stdout
}

/// Starts `rabbitmqctl args…` without waiting for it (a thread reaps it); errors are ignored.
fn spawn_detached(args: &[&str]) {
    let command = rabbitmqctl_command();
    let child = Command::new(&command[0])
        .args(&command[1..])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    if let Ok(mut child) = child {
        std::thread::spawn(move || child.wait());
    }
}

/// Once per process: deletes, in a background thread, the test vhosts whose process is gone.
fn clean_stale_vhosts_in_background() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("hmdp-stale-vhosts".into())
            .spawn(clean_stale_vhosts);
    });
}

/// Deletes, one after the other, the vhosts named `hmdp-test-<pid>-…` whose pid is not a live
/// process; blocking, best effort. Pids are this machine's: a broker shared by several machines
/// would need names that say whose they are.
fn clean_stale_vhosts() {
    let command = rabbitmqctl_command();
    let Ok(listed) = Command::new(&command[0])
        .args(&command[1..])
        .args(["-q", "list_vhosts", "name"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    else {
        return;
    };
    for name in String::from_utf8_lossy(&listed.stdout).lines() {
        if vhost_pid(name).is_some_and(|pid| !process_alive(pid)) {
            let _ = Command::new(&command[0])
                .args(&command[1..])
                .args(["-q", "delete_vhost", name])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The pid in a test vhost's name, `hmdp-test-<pid>-<counter>-<random>`.
fn vhost_pid(name: &str) -> Option<u32> {
    let mut parts = name.trim().strip_prefix(VHOST_PREFIX)?.split('-');
    let pid = parts.next()?.parse().ok()?;
    (parts.count() == 2).then_some(pid)
}

fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// An AMQP URL in its parts: `scheme://[userinfo@]host_port[path][rest]`, where `path` is
/// empty or starts with `/` and `rest` is the query and fragment.
struct Url<'a> {
    scheme: &'a str,
    userinfo: Option<&'a str>,
    host_port: &'a str,
    path: &'a str,
    rest: &'a str,
}

impl<'a> Url<'a> {
    fn split(url: &'a str) -> Self {
        let (scheme, after) = url
            .split_once("://")
            .unwrap_or_else(|| panic!("not a URL: {url}"));
        let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
        let (authority, path_and_rest) = after.split_at(authority_end);
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((userinfo, host_port)) => (Some(userinfo), host_port),
            None => (None, authority),
        };
        let path_end = path_and_rest
            .find(['?', '#'])
            .unwrap_or(path_and_rest.len());
        Self {
            scheme,
            userinfo,
            host_port,
            path: &path_and_rest[..path_end],
            rest: &path_and_rest[path_end..],
        }
    }

    /// The user name, percent-decoded; `guest` (the broker's default) when the URL has none.
    fn user(&self) -> String {
        match self.userinfo {
            Some(info) => percent_decode(info.split(':').next().unwrap_or_default()),
            None => "guest".to_owned(),
        }
    }

    /// The URL with `path` (empty, or starting with `/`) instead of its own.
    fn with_path(&self, path: &str) -> String {
        self.rebuild(self.host_port, path)
    }

    fn rebuild(&self, host_port: &str, path: &str) -> String {
        let userinfo = self.userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        format!("{}://{userinfo}{host_port}{path}{}", self.scheme, self.rest)
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters, as a vhost in a URL path
/// must be (`/` is `%2F`).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TCP proxy on `127.0.0.1` in front of a server (the broker, say) that a test can cut: every
/// open connection is closed at once and new ones are refused (the port stays reserved, nothing
/// listens on it), until [`restore`](Self::restore) makes it accept and forward again on the
/// same port. Dropping it closes everything.
///
/// Cutting stops the listening socket with `shutdown(2)`, which on Linux leaves it bound, so a
/// connect is refused the way it is when the server is down, and nobody else can take the port.
/// Must be used inside a Tokio runtime.
pub struct CuttableProxy {
    addr: SocketAddr,
    target: SocketAddr,
    /// Owns the bound port for the proxy's whole life; accepting goes through a duplicate of
    /// it, registered with Tokio afresh after each restore.
    listener: TcpListener,
    shared: Arc<Mutex<ProxyState>>,
    accept: Mutex<Option<JoinHandle<()>>>,
}

struct ProxyState {
    cut: bool,
    /// Counts cuts; a connection accepted before the latest one is not forwarded.
    epoch: u64,
    next_id: u64,
    /// The two sockets of every forwarded connection, shut down by a cut.
    open: HashMap<u64, [RawFd; 2]>,
}

impl CuttableProxy {
    /// A proxy on a free local port forwarding every connection to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = bind_reserved();
        let addr = listener.local_addr().unwrap();
        let proxy = Self {
            addr,
            target,
            listener,
            shared: Arc::new(Mutex::new(ProxyState {
                cut: false,
                epoch: 0,
                next_id: 0,
                open: HashMap::new(),
            })),
            accept: Mutex::new(None),
        };
        proxy.spawn_accept(0);
        proxy
    }

    /// Where clients connect: `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The proxy's port, the same for its whole life.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Where the proxy forwards to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// `url` with its host and port replaced by the proxy's (user, vhost and query kept).
    pub fn via(&self, url: &str) -> String {
        let parts = Url::split(url);
        parts.rebuild(&self.addr.to_string(), parts.path)
    }

    /// Closes every forwarded connection (both its client and its server side) and refuses
    /// new ones until [`restore`](Self::restore); done by the time it returns. Cutting a cut
    /// proxy does nothing.
    pub fn cut(&self) {
        let mut state = self.shared.lock().unwrap();
        if state.cut {
            return;
        }
        state.cut = true;
        state.epoch += 1;
        if let Some(task) = self.accept.lock().unwrap().take() {
            task.abort();
        }
        // SAFETY: shutdown(2) on a socket this proxy owns. On a listening socket it stops
        // listening (queued connections are reset) and keeps the explicitly bound port.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RD) };
        for fd in state.open.values().flatten() {
            // SAFETY: the fds in `open` belong to live connections: a connection leaves the
            // map, under this lock, before its sockets are closed.
            unsafe { libc::shutdown(*fd, libc::SHUT_RDWR) };
        }
    }

    /// Accepts and forwards again, on the same port. Restoring a proxy that is not cut does
    /// nothing.
    pub fn restore(&self) {
        let mut state = self.shared.lock().unwrap();
        if !state.cut {
            return;
        }
        // SAFETY: listen(2) on the bound socket this proxy owns.
        let rc = unsafe { libc::listen(self.listener.as_raw_fd(), 1024) };
        assert_eq!(
            rc,
            0,
            "listening on {} again: {}",
            self.addr,
            std::io::Error::last_os_error()
        );
        state.cut = false;
        self.spawn_accept(state.epoch);
    }

    /// Whether the proxy is cut.
    pub fn is_cut(&self) -> bool {
        self.shared.lock().unwrap().cut
    }

    /// Accepts on a fresh duplicate of the listening socket (a registration that never saw the
    /// hang-up of an earlier cut) and forwards each connection in a task of its own.
    fn spawn_accept(&self, epoch: u64) {
        let std_listener = self
            .listener
            .try_clone()
            .expect("duplicate the proxy's socket");
        std_listener.set_nonblocking(true).unwrap();
        let listener = tokio::net::TcpListener::from_std(std_listener)
            .expect("CuttableProxy used inside a Tokio runtime");
        let shared = self.shared.clone();
        let target = self.target;
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((client, _)) => {
                        tokio::spawn(forward(client, target, shared.clone(), epoch));
                    }
                    // Out of file descriptors and the like: try again a little later.
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        });
        *self.accept.lock().unwrap() = Some(task);
    }
}

impl Drop for CuttableProxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// A listener on `127.0.0.1` bound to an explicit port, so that shutting it down keeps the
/// port (a socket bound to port 0 gives its port back when it stops listening).
fn bind_reserved() -> TcpListener {
    let mut last_error = None;
    for _ in 0..20 {
        match TcpListener::bind(("127.0.0.1", free_port())) {
            Ok(listener) => return listener,
            Err(e) => last_error = Some(e),
        }
    }
    panic!("no port for a proxy: {last_error:?}");
}

/// One forwarded connection; leaves the proxy's map before its sockets close.
struct Forwarded {
    id: u64,
    shared: Arc<Mutex<ProxyState>>,
    client: TcpStream,
    server: TcpStream,
}

impl Drop for Forwarded {
    fn drop(&mut self) {
        if let Ok(mut state) = self.shared.lock() {
            state.open.remove(&self.id);
        }
    }
}

async fn forward(
    client: TcpStream,
    target: SocketAddr,
    shared: Arc<Mutex<ProxyState>>,
    epoch: u64,
) {
    // A server that is down closes the client's connection, as the server would have.
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let mut conn = {
        let mut state = shared.lock().unwrap();
        if state.cut || state.epoch != epoch {
            return;
        }
        let id = state.next_id;
        state.next_id += 1;
        state
            .open
            .insert(id, [client.as_raw_fd(), server.as_raw_fd()]);
        Forwarded {
            id,
            shared: shared.clone(),
            client,
            server,
        }
    };
    let _ = tokio::io::copy_bidirectional(&mut conn.client, &mut conn.server).await;
}

#[cfg(test)]
mod tests;
