//! The service on port 0 for one test: its own database, Redis key prefix and captured SMS,
//! and a client that decodes the envelope.

use std::{
    net::SocketAddr,
    path::Path,
    process::{Command, Stdio},
    sync::{Arc, Once},
    time::Duration,
};

use hmdp::{
    Application, Config, Dependencies,
    config::{ManagedMode, OrderTransport, Secret},
    testing::auth::CapturingSms,
};
use hmdp_testkit::{Patience, redis_url, remove_keys, unique_prefix, wait_until};
use redis::AsyncCommands;
use serde_json::Value;

use super::TestDatabase;

pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";
/// The payment gateway's signing secret in tests (`HMDP_PAY_SECRET`).
pub const PAY_SECRET: &str = "test-pay-secret-0123456789";

/// Which database a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    MySql,
}

fn init_logs() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("TEST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter("info,hmdp=debug")
                .with_test_writer()
                .try_init();
        }
    });
}

/// A running service for one test.
pub struct TestApp {
    pub addr: SocketAddr,
    /// The `HMDP_METRICS_LISTEN` listener, when the test configured one.
    pub metrics_addr: Option<SocketAddr>,
    pub state: hmdp::testing::http::AppState,
    pub client: reqwest::Client,
    pub sms: Arc<CapturingSms>,
    pub prefix: String,
    backend: Backend,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    /// The RabbitMQ vhost of [`spawn_app_with_rabbitmq`], kept as long as the app.
    pub amqp: Option<hmdp_testkit::AmqpVhost>,
    _db: Option<TestDatabase>,
    _dir: tempfile::TempDir,
}

/// A test configuration: port 0, the given database, a unique Redis prefix, a known admin token.
pub fn test_config(database_url: String, dir: &std::path::Path) -> Config {
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        database_url,
        db_max_connections: 5,
        redis_url: Some(redis_url()),
        redis_managed: ManagedMode::Never,
        redis_prefix: unique_prefix(),
        admin_token: Some(Secret::new(ADMIN_TOKEN)),
        data_dir: dir.to_owned(),
        // Tests fire bursts from one address; the limits have their own test.
        rate_limit_ip: 0,
        rate_limit_user: 0,
        max_connections_per_ip: 0,
        ..Config::default()
    };
    // Tests ask for many codes from 127.0.0.1 (thousands for some sales); the per-IP code quota
    // and the hourly SMS budget have their own tests.
    config.code.ip_per_min = 0;
    config.sms.hourly_limit = 0;
    config.seckill.pay_secret = Some(Secret::new(PAY_SECRET));
    config
}

pub async fn spawn_app(backend: Backend) -> TestApp {
    spawn_app_with(backend, |_| {}).await
}

pub async fn spawn_app_with(backend: Backend, adjust: impl FnOnce(&mut Config)) -> TestApp {
    let (config, db, dir) = prepare(backend, adjust).await;
    spawn_with_config(config, backend, db, dir).await
}

/// The service with the SMS sender its configuration chooses (`HMDP_SMS`), as `hmdp serve`
/// builds it, instead of the capturing one: `app.sms` sees nothing.
pub async fn spawn_app_with_configured_sms(
    backend: Backend,
    adjust: impl FnOnce(&mut Config),
) -> TestApp {
    let (config, db, dir) = prepare(backend, adjust).await;
    let deps = Dependencies::from_config(&config).expect("the SMS sender is set up");
    spawn_with_deps(config, backend, db, dir, deps, Arc::default()).await
}

/// A test configuration on a fresh database, adjusted.
async fn prepare(
    backend: Backend,
    adjust: impl FnOnce(&mut Config),
) -> (Config, Option<TestDatabase>, tempfile::TempDir) {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let (url, db) = match backend {
        Backend::Sqlite => (format!("sqlite://{}/hmdp.db", dir.path().display()), None),
        Backend::MySql => {
            let db = TestDatabase::create().await;
            (db.url.clone(), Some(db))
        }
    };
    let mut config = test_config(url, dir.path());
    adjust(&mut config);
    (config, db, dir)
}

/// The service with `HMDP_ORDER_TRANSPORT=rabbitmq` on a vhost of its own (`app.amqp`), and an
/// impatient claim of idle entries.
pub async fn spawn_app_with_rabbitmq(
    backend: Backend,
    adjust: impl FnOnce(&mut Config),
) -> TestApp {
    let vhost = hmdp_testkit::AmqpVhost::create().await;
    let mut app = spawn_app_with(backend, |c| {
        c.seckill.transport = OrderTransport::RabbitMq;
        c.seckill.amqp_url = vhost.url();
        c.seckill.claim_idle = Duration::from_millis(500);
        adjust(c)
    })
    .await;
    app.amqp = Some(vhost);
    app
}

