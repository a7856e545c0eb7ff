//! The deployment shape of `deploy/` survives failures: `deploy/shape.sh up` starts three
//! `hmdp serve` processes (this crate's binary) behind a private nginx, Redis as a primary, two
//! replicas and three Sentinels, a fresh MariaDB database and a shared upload folder, all on
//! free loopback ports; the test then works only through the shape, as clients would.
//!
//! Through nginx: logins by SMS code (read from Redis, as the log would show it), from several
//! client addresses (127.0.1.x; nginx itself reaches the instances from 127.0.0.1, the trusted
//! proxy), so the per-client code quota must count each client, not nginx. A session made on one
//! instance works on every other; a photo uploaded to one is served by the others; a photo just
//! over `HMDP_UPLOAD_MAX_BYTES` gets hmdp's own refusal, not nginx's. A phone number asked a code
//! for (`?phone=…`) is written in no file of the shape but the instances' logs. Then a flash sale in three
//! waves of concurrent buyers: one instance is killed (SIGKILL) as the second wave starts and
//! the Redis primary as the third starts. Buyers ask again after a failure, as a
//! client would. Afterwards: no voucher oversold, no buyer with two orders, every order a buyer
//! was told about is in the database. Nothing in the state folder is open to other users. `down`
//! must leave no process, database or folder behind.
//!
//! Nothing is skipped: a missing tool (nginx, redis-server, mariadb) fails the test with the
//! script's message naming the package. Needs the MariaDB of `HMDP_TEST_MYSQL_URL`.

#[allow(dead_code, unused_imports)]
#[path = "api/helpers/mod.rs"]
mod helpers;

use futures_util::future::join_all;
use std::{
    collections::{BTreeMap, HashSet},
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use hmdp::testing::{FlashSale, kv::Keys};
use serde_json::Value;

use helpers::{
    ADMIN_TOKEN, PAY_SECRET, Patience, client_from, code_of, multipart, order_id_of,
    prior_order_of, square_png, wait_until,
};

/// The shape's instances.
const INSTANCES: u16 = 3;
/// The name the Sentinels know the primary by (the script's default).
const MASTER: &str = "hmdp";
/// Buyers per wave, and the sale's stock: the first two waves all buy, the third sells out.
const WAVE: usize = 20;
const STOCK: i64 = 55;
/// Client addresses the buyers come from (127.0.1.1 …): below the code quota per address.
const ADDRESSES: u8 = 8;

/// The shape for one test: `down` when dropped, also after a failed assertion.
struct Shape {
    base: u16,
    state: PathBuf,
    db_name: String,
    _dir: tempfile::TempDir,
    down: bool,
}

impl Shape {
    /// `deploy/shape.sh up` on free ports; panics with the script's output when it fails.
    fn up() -> Shape {
        let dir = tempfile::tempdir().unwrap();
        let mut shape = Shape {
            base: free_block(),
            state: dir.path().join("state"),
            db_name: format!("hmdp_deploy_{}", uuid::Uuid::new_v4().simple()),
            _dir: dir,
            down: false,
        };
        let started = Instant::now();
        let out = shape.script("up");
        if !out.status.success() {
            shape.down = true;
            let down = shape.script("down");
            panic!(
                "shape.sh up failed ({}):\n{}\n(down: {})",
                out.status,
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&down.stderr)
            );
        }
        eprintln!("shape up on {} in {:?}", shape.base, started.elapsed());
        shape
    }

    fn script(&self, command: &str) -> Output {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/shape.sh");
        Command::new(script)
            .arg(command)
            .env("DEPLOY_BASE_PORT", self.base.to_string())
            .env("DEPLOY_INSTANCES", INSTANCES.to_string())
            .env("DEPLOY_STATE_DIR", &self.state)
            .env("DEPLOY_HMDP_BIN", env!("CARGO_BIN_EXE_hmdp"))
            .env("DEPLOY_MYSQL_URL", hmdp_testkit::mysql_server_url())
            .env("DEPLOY_DB_NAME", &self.db_name)
            .env("DEPLOY_REDIS", "sentinel")
            .env("DEPLOY_TRANSPORT", "stream")
            .env("HMDP_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("HMDP_PAY_SECRET", PAY_SECRET)
            .env("HMDP_REDIS_WAIT_REPLICAS", "1")
            // A killed instance's unwritten orders are taken over by the others after this.
            .env("HMDP_WORKER_CLAIM_IDLE_MS", "2000")
            .output()
            .expect("deploy/shape.sh runs")
    }

    /// The nginx URL of `path`.
    fn url(&self, path: &str) -> String {
        nginx_url(self.base, path)
    }

    /// The URL of `path` on instance `i` (1-based), bypassing nginx.
    fn instance_url(&self, i: u16, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.base + i)
    }

    fn pid(&self, name: &str) -> i32 {
        let file = self.state.join("run").join(format!("{name}.pid"));
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        text.trim().parse().unwrap()
    }

    fn kill(&self, name: &str) {
        let pid = self.pid(name);
        // SAFETY: kill(2) on a process the shape started and recorded.
        let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill -9 {name} (pid {pid})");
        eprintln!("killed {name} (pid {pid})");
    }

    async fn db(&self) -> sqlx::MySqlPool {
        let url = format!("{}/{}", hmdp_testkit::mysql_server_url(), self.db_name);
        sqlx::MySqlPool::connect(&url).await.unwrap()
    }
}

