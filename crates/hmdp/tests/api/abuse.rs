//! Hostile input: SQL injection attempts in every string parameter, traversal, odd encodings.
//! Every answer must be a clean envelope, never a 500, and never more data than asked for.

use reqwest::Method;
use serde_json::json;

use crate::{
    both_backends,
    helpers::{Backend, Resp, TestApp, client_from, spawn_app, spawn_app_with},
};

const PAYLOADS: &[&str] = &[
    "' OR '1'='1",
    "1; DROP TABLE tb_user; --",
    "\" OR \"\"=\"",
    "%' OR 1=1 -- ",
    "1 UNION SELECT phone, password, nick_name FROM tb_user",
    "\\'; SELECT SLEEP(5); --",
    "’ OR 1=1 #",
    "\u{0}",
    "../../etc/passwd",
];

both_backends!(sql_injection_attempts_are_just_strings);

async fn user_count(app: &TestApp) -> i64 {
    match &app.state.db {
        hmdp::testing::storage::Db::Sqlite(p) => sqlx::query_scalar("SELECT COUNT(*) FROM tb_user")
            .fetch_one(p)
            .await
            .unwrap(),
        hmdp::testing::storage::Db::MySql(p) => sqlx::query_scalar("SELECT COUNT(*) FROM tb_user")
            .fetch_one(p)
            .await
            .unwrap(),
    }
}

async fn sql_injection_attempts_are_just_strings(backend: Backend) {
    let app = spawn_app(backend).await;
    // The demo data's users, before ours.
    let demo_users = user_count(&app).await;
    let token = app.login("13812345678").await;
    for p in PAYLOADS {
        let enc = urlencode(p);
        // Phone (query and JSON), code, name search, paths, ids.
        let r = app.post(&format!("/api/user/code?phone={enc}"), None).await;
        assert_eq!(r.code(), "invalid_phone", "{p}: {r:?}");
        let r = app
            .post_json(
                "/api/user/login",
                &json!({"phone": p, "code": "123456"}),
                None,
            )
            .await;
        assert_eq!(r.code(), "invalid_phone", "{p}: {r:?}");
        let r = app
            .post_json(
                "/api/user/login",
                &json!({"phone": "13812345678", "code": p}),
                None,
            )
            .await;
        assert_eq!(r.code(), "invalid_code", "{p}: {r:?}");
        let control = p.chars().any(char::is_control);
        let r = app
            .get(&format!("/api/shop/of/name?name={enc}"), None)
            .await;
        if control {
            assert_eq!(r.status, 400, "{r:?}");
        } else {
            // Only the shops stored below under exactly this text (as data) can match.
            assert!(r.success(), "{p}: {r:?}");
            let names: Vec<&str> = r.body["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["name"].as_str().unwrap())
                .collect();
            assert!(names.iter().all(|n| n.contains(p)), "{p}: {names:?}");
        }
        for path in [
            format!("/api/shop/{enc}"),
            format!("/api/user/{enc}"),
            format!("/api/voucher/list/{enc}"),
        ] {
            let r = app.get(&path, Some(&token)).await;
            assert!(r.status == 400 || r.status == 404, "{path}: {r:?}");
        }
        let r = app
            .get(&format!("/api/shop/of/type?typeId={enc}"), None)
            .await;
        assert_eq!(r.status, 400, "{p}: {r:?}");
        // Stored as data through the admin API and read back verbatim.
        let shop = json!({"name": p, "typeId": 1, "address": p, "x": 104.0, "y": 30.0, "area": p});
        let r = app.admin_json(Method::POST, "/api/shop", &shop).await;
        if control {
            assert_eq!((r.status, r.code()), (400, "invalid_request"), "{r:?}");
            continue;
        }
        assert!(r.success(), "{p}: {r:?}");
        let id = r.body["data"].as_i64().unwrap();
        let back = app.get(&format!("/api/shop/{id}"), None).await;
        assert_eq!(back.body["data"]["name"], *p);
    }
    // The users table is intact and has exactly one user more than the demo's.
    let me = app.get("/api/user/me", Some(&token)).await;
    assert!(me.success());
    assert_eq!(user_count(&app).await, demo_users + 1);
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_from_one_address_or_one_user_are_rate_limited() {
    // 1 request per second with bursts of 2: however slow this machine, 100 requests in a row
    // (well under a minute) overrun it.
    let app = spawn_app_with(Backend::Sqlite, |c| c.rate_limit_ip = 1).await;
    let mut limited = 0;
    for _ in 0..100 {
        let r = app.get("/api/shop-type/list", None).await;
        if r.status == 429 {
            assert_eq!(r.code(), "rate_limited");
            assert!(r.headers.contains_key("retry-after"));
            limited += 1;
        }
    }
    assert!(
        limited >= 40,
        "a burst of 100 over a 1/s (burst 2) limit: {limited} refused"
    );

    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.rate_limit_user = 1;
        c.code.min_interval = std::time::Duration::ZERO;
    })
    .await;
    let (greedy, calm) = (
        app.login("13812345678").await,
        app.login("13912345678").await,
    );
    let mut refused = 0;
    for _ in 0..40 {
        if app.get("/api/user/me", Some(&greedy)).await.status == 429 {
            refused += 1;
        }
    }
    assert!(refused >= 20, "{refused}");
    assert!(
        app.get("/api/user/me", Some(&calm)).await.success(),
        "other users are not affected"
    );
}