pub async fn spawn_with_config(
    config: Config,
    backend: Backend,
    db: Option<TestDatabase>,
    dir: tempfile::TempDir,
) -> TestApp {
    let sms = Arc::new(CapturingSms::default());
    let deps = Dependencies { sms: sms.clone() };
    spawn_with_deps(config, backend, db, dir, deps, sms).await
}

async fn spawn_with_deps(
    config: Config,
    backend: Backend,
    db: Option<TestDatabase>,
    dir: tempfile::TempDir,
    deps: Dependencies,
    sms: Arc<CapturingSms>,
) -> TestApp {
    init_logs();
    let prefix = config.redis_prefix.clone();
    let app = Application::build_with(config, deps)
        .await
        .expect("the app builds");
    let addr = app.local_addr();
    let metrics_addr = app.metrics_addr();
    let state = app.state().clone();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = rx.await;
    }));
    TestApp {
        addr,
        metrics_addr,
        state,
        client: reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap(),
        sms,
        prefix,
        backend,
        shutdown: Some(tx),
        server: Some(server),
        amqp: None,
        _db: db,
        _dir: dir,
    }
}

/// A decoded response: status, headers and JSON body.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Resp {
    pub fn success(&self) -> bool {
        self.body["success"] == Value::Bool(true)
    }

    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("")
    }

    pub fn msg(&self) -> &str {
        self.body["errorMsg"].as_str().unwrap_or("")
    }
}

impl TestApp {
    pub fn backend_kind(&self) -> Backend {
        self.backend
    }