impl Drop for Shape {
    fn drop(&mut self) {
        if !self.down {
            let out = self.script("down");
            if !out.status.success() {
                eprintln!("shape.sh down: {}", String::from_utf8_lossy(&out.stderr));
            }
        }
    }
}

/// A base port whose ports (nginx, instances, Redis, Sentinels, the instances' metrics
/// listeners) are all free, below the ephemeral range and the test clusters' ports.
fn free_block() -> u16 {
    loop {
        let base = 15_000 + (uuid::Uuid::new_v4().as_u128() % 4_900) as u16;
        let ports = [0, 1, 2, 3, 10, 11, 12, 20, 21, 22, 31, 32, 33];
        if ports
            .iter()
            .all(|p| TcpListener::bind(("127.0.0.1", base + p)).is_ok())
        {
            return base;
        }
    }
}

/// The nginx URL of `path` for the shape on `base`.
fn nginx_url(base: u16, path: &str) -> String {
    format!("http://127.0.0.1:{base}{path}")
}

/// A connection to the Redis primary, as the Sentinels name it now.
/// The port of the Redis primary, as the first Sentinel names it now.
async fn primary_port(base: u16) -> u16 {
    let sentinel = format!("redis://127.0.0.1:{}", base + 20);
    let mut conn = redis::Client::open(sentinel)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let (_, port): (String, u16) = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(MASTER)
        .query_async(&mut conn)
        .await
        .unwrap();
    port
}

/// A connection to the Redis primary, as the Sentinels name it now.
async fn primary(base: u16) -> redis::aio::MultiplexedConnection {
    let port = primary_port(base).await;
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Every file and folder under `root` (not `root` itself), symbolic links not followed.
fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                folders.push(entry.path());
            }
            found.push(entry.path());
        }
    }
    found
}

/// An instance's log (`log/hmdp-*.log`): the one place a login code may be written.
fn is_hmdp_log(path: &Path) -> bool {
    path.parent().is_some_and(|p| p.ends_with("log"))
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("hmdp-") && n.ends_with(".log"))
}

/// Whether the regular file `path` holds `needle`.
fn contains(path: &Path, needle: &[u8]) -> bool {
    path.symlink_metadata().is_ok_and(|m| m.is_file())
        && std::fs::read(path).is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
}