/// One client asking for codes for many different phones (an SMS flood at the operator's
/// expense) runs into the per-IP code quota, whichever mount point it uses; other clients keep
/// getting codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_flood_sms_to_many_phones() {
    let default_quota = hmdp::Config::default().code.ip_per_min;
    assert_eq!(default_quota, 10);
    let app = spawn_app_with(Backend::Sqlite, |c| c.code.ip_per_min = default_quota).await;
    let mut first_refusal = None;
    for i in 0..20 {
        let mount = if i % 2 == 0 { "/api" } else { "" };
        let r = app
            .post(&format!("{mount}/user/code?phone=1381234{i:04}"), None)
            .await;
        if r.status == 429 {
            assert_eq!(r.code(), "rate_limited", "{r:?}");
            let after: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
            assert!((1..=6).contains(&after), "one code every 6 s: {r:?}");
            first_refusal.get_or_insert(i);
        } else {
            assert!(r.success(), "{i}: {r:?}");
            assert!(
                first_refusal.is_none(),
                "refused, then allowed again at {i}"
            );
        }
    }
    assert_eq!(first_refusal, Some(10), "a burst of 10, then 429");
    assert_eq!(app.sms.count(), 10, "only 10 SMS went out");

    // Another address has its own quota.
    let other = client_from([127, 0, 0, 2]);
    let r = app.send_code_via(&other, "13912345678").await;
    assert!(r.success(), "{r:?}");
}

/// One address guessing codes on many phones (five wrong tries per phone and code) runs out of
/// its wrong tries of the day across all phones long before 30 × 5 guesses, and is then refused
/// even with a right code; another address, and the phones' owners, are not affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_guess_codes_across_many_phones() {
    let budget = hmdp::Config::default().code.ip_wrong_daily_limit;
    assert_eq!(budget, 30);
    let app = spawn_app_with(Backend::Sqlite, |c| c.code.ip_wrong_daily_limit = budget).await;
    let phones: Vec<String> = (0..30).map(|i| format!("1371234{i:04}")).collect();
    let mut codes = Vec::new();
    for phone in &phones {
        assert!(app.send_code(phone).await.success());
        codes.push(app.sms.last_code_for(phone).unwrap());
    }
    let wrong_for = |code: &str| if code == "000000" { "111111" } else { "000000" };
    let attacker = client_from([127, 0, 0, 2]);
    let (mut wrong_tries, mut refusal) = (0, None);
    'guessing: for (phone, code) in phones.iter().zip(&codes) {
        for _ in 0..5 {
            let r = app.login_via(&attacker, phone, wrong_for(code)).await;
            if r.status == 429 {
                refusal = Some(r);
                break 'guessing;
            }
            assert!(matches!(r.code(), "wrong_code" | "code_void"), "{r:?}");
            wrong_tries += 1;
        }
    }
    let r = refusal.expect("refused before 30 phones × 5 tries");
    assert_eq!(wrong_tries, budget);
    assert_eq!(r.code(), "too_many_wrong_codes", "{r:?}");
    let after: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=24 * 3600).contains(&after), "{r:?}");
    // A right code is refused too: it is known to be right only by comparing it.
    let (phone, code) = (&phones[29], &codes[29]);
    let r = app.login_via(&attacker, phone, code).await;
    assert_eq!((r.status, r.code()), (429, "too_many_wrong_codes"), "{r:?}");

    // Another address has its own tries, and the owner logs in.
    let r = app
        .login_via(&client_from([127, 0, 0, 3]), phone, wrong_for(code))
        .await;
    assert_eq!(r.code(), "wrong_code", "{r:?}");
    assert!(r.msg().contains("4 tries left"), "{r:?}");
    let r = app.login_with(phone, code).await;
    assert!(r.success(), "the owner logs in: {r:?}");
}