    /// The URL of the RabbitMQ vhost of [`spawn_app_with_rabbitmq`].
    pub fn amqp_url(&self) -> String {
        self.amqp.as_ref().expect("a RabbitMQ app").url()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub async fn send(&self, req: reqwest::RequestBuilder) -> Resp {
        let r = req.send().await.expect("request sent");
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await.unwrap();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("response is not JSON ({e}): {text:?}"))
        };
        Resp {
            status,
            headers,
            body,
        }
    }

    /// Status, `Content-Type` and body bytes of a plain `GET` (files, photos).
    pub async fn get_bytes(&self, path: &str) -> (u16, String, Vec<u8>) {
        let r = self
            .client
            .get(self.url(path))
            .send()
            .await
            .expect("request sent");
        let status = r.status().as_u16();
        let content_type = r
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (status, content_type, r.bytes().await.unwrap().to_vec())
    }

    /// The body of a `GET` as text (pages).
    pub async fn get_text(&self, path: &str) -> String {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("request sent")
            .text()
            .await
            .unwrap()
    }

    /// `GET /metrics` on the public port, with the admin token it needs: the exposition text.
    pub async fn metrics(&self) -> String {
        let r = self
            .client
            .get(self.url("/metrics"))
            .header("x-admin-token", ADMIN_TOKEN)
            .send()
            .await
            .expect("request sent");
        assert_eq!(r.status(), 200, "/metrics with the admin token");
        r.text().await.unwrap()
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> Resp {
        let mut req = self.client.get(self.url(path));
        if let Some(t) = token {
            req = req.header("authorization", t);
        }
        self.send(req).await
    }

    pub async fn post_json(&self, path: &str, body: &Value, token: Option<&str>) -> Resp {
        let mut req = self.client.post(self.url(path)).json(body);
        if let Some(t) = token {
            req = req.header("authorization", t);
        }
        self.send(req).await
    }

    pub async fn post(&self, path: &str, token: Option<&str>) -> Resp {
        let mut req = self.client.post(self.url(path));
        if let Some(t) = token {
            req = req.header("authorization", t);
        }
        self.send(req).await
    }

    /// An admin request (the `x-admin-token` header) with a JSON body.
    pub async fn admin_json(&self, method: reqwest::Method, path: &str, body: &Value) -> Resp {
        let req = self
            .client
            .request(method, self.url(path))
            .header("x-admin-token", ADMIN_TOKEN)
            .json(body);
        self.send(req).await
    }

    pub async fn send_code(&self, phone: &str) -> Resp {
        self.send_code_via(&self.client, phone).await
    }

    /// `POST /api/user/code` through `client` (e.g. [`client_from`] another address).
    pub async fn send_code_via(&self, client: &reqwest::Client, phone: &str) -> Resp {
        let url = self.url(&format!("/api/user/code?phone={phone}"));
        self.send(client.post(url)).await
    }

    pub async fn login_with(&self, phone: &str, code: &str) -> Resp {
        self.login_via(&self.client, phone, code).await
    }

    /// `POST /api/user/login` through `client` (e.g. [`client_from`] another address).
    pub async fn login_via(&self, client: &reqwest::Client, phone: &str, code: &str) -> Resp {
        let body = serde_json::json!({"phone": phone, "code": code});
        self.send(client.post(self.url("/api/user/login")).json(&body))
            .await
    }

    /// Full login: ask for a code, read it from the captured SMS, log in; the token. A login
    /// answered 503 `unavailable` (SQLite's write lock held past its wait on a starved machine)
    /// is tried again, as a client told to retry would: the code stays valid when the database
    /// fails.
    pub async fn login(&self, phone: &str) -> String {
        let r = self.send_code(phone).await;
        assert!(r.success(), "send code: {r:?}");
        let code = self.sms.last_code_for(phone).expect("a code was sent");
        // A client's retry after a 503, not a wait for a condition (`wait_until`'s async closure
        // would make this future not `Send`, and tests log in from spawned tasks): a few tries,
        // a fifth of a second apart.
        let mut tries = 0;
        let r = loop {
            let r = self.login_with(phone, &code).await;
            if r.code() != "unavailable" || tries == 50 {
                break r;
            }
            tries += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert!(r.success(), "login: {r:?}");
        r.body["data"].as_str().unwrap().to_owned()
    }

    /// The `hmdp` binary as a separate process on this app's database, Redis and key prefix:
    /// run in `dir` with a clean environment (PATH kept), logging at warn, output discarded.
    /// The caller adds a subcommand and settings, and spawns it.
    pub fn binary(&self, dir: &Path) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hmdp"));
        cmd.current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HMDP_DATABASE_URL", &self.state.config.database_url)
            .env("HMDP_REDIS_URL", redis_url())
            .env("HMDP_REDIS_PREFIX", &self.prefix)
            .env("HMDP_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    /// A direct Redis connection (for checking keys the service wrote).
    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(redis_url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    pub async fn pttl(&self, key: &str) -> i64 {
        self.redis().await.pttl(key).await.unwrap()
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.server.take() {
            h.await.unwrap().unwrap();
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        remove_keys(&redis_url(), &self.prefix);
    }
}

/// A client whose connections come from `ip`: any 127.x address reaches the loopback listener,
/// so a test can act as several client addresses.
pub fn client_from(ip: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .local_address(std::net::IpAddr::from(ip))
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// A child process (e.g. from [`TestApp::binary`]) killed and reaped when dropped, also when
/// the test panics.
pub struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until a service on `port` (e.g. one started with [`TestApp::binary`]) answers
/// `/health` with 200.
pub async fn wait_until_up(client: &reqwest::Client, port: u16) {
    let patience = Patience::new(Duration::from_secs(30)).every(Duration::from_millis(50));
    let what = format!("the service on port {port} up");
    wait_until(patience, &what, async || {
        let health = client.get(format!("http://127.0.0.1:{port}/health"));
        match health.send().await {
            Ok(r) if r.status() == 200 => Ok(()),
            Ok(r) => Err(format!("/health answered {}", r.status())),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
}

/// Sends `GET {target}` as raw HTTP/1.1 bytes, so the path reaches the server exactly as
/// written (an HTTP client would normalise `/../` and `/%2e%2e/` away before sending); the
/// status and the body.
/// Asserts that `target` (a path that tries to climb out of a served folder) is refused with
/// 404 or 400 and shows neither the test's `secret.txt` ("top secret") nor `/etc/passwd`.
pub fn assert_nothing_outside(addr: std::net::SocketAddr, target: &str) {
    let (status, answer) = raw_get(addr, target);
    assert!(
        !answer.contains("top secret") && !answer.contains("root:"),
        "{target} leaked: {answer}"
    );
    assert!(
        status == 404 || status == 400,
        "{target}: {status} {answer}"
    );
}

pub fn raw_get(addr: std::net::SocketAddr, target: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{target}: not an HTTP answer: {answer:?}"));
    (status, answer)
}