/// Whether process `pid` runs: it exists and is no zombie (the shape's processes are not the
/// test's children, and whoever inherits them may reap them late).
fn runs(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

async fn json(r: reqwest::RequestBuilder) -> (u16, Value) {
    let r = r.send().await.expect("request sent");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

/// Asks for a login code for `phone` through nginx from `client`: the status and the body.
async fn ask_code(base: u16, client: &reqwest::Client, phone: &str) -> (u16, Value) {
    json(client.post(nginx_url(base, &format!("/api/user/code?phone={phone}")))).await
}

/// Logs `phone` in through nginx from `client`, with the code read from Redis; the token.
async fn login(base: u16, client: &reqwest::Client, phone: &str) -> String {
    let (status, body) = ask_code(base, client, phone).await;
    assert!(
        status == 200 && body["success"] == true,
        "code for {phone}: {status} {body}"
    );
    let mut redis = primary(base).await;
    let code: String = redis::AsyncCommands::get(&mut redis, Keys::new("").login_code(phone))
        .await
        .unwrap();
    let login = serde_json::json!({"phone": phone, "code": code});
    let (status, body) = json(client.post(nginx_url(base, "/api/user/login")).json(&login)).await;
    assert!(
        status == 200 && body["success"] == true,
        "login {phone}: {status} {body}"
    );
    body["data"].as_str().unwrap().to_owned()
}

/// What a buyer was finally told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Told {
    Order(i64),
    SoldOut,
}

/// One buyer: grabs through nginx until the answer is final (an order id, its earlier order
/// named by a `duplicate_order`, or sold out), asking again after a failure (a 502 from a
/// dying instance, a 503 while Redis fails over or a replica has not confirmed).
/// The `code` of an envelope, or the start of whatever else came (nginx's error page).
fn code_of_any(body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(v) => v["code"].as_str().unwrap_or("").to_owned(),
        Err(_) => body.chars().take(40).collect(),
    }
}