/// `HMDP_SMS_HOURLY_LIMIT`: once the service has sent that many codes in the hour, to any phones
/// from any addresses, new codes are refused with 503 `sms_budget_spent`; a request refused for
/// another reason does not use the budget up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hourly_sms_budget_refuses_new_codes_once_spent() {
    assert_eq!(hmdp::Config::default().sms.hourly_limit, 1_000);
    let app = spawn_app_with(Backend::Sqlite, |c| c.sms.hourly_limit = 3).await;
    assert!(app.send_code("13812340001").await.success());
    let r = app.send_code("13812340001").await;
    assert_eq!(
        (r.status, r.code()),
        (429, "rate_limited"),
        "cooldown: {r:?}"
    );
    for (i, phone) in [(2, "13812340002"), (3, "13812340003")] {
        let r = app.send_code_via(&client_from([127, 0, 0, i]), phone).await;
        assert!(r.success(), "{r:?}");
    }
    let r = app
        .send_code_via(&client_from([127, 0, 0, 4]), "13812340004")
        .await;
    assert_eq!((r.status, r.code()), (503, "sms_budget_spent"), "{r:?}");
    let after: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=3600).contains(&after), "{r:?}");
    assert_eq!(app.sms.count(), 3, "the refused request sent nothing");
    // The codes that went out still log in.
    let code = app.sms.last_code_for("13812340002").unwrap();
    assert!(app.login_with("13812340002", &code).await.success());
}

/// A client that opens a connection and dribbles a request head (slowloris), or leaves a
/// keep-alive connection idle, is disconnected after `HMDP_IDLE_TIMEOUT_SECS`; the server keeps
/// answering everyone else meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_are_closed_after_the_idle_timeout() {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.idle_timeout = Duration::from_secs(1);
    })
    .await;
    // Half a request head, then nothing.
    let mut slow = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // A finished request, then an idle keep-alive connection.
    let mut idle = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    assert!(app.get("/health", None).await.success());

    for (name, conn) in [("slow", &mut slow), ("idle", &mut idle)] {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut rest)).await;
        assert!(
            read.is_ok(),
            "the {name} connection was still open after 5 s"
        );
        // Closed by the server (EOF, or a reset), not before the timeout.
        assert!(
            started.elapsed() >= Duration::from_millis(900),
            "the {name} connection closed after {:?}",
            started.elapsed()
        );
    }
}

/// `POST /user/code` for a fresh phone, as relayed by a proxy on 127.0.0.1 that says the
/// request came through `forwarded_for` (an `X-Forwarded-For` value; none when empty).
async fn code_forwarded_for(app: &TestApp, forwarded_for: &str) -> Resp {
    let lines: &[&[u8]] = if forwarded_for.is_empty() {
        &[]
    } else {
        &[forwarded_for.as_bytes()]
    };
    code_forwarded_lines(app, lines).await
}

/// Like [`code_forwarded_for`], with `X-Forwarded-For` as raw header lines (any bytes a
/// header may carry), in order.
async fn code_forwarded_lines(app: &TestApp, lines: &[&[u8]]) -> Resp {
    use std::sync::atomic::{AtomicU32, Ordering};
    static PHONES: AtomicU32 = AtomicU32::new(0);
    let phone = format!("1380000{:04}", PHONES.fetch_add(1, Ordering::Relaxed));
    let mut headers = reqwest::header::HeaderMap::new();
    for line in lines {
        headers.append(
            "x-forwarded-for",
            reqwest::header::HeaderValue::from_bytes(line).unwrap(),
        );
    }
    let req = app
        .client
        .post(app.url(&format!("/api/user/code?phone={phone}")))
        .headers(headers);
    app.send(req).await
}