/// Counts the final answers in `answered`, and the others by status and code in `retried`.
async fn buy(
    url: &str,
    (client, token): &(reqwest::Client, String),
    answered: &AtomicUsize,
    retried: &Mutex<BTreeMap<String, usize>>,
) -> Told {
    let patience = Patience::new(Duration::from_secs(90)).every(Duration::from_millis(100));
    let told = wait_until(patience, "a final answer to a grab", async || {
        let r = client
            .post(url)
            .header("authorization", token)
            .send()
            .await
            .map_err(|e| {
                *retried
                    .lock()
                    .unwrap()
                    .entry("no answer".into())
                    .or_default() += 1;
                e.to_string()
            })?;
        let status = r.status().as_u16();
        let body = r.text().await.map_err(|e| e.to_string())?;
        if status == 200 {
            if let Some(id) = order_id_of(&body) {
                return Ok(Told::Order(id));
            }
            match code_of(&body).as_str() {
                "sold_out" => return Ok(Told::SoldOut),
                "duplicate_order" => {
                    if let Some(id) = prior_order_of(&body) {
                        return Ok(Told::Order(id));
                    }
                }
                _ => {}
            }
        }
        let kind = format!("{status} {}", code_of_any(&body));
        *retried.lock().unwrap().entry(kind).or_default() += 1;
        Err(format!("{status} {body}"))
    })
    .await;
    answered.fetch_add(1, Ordering::SeqCst);
    told
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shape_keeps_every_order_through_an_instance_and_a_primary_dying() {
    let started = Instant::now();
    let shape = Shape::up();
    let http = client();

    // ---- sessions: a login through nginx works on every instance, and through nginx again.
    let users: Vec<reqwest::Client> = (1..=ADDRESSES)
        .map(|a| client_from([127, 0, 1, a]))
        .collect();
    let token = login(shape.base, &users[0], "13600000001").await;
    let mut ids = HashSet::new();
    for i in 1..=INSTANCES {
        let me = http
            .get(shape.instance_url(i, "/api/user/me"))
            .header("authorization", &token);
        let (status, body) = json(me).await;
        assert_eq!(status, 200, "instance {i}: {body}");
        ids.insert(body["data"]["id"].as_i64().expect("the user"));
    }
    for _ in 0..2 * INSTANCES {
        let (status, body) = json(
            http.get(shape.url("/user/me"))
                .header("authorization", &token),
        )
        .await;
        assert_eq!(
            (status, body["success"].clone()),
            (200, Value::Bool(true)),
            "{body}"
        );
        ids.insert(body["data"]["id"].as_i64().unwrap());
    }
    assert_eq!(ids.len(), 1, "one user everywhere: {ids:?}");

    // ---- uploads: stored by one instance, served by all, the size limit hmdp's own.
    let png = square_png(8, [200, 30, 30]);
    let (content_type, body) = multipart("file", "red.png", "image/png", &png);
    let upload = http
        .post(shape.instance_url(1, "/api/upload/blog"))
        .header("authorization", &token)
        .header("content-type", content_type)
        .body(body);
    let (status, answer) = json(upload).await;
    assert_eq!(status, 200, "upload: {answer}");
    let name = answer["data"].as_str().unwrap().to_owned();
    let mut photo_urls: Vec<String> = (2..=INSTANCES)
        .map(|i| shape.instance_url(i, &format!("/imgs{name}")))
        .collect();
    photo_urls.push(shape.url(&format!("/imgs{name}")));
    for url in photo_urls {
        let r = http.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200, "{url}");
        assert_eq!(r.bytes().await.unwrap().as_ref(), png.as_slice(), "{url}");
    }
    let mut big = square_png(1, [1, 2, 3]);
    big.resize(8 * 1024 * 1024 + 1, 0);
    let (content_type, body) = multipart("file", "big.png", "image/png", &big);
    let upload = http
        .post(shape.url("/api/upload/blog"))
        .header("authorization", &token)
        .header("content-type", content_type)
        .body(body);
    let (status, answer) = json(upload).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (413, Some("payload_too_large")),
        "a photo over HMDP_UPLOAD_MAX_BYTES gets hmdp's envelope through nginx: {answer}"
    );

    // ---- the client address: nginx is trusted, so the code quota counts each client. One
    // address asks until every instance refuses it (each keeps its own count); another still
    // gets a code.
    let greedy = client_from([127, 0, 2, 1]);
    let mut granted = 0;
    let mut refused_in_a_row = 0;
    let mut phone = 13_700_000_000u64;
    while refused_in_a_row < 2 * INSTANCES {
        phone += 1;
        let (status, body) = ask_code(shape.base, &greedy, &phone.to_string()).await;
        match status {
            200 => {
                granted += 1;
                refused_in_a_row = 0;
            }
            429 => refused_in_a_row += 1,
            _ => panic!("code for {phone}: {status} {body}"),
        }
        assert!(
            granted <= 40,
            "the code quota per client address never refused"
        );
    }
    let (status, body) = ask_code(shape.base, &client_from([127, 0, 2, 2]), "13799999999").await;
    assert_eq!(status, 200, "another client address is not refused: {body}");

    // ---- the phones asked for through nginx (`?phone=…`) are in no file of the shape but the
    // instances' logs, which are private; nginx logged the requests, without their query.
    let access = std::fs::read_to_string(shape.state.join("log/nginx-access.log")).unwrap();
    assert!(access.contains("/api/user/code"), "{access}");
    for phone in ["13600000001", "13799999999"] {
        let carriers: Vec<PathBuf> = files_under(&shape.state)
            .into_iter()
            .filter(|f| !is_hmdp_log(f) && contains(f, phone.as_bytes()))
            .collect();
        assert!(carriers.is_empty(), "{phone} is written in {carriers:?}");
    }

    // ---- the sale: buyers logged in through nginx from several addresses.
    let sale = FlashSale::new(STOCK)
        .sub_title("部署测试")
        .from_now(-5, 3600)
        .create(&http, &shape.url(""), ADMIN_TOKEN)
        .await
        .expect("the sale is created through nginx");
    let sem = Arc::new(tokio::sync::Semaphore::new(16));
    let mut logins = Vec::new();
    for b in 0..3 * WAVE {
        let (sem, client) = (sem.clone(), users[b % users.len()].clone());
        let base = shape.base;
        logins.push(tokio::spawn(async move {
            let _permit = sem.acquire().await.unwrap();
            let token = login(base, &client, &format!("1350000{b:04}")).await;
            (client, token)
        }));
    }
    let mut buyers = Vec::new();
    for l in logins {
        buyers.push(l.await.unwrap());
    }
    eprintln!(
        "{} buyers logged in after {:?}",
        buyers.len(),
        started.elapsed()
    );

    let grab_url = shape.url(&format!("/api/voucher-order/seckill/{sale}"));
    // A wave's buyers grab concurrently (in this task: the waits borrow). With `dies`, the first
    // half starts at once and something is killed once three of them were answered (the others
    // may be in flight); the second half starts right after the kill, so it surely meets it.
    let answered = AtomicUsize::new(0);
    let killed = AtomicBool::new(false);
    let retried = Mutex::new(BTreeMap::new());
    let wave = async |range: std::ops::Range<usize>, dies: Option<&str>| {
        let first = range.start;
        killed.store(false, Ordering::SeqCst);
        let grabs = join_all(range.map(|b| {
            let (answered, killed, retried, url) = (&answered, &killed, &retried, &grab_url);
            let buyer = &buyers[b];
            async move {
                if dies.is_some() && b >= first + WAVE / 2 {
                    wait_until(Duration::from_secs(60), "the kill", async || {
                        killed.load(Ordering::SeqCst)
                    })
                    .await;
                }
                buy(url, buyer, answered, retried).await
            }
        }));
        let kill = async {
            let Some(what) = dies else { return };
            let patience = Patience::new(Duration::from_secs(60)).every(Duration::from_millis(2));
            wait_until(patience, "the wave under way", async || {
                answered.load(Ordering::SeqCst) >= first + 3
            })
            .await;
            let name = match what {
                "primary" => format!("redis-{}", primary_port(shape.base).await),
                instance => instance.to_owned(),
            };
            let done = answered.load(Ordering::SeqCst) - first;
            shape.kill(&name);
            killed.store(true, Ordering::SeqCst);
            eprintln!("{done} of the wave answered before the kill");
        };
        tokio::join!(grabs, kill).0
    };
    let mut told: Vec<Told> = wave(0..WAVE, None).await;
    // The second wave: an instance dies under it.
    told.extend(wave(WAVE..2 * WAVE, Some("hmdp-2")).await);
    let unserved = told.iter().filter(|t| **t == Told::SoldOut).count();
    assert_eq!(
        unserved, 0,
        "every buyer of the first two waves gets an order"
    );
    // nginx leaves the dead instance out: every read goes through.
    for _ in 0..2 * INSTANCES {
        let r = http
            .get(shape.url("/api/shop-type/list"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "nginx fails over to the live instances");
    }
    // The third wave: the Redis primary dies under it; the Sentinels promote a replica and the
    // instances follow. Its first half buys 10 at most, so the second half, which starts during
    // the outage, finds stock once the instances are on the new primary.
    let first_primary = primary_port(shape.base).await;
    told.extend(wave(2 * WAVE..3 * WAVE, Some("primary")).await);
    let patience = Patience::new(Duration::from_secs(30)).every(Duration::from_millis(100));
    let now = wait_until(patience, "the Sentinels name a new primary", async || {
        Some(primary_port(shape.base).await).filter(|p| *p != first_primary)
    })
    .await;
    eprintln!(
        "primary {first_primary} → {now} after {:?}",
        started.elapsed()
    );
    let after = &told[2 * WAVE + WAVE / 2..];
    assert!(
        after.iter().any(|t| matches!(t, Told::Order(_))),
        "grabs succeed after the failover: {after:?}"
    );
    eprintln!("sale over after {:?}", started.elapsed());

    // ---- what the buyers were told is what the database holds.
    let acked: HashSet<i64> = told
        .iter()
        .filter_map(|t| match t {
            Told::Order(id) => Some(*id),
            Told::SoldOut => None,
        })
        .collect();
    let ordered = told.iter().filter(|t| matches!(t, Told::Order(_))).count();
    assert_eq!(
        acked.len(),
        ordered,
        "two buyers were told the same order id"
    );
    let db = shape.db().await;
    let patience = Patience::new(Duration::from_secs(60)).every(Duration::from_millis(200));
    let stored: HashSet<i64> =
        wait_until(patience, "every acknowledged order written", async || {
            let ids: Vec<i64> =
                sqlx::query_scalar("SELECT id FROM tb_voucher_order WHERE voucher_id = ?")
                    .bind(sale)
                    .fetch_all(&db)
                    .await
                    .unwrap();
            let ids: HashSet<i64> = ids.into_iter().collect();
            let missing = acked.difference(&ids).count();
            if missing == 0 {
                Ok(ids)
            } else {
                Err(format!("{missing} of {} not written", acked.len()))
            }
        })
        .await;
    // Orders nobody was told about are possible: a grab accepted as its instance died (502), or
    // answered 503 `not_replicated` as the primary died, whose buyer asked again only once the
    // sale was sold out (the sale answers "sold out" before "you have an order").
    eprintln!(
        "{} orders acknowledged, {} stored; answers asked again after: {:?}",
        acked.len(),
        stored.len(),
        retried.lock().unwrap()
    );
    let (orders, buyers_with_orders): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(DISTINCT user_id) FROM tb_voucher_order WHERE voucher_id = ?",
    )
    .bind(sale)
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!(orders, buyers_with_orders, "a buyer holds two orders");
    let stock: i64 =
        sqlx::query_scalar("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?")
            .bind(sale)
            .fetch_one(&db)
            .await
            .unwrap();
    assert!(orders <= STOCK, "oversold: {orders} orders of {STOCK}");
    assert_eq!(stock, STOCK - orders, "the stock counts every order");
    assert!(
        orders > 2 * WAVE as i64,
        "the third wave bought too: {orders} orders"
    );
    db.close().await;

    // ---- nothing the shape wrote is open to other users: the folder is 0700, and no file or
    // folder in it has a group or other permission bit.
    // (A file gone in between, such as a Sentinel's rewritten configuration, is skipped.)
    let mode = |p: &Path| {
        let meta = p.symlink_metadata().ok()?;
        Some(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777)
    };
    assert_eq!(mode(&shape.state), Some(0o700), "the state folder");
    let open: Vec<String> = files_under(&shape.state)
        .iter()
        .filter_map(|p| Some((p, mode(p)?)))
        .filter(|(_, mode)| mode & 0o077 != 0)
        .map(|(p, mode)| format!("{} {mode:o}", p.display()))
        .collect();
    assert!(open.is_empty(), "readable by others: {open:#?}");
    // Run as root, nginx's workers (user nobody) buffer bodies in a private folder of their own.
    let shape_env = std::fs::read_to_string(shape.state.join("shape.env")).unwrap();
    let nginx_tmp = shape_env
        .lines()
        .find_map(|l| l.strip_prefix("NGINX_TMP="))
        .map(PathBuf::from);
    if let Some(tmp) = &nginx_tmp {
        assert_eq!(mode(tmp), Some(0o700), "{tmp:?}");
    }

    // ---- status sees what died; down stops the rest and drops what up made.
    let status = shape.script("status");
    let report = String::from_utf8_lossy(&status.stdout).into_owned();
    assert_eq!(
        status.status.code(),
        Some(3),
        "status reports a part down:\n{report}"
    );
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("hmdp 2") && l.ends_with("down")),
        "{report}"
    );
    let survivors: Vec<i32> = ["nginx", "hmdp-1", "hmdp-3"]
        .iter()
        .map(|n| shape.pid(n))
        .collect();
    let mut shape = shape;
    shape.down = true;
    let out = shape.script("down");
    assert!(
        out.status.success(),
        "down: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for pid in survivors {
        assert!(!runs(pid), "pid {pid} still runs after down");
    }
    assert!(!shape.state.exists(), "down removes the state folder");
    if let Some(tmp) = nginx_tmp {
        assert!(!tmp.exists(), "down removes nginx's temp folder {tmp:?}");
    }
    let server = sqlx::MySqlPool::connect(&hmdp_testkit::mysql_server_url())
        .await
        .unwrap();
    let left: Option<String> = sqlx::query_scalar(
        "SELECT schema_name FROM information_schema.schemata WHERE schema_name = ?",
    )
    .bind(&shape.db_name)
    .fetch_optional(&server)
    .await
    .unwrap();
    assert_eq!(left, None, "down drops the database");
    eprintln!("the whole test took {:?}", started.elapsed());
}