/// Behind trusted proxies (`HMDP_TRUSTED_PROXIES`, e.g. nginx on the same machine) every client
/// has its own per-address quotas, found as the rightmost `X-Forwarded-For` entry that is not a
/// proxy; what a client writes further left changes nothing, and an IPv6 client is one /64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_quota() {
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.code.ip_per_min = 2;
        c.trusted_proxies = "127.0.0.1/32, 10.0.0.0/8".parse().unwrap();
    })
    .await;
    let refused = |r: &Resp| r.status == 429 && r.code() == "rate_limited";
    for _ in 0..2 {
        let r = code_forwarded_for(&app, "203.0.113.7").await;
        assert!(r.success(), "{r:?}");
    }
    for spoofed in [
        "203.0.113.7",
        // The client wrote the left part; the proxy appended what it saw.
        "198.51.100.1, 203.0.113.7",
        // Through a second, inner proxy (10.x): still the same client.
        "198.51.100.1, 203.0.113.7, 10.1.2.3",
    ] {
        let r = code_forwarded_for(&app, spoofed).await;
        assert!(refused(&r), "{spoofed}: {r:?}");
    }
    // Another client behind the same proxy has its own quota.
    let r = code_forwarded_for(&app, "203.0.113.8").await;
    assert!(r.success(), "{r:?}");
    // IPv6: one /64 is one client, whatever its addresses; the next /64 is another.
    for ip in ["2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"] {
        let r = code_forwarded_for(&app, ip).await;
        assert!(r.success(), "{ip}: {r:?}");
    }
    let r = code_forwarded_for(&app, "2001:db8:1:2:abcd::9").await;
    assert!(refused(&r), "{r:?}");
    let r = code_forwarded_for(&app, "2001:db8:1:3::1").await;
    assert!(r.success(), "{r:?}");

    // The request rate limit keys clients the same way.
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.rate_limit_ip = 1;
        c.trusted_proxies = "127.0.0.1".parse().unwrap();
    })
    .await;
    let get = |xff: &'static str| {
        let req = app.client.get(app.url("/api/shop-type/list"));
        app.send(req.header("x-forwarded-for", xff))
    };
    let mut limited = 0;
    for _ in 0..20 {
        if get("203.0.113.7").await.status == 429 {
            limited += 1;
        }
    }
    assert!(
        limited >= 10,
        "1/s with bursts of 2: {limited} of 20 refused"
    );
    let r = get("203.0.113.8").await;
    assert!(
        r.success(),
        "another forwarded client is not limited: {r:?}"
    );
}

/// A byte that is not ASCII in what the client wrote (nginx appends the address it saw to it)
/// spoils only the client's own entry: the request is still the client's, charged to the
/// client's buckets, never to the proxy's address that everyone behind it shares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_are_not_ascii_in_x_forwarded_for_leave_the_client_its_own_bucket() {
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.code.ip_per_min = 2;
        c.trusted_proxies = "127.0.0.1/32".parse().unwrap();
    })
    .await;
    let refused = |r: &Resp| r.status == 429 && r.code() == "rate_limited";
    // One client spends its bucket through requests whose header carries its garbage...
    for lines in [
        &[b"\xff\xfe, 203.0.113.7".as_slice()][..],
        &[b"\xe4\xb8\xad", b"203.0.113.7"],
    ] {
        let r = code_forwarded_lines(&app, lines).await;
        assert!(r.success(), "{r:?}");
    }
    // ...and that bucket is the one spent, however it writes the header next time.
    for lines in [
        &[b"203.0.113.7".as_slice()][..],
        &[b"\x80, 203.0.113.7"],
        &[b"\x80", b"203.0.113.7"],
    ] {
        let r = code_forwarded_lines(&app, lines).await;
        assert!(refused(&r), "{lines:?}: {r:?}");
    }
    // Nobody else paid for it: requests from the proxy's own address still have their bucket.
    for _ in 0..2 {
        let r = code_forwarded_for(&app, "").await;
        assert!(r.success(), "{r:?}");
    }
}

/// A peer that is not a trusted proxy is the client, whatever `X-Forwarded-For` it sends: it
/// cannot escape its quota by making up addresses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_peer_cannot_escape_its_quota_with_x_forwarded_for() {
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.code.ip_per_min = 2;
        c.trusted_proxies = "10.0.0.0/8".parse().unwrap();
    })
    .await;
    for xff in ["203.0.113.1", "203.0.113.2"] {
        let r = code_forwarded_for(&app, xff).await;
        assert!(r.success(), "{r:?}");
    }
    for xff in ["203.0.113.3", "2001:db8::1", "10.0.0.1", ""] {
        let r = code_forwarded_for(&app, xff).await;
        assert_eq!(
            (r.status, r.code()),
            (429, "rate_limited"),
            "{xff:?}: {r:?}"
        );
    }
}

/// Right codes are not guesses: a hundred people behind one address (an office, a carrier NAT)
/// logging in at the same moment all get in, whatever the address's wrong-try budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_right_codes_at_once_from_one_address_all_log_in() {
    let app = spawn_app_with(Backend::Sqlite, |c| c.code.ip_wrong_daily_limit = 30).await;
    let phones: Vec<String> = (0..100).map(|i| format!("1381234{i:04}")).collect();
    let mut codes = Vec::new();
    for phone in &phones {
        assert!(app.send_code(phone).await.success());
        codes.push(app.sms.last_code_for(phone).unwrap());
    }
    let logins = phones
        .iter()
        .zip(&codes)
        .map(|(phone, code)| app.login_with(phone, code));
    for r in futures_util::future::join_all(logins).await {
        assert!(r.success(), "{r:?}");
    }
}
