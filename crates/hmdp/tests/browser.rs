//! The embedded web UI, driven in a real browser: headless Chromium through chromedriver.
//!
//! The test speaks the W3C WebDriver protocol through `fantoccini`; the browser comes from
//! Debian (`chromium` and `chromium-driver`, i.e. `/usr/bin/chromium` and
//! `/usr/bin/chromedriver`; override with `HMDP_TEST_CHROMIUM` and `HMDP_TEST_CHROMEDRIVER`). The service runs in-process on port 0 with a capturing SMS sender,
//! its own Redis prefix (removed afterwards) and a SQLite file in a temporary folder.
//!
//! One flow, like a user would go: log in with the code from the "server log", see the shop
//! types with their icons, open a shop (its picture from the demo data), grab the flash-sale
//! voucher and see the order go pending → created, grab again and see the refusal, look at my
//! orders, create a voucher as admin, and watch the live dashboard count a small sale fired
//! from the test. The browser runs in another time zone than the service (`TZ` of the
//! chromedriver process, which chromium inherits), as a user in China would with a server on
//! UTC: the countdowns, the grab button and the admin form must not mix up the zones.
//!
//! A second flow, the social half on the demo data (a demo user logs in by phone): the hot
//! notes, a like and a follow, the feed, writing a note with an uploaded photo, the daily
//! check-in and a shop's visitors; then the same pages with the social routes answering 404
//! (the page's `fetch` stands in for such a server), whose sections must stay hidden without
//! an error. A third, an order's life in "my orders": paid (the test plays the payment
//! gateway, signing its notice), cancelled, refunded, and closed on its own when its short pay
//! time runs out while the page watches; the sales' dashboards count them. Waits have
//! deadlines and follow the `data-state` the page sets. Screenshots land in
//! `$CARGO_TARGET_DIR/ui-screenshots/` (or `target/ui-screenshots/`), also when a step fails.

#[allow(dead_code, unused_imports)]
#[path = "api/helpers/mod.rs"]
mod helpers;

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::Mutex,
    time::Duration,
};

use chrono::TimeZone;
use fantoccini::Locator;
use hmdp::{Config, testing::FlashSale};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

use helpers::{
    ADMIN_TOKEN, Backend, Patience, TestApp, free_port, signed_notice, spawn_app_with, square_png,
    wait_until,
};

// ------------------------------------------------------------------------------ the service

/// The service with the shared harness's settings, but the abuse limits at their defaults
/// (the harness turns them off for the API tests' bursts), as a user meets them.
async fn spawn(adjust: impl FnOnce(&mut Config)) -> TestApp {
    let app = spawn_app_with(Backend::Sqlite, |c| {
        let defaults = Config::default();
        c.rate_limit_ip = defaults.rate_limit_ip;
        c.rate_limit_user = defaults.rate_limit_user;
        c.code.ip_per_min = defaults.code.ip_per_min;
        c.max_connections_per_ip = defaults.max_connections_per_ip;
        adjust(c);
    })
    .await;
    eprintln!("redis prefix: {}", app.prefix);
    app
}

/// Stops the server and waits for it (its worker too), so that the key clean-up when the app
/// is dropped runs after the last write. Without this (a panic), clean-up is best effort.
async fn stop(app: TestApp) {
    tokio::time::timeout(Duration::from_secs(10), app.stop())
        .await
        .expect("the server stops cleanly within 10 s");
}

/// A grab over HTTP: the answer's JSON.
async fn grab(app: &TestApp, token: &str, voucher: i64) -> Value {
    app.post(
        &format!("/api/voucher-order/seckill/{voucher}"),
        Some(token),
    )
    .await
    .body
}

// ------------------------------------------------------------------------------ the browser

/// `$CARGO_TARGET_DIR/ui-screenshots`, else `target/ui-screenshots` of the workspace (a
/// relative `CARGO_TARGET_DIR` is taken from the workspace root, where CI runs cargo).
fn screenshot_dir() -> PathBuf {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| {
            if t.is_absolute() {
                t
            } else {
                workspace.join(t)
            }
        })
        .unwrap_or_else(|| workspace.join("target"));
    target.join("ui-screenshots")
}

/// How long a step waits for the page, and how often it looks.
fn page_patience() -> Patience {
    Patience::new(Duration::from_secs(15)).every(Duration::from_millis(100))
}

/// A chromedriver process and one browser session in it, driven through `fantoccini`. Dropped
/// while a step fails, it saves a screenshot named after that step and prints the page's text.
struct Browser {
    driver: Child,
    client: fantoccini::Client,
    shots: PathBuf,
    /// What the browser is waiting for, named in the failure screenshot.
    step: Mutex<String>,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Chromium with `tz` (an IANA zone name) as its local time zone.
    async fn launch(tz: &str) -> Self {
        let chromedriver = std::env::var("HMDP_TEST_CHROMEDRIVER")
            .unwrap_or_else(|_| "/usr/bin/chromedriver".into());
        let chromium =
            std::env::var("HMDP_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let port = free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .env("TZ", tz)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {chromedriver} ({e}); install the Debian packages \
                     `chromium` and `chromium-driver`"
                )
            });
        let profile = tempfile::tempdir().unwrap();
        wait_until(page_patience(), "chromedriver listening", async || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .await;
        let args = [
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--no-proxy-server".to_owned(),
            "--lang=zh-CN".to_owned(),
            // A phone-sized window, tall enough that screenshots show whole pages.
            "--window-size=420,1280".to_owned(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": chromium, "args": args },
        });
        let client = fantoccini::ClientBuilder::new(HttpConnector::new())
            .capabilities(caps.as_object().unwrap().clone())
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| panic!("no browser session: {e}"));
        let shots = screenshot_dir();
        std::fs::create_dir_all(&shots).unwrap();
        Self {
            driver,
            client,
            shots,
            step: Mutex::new(String::new()),
            _profile: profile,
        }
    }

    async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// Runs `script` (a function body) with `args` (a JSON array); what it returns.
    async fn js(&self, script: &str, args: Value) -> Value {
        let Value::Array(args) = args else {
            panic!("script arguments are an array: {args}")
        };
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// The visible text of the first element matching `css`, if any.
    async fn text(&self, css: &str) -> Option<String> {
        self.js(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
            json!([css]),
        )
        .await
        .as_str()
        .map(str::to_owned)
    }

    /// The element matching `css`, waiting for it to appear (pages render asynchronously).
    async fn element(&self, css: &str) -> fantoccini::elements::Element {
        self.wait_text(css, "the element", |_| true).await;
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("find {css}: {e}"))
    }

    /// Clicks like a user (WebDriver scrolls the element into view and checks it is clickable).
    async fn click(&self, css: &str) {
        let element = self.element(css).await;
        element
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    async fn type_into(&self, css: &str, text: &str) {
        let element = self.element(css).await;
        element
            .clear()
            .await
            .unwrap_or_else(|e| panic!("clear {css}: {e}"));
        element
            .send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("type into {css}: {e}"));
    }

    /// Names the step the browser waits for, for the failure screenshot.
    fn step(&self, what: &str) {
        *self.step.lock().unwrap() = what.to_owned();
    }

    /// Waits until the element's text satisfies `ok`; its text.
    async fn wait_text(&self, css: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
        self.step(what);
        let what = format!("{what} at `{css}`");
        wait_until(page_patience(), &what, async || {
            match self.text(css).await {
                Some(t) if ok(&t) => Ok(t),
                found => Err(format!("found {found:?}")),
            }
        })
        .await
    }

    async fn wait_contains(&self, css: &str, needle: &str) -> String {
        self.wait_text(css, needle, |t| t.contains(needle)).await
    }

    /// Waits until the section at `css` says how it ended (`data-state`: `shown`, or `none`
    /// when the server has no route for it); that state.
    async fn wait_state(&self, css: &str) -> String {
        self.step("state");
        let what = format!("`{css}` saying how it ended");
        wait_until(page_patience(), &what, async || {
            self.js(
                "const e = document.querySelector(arguments[0]); return e ? e.dataset.state || null : null;",
                json!([css]),
            )
            .await
            .as_str()
            .map(str::to_owned)
        })
        .await
    }

    /// Waits until `script` (a function body, given `args`) returns something other than
    /// `null` or `false`; that value.
    async fn wait_js(&self, what: &str, script: &str, args: Value) -> Value {
        self.step(what);
        wait_until(page_patience(), what, async || {
            let v = self.js(script, args.clone()).await;
            (!v.is_null() && v != false).then_some(v)
        })
        .await
    }

    /// Whether the element at `css` has the class `class`.
    async fn has_class(&self, css: &str, class: &str) -> bool {
        self.js(
            "const e = document.querySelector(arguments[0]); return !!e && e.classList.contains(arguments[1]);",
            json!([css, class]),
        )
        .await
            == true
    }

    /// Opens `route` (e.g. `#/blog/2`) of the UI and waits for its page (`data-page`): a
    /// route that changes only the hash does not reload the document, so the page before must
    /// have been another one.
    async fn open(&self, base: &str, route: &str) {
        self.goto(&format!("{base}/app/{route}")).await;
        let page = route
            .trim_start_matches("#/")
            .split(['/', '?'])
            .next()
            .filter(|p| !p.is_empty())
            .unwrap_or("home");
        self.element(&format!(".page[data-page=\"{page}\"]")).await;
    }

    /// Chooses a local file in the file input at `css`, as a user picking it would.
    async fn choose_file(&self, css: &str, path: &std::path::Path) {
        let element = self.element(css).await;
        element
            .send_keys(&path.display().to_string())
            .await
            .unwrap_or_else(|e| panic!("choose {} in {css}: {e}", path.display()));
    }

    /// Waits until at least `n` images match `css` and all of them have loaded (a picture
    /// that fails to load is removed by the page, so the count falls short). Pictures load
    /// lazily, so the first one still loading is scrolled into view.
    async fn wait_images(&self, css: &str, n: usize) {
        self.step("images");
        let what = format!("{n} images loaded at `{css}`");
        wait_until(page_patience(), &what, async || {
            let v = self
                .js(
                    "const all = Array.from(document.querySelectorAll(arguments[0]));
                     const waiting = all.find(i => !i.complete);
                     if (waiting) waiting.scrollIntoView({ block: 'center' });
                     return [all.length, all.filter(i => i.complete && i.naturalWidth > 0).length];",
                    json!([css]),
                )
                .await;
            let (found, loaded) = (v[0].as_u64().unwrap_or(0), v[1].as_u64().unwrap_or(0));
            if found as usize >= n && loaded == found {
                Ok(())
            } else {
                Err(format!("{found} found, {loaded} loaded"))
            }
        })
        .await
    }

    async fn screenshot(&self, name: &str) {
        let png = self
            .client
            .screenshot()
            .await
            .unwrap_or_else(|e| panic!("screenshot {name}: {e}"));
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        eprintln!("screenshot: {}", path.display());
    }

    /// JavaScript errors and CSP violations the page recorded (see app.js).
    async fn page_errors(&self) -> Vec<String> {
        let v = self
            .js("return (window.__hmdpErrors || []).slice();", json!([]))
            .await;
        v.as_array()
            .map(|a| a.iter().map(|e| e.to_string()).collect())
            .unwrap_or_default()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // On a runtime of its own (this may run inside the test's, and must not block it):
        // the failure's screenshot, then the end of the session, so that chromium exits
        // before its driver is killed. Best effort.
        let client = self.client.clone();
        let failed = std::thread::panicking().then(|| {
            let step = self.step.lock().map(|s| s.clone()).unwrap_or_default();
            let name: String = step
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect();
            self.shots.join(format!("FAILED-{name}.png"))
        });
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let ends = async {
                    if let Some(path) = failed {
                        if let Ok(png) = client.screenshot().await {
                            let _ = std::fs::write(&path, png);
                            eprintln!("screenshot: {}", path.display());
                        }
                        let page = client
                            .execute("return document.body.innerText;", vec![])
                            .await;
                        let page = page.ok().and_then(|v| v.as_str().map(str::to_owned));
                        eprintln!("the page says:\n{}", page.unwrap_or_default());
                    }
                    let _ = client.close().await;
                };
                let _ = tokio::time::timeout(Duration::from_secs(10), ends).await;
            })
        })
        .join();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

// ------------------------------------------------------------------------------ the test

/// The server's current UTC offset in minutes: the service runs in this process.
fn server_offset_minutes() -> i32 {
    chrono::Local::now().offset().local_minus_utc() / 60
}

/// A browser zone at least 3 hours away from the server's: Tokyo (UTC+9), or New York when
/// the server is near Tokyo.
fn browser_zone() -> &'static str {
    if (server_offset_minutes() - 540).abs() < 180 {
        "America/New_York"
    } else {
        "Asia/Tokyo"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_user_logs_in_grabs_a_voucher_and_an_admin_watches_a_sale() {
    let app = spawn(|_| {}).await;
    let tz = browser_zone();
    let b = Browser::launch(tz).await;
    let base = app.url("");
    let started = chrono::Utc::now();

    // The UI is the root page (no HMDP_STATIC_DIR), and lives at /app/ as well.
    b.goto(&format!("{base}/")).await;
    b.wait_contains(".brand", "hmdp").await;

    // The browser really is in another zone than the server (else this test proves nothing).
    let zone = b
        .js(
            "return [Intl.DateTimeFormat().resolvedOptions().timeZone, -new Date().getTimezoneOffset()];",
            json!([]),
        )
        .await;
    assert_eq!(zone[0], tz, "chromium took TZ from its driver: {zone}");
    let browser_offset = zone[1].as_i64().unwrap() as i32;
    assert!(
        (browser_offset - server_offset_minutes()).abs() >= 180,
        "browser UTC{browser_offset:+} min vs server UTC{:+} min",
        server_offset_minutes()
    );
    b.goto(&format!("{base}/app/#/login")).await;

    // Log in: the page says where the code is in log-SMS mode, in both languages.
    let hint = b.wait_contains("#code-hint", "服务器日志").await;
    assert!(hint.contains("server log"), "{hint}");
    let phone = "13800000001";
    b.type_into("#phone", phone).await;
    b.click("#send-code").await;
    b.wait_contains("#login-msg", "验证码已发送").await;
    let code = app
        .sms
        .last_code_for(phone)
        .expect("the page asked for a code");
    b.type_into("#code", &code).await;
    b.screenshot("01-login").await;
    b.click("#login-btn").await;

    // Home: the shop types; the header shows who is logged in.
    b.wait_contains("#types", "美食").await;
    // Icons are drawings (the demo's under the original's file names), not emoji: the images
    // load under the page's content security policy.
    let tab_icons = b
        .js(
            "return document.querySelectorAll('#tabbar .ico svg.icon').length;",
            json!([]),
        )
        .await;
    assert_eq!(tab_icons, 5, "the tab bar draws its icons");
    b.wait_images("#types .type-icon img", 8).await;
    let who = b
        .wait_text("#who", "a nickname", |t| !t.contains("未登录"))
        .await;
    assert!(who.starts_with("user_"), "nickname: {who}");
    b.screenshot("02-home").await;

    // Language toggle: English labels, then back to Chinese.
    b.click("#lang").await;
    b.wait_contains("#tabbar", "Orders").await;
    b.wait_contains(".page", "Categories").await;
    b.screenshot("02-home-en").await;
    b.click("#lang").await;
    b.wait_contains("#tabbar", "订单").await;
    b.wait_contains(".page", "分类").await;

    // Shop types → shop list → shop detail with its flash-sale voucher.
    b.click("#types a[data-type-id=\"1\"]").await;
    b.wait_contains("#shops", "运河人家老灶火锅").await;
    b.wait_images("#shops .thumb img", 2).await;
    b.screenshot("03-shops").await;
    b.click("#shops a[data-shop-id=\"1\"]").await;
    b.wait_contains("#shop-name", "运河人家老灶火锅").await;
    let voucher = ".voucher[data-voucher-id=\"1\"]";
    b.wait_contains(&format!("{voucher} .stock"), "剩余 100 张")
        .await;
    b.wait_contains(&format!("{voucher} .countdown"), "距结束")
        .await;

    // Grab: success with the order id, then the order goes pending → created.
    b.wait_contains(&format!("{voucher} .grab"), "立即抢购")
        .await;
    b.click(&format!("{voucher} .grab")).await;
    b.wait_contains(&format!("{voucher} .result"), "抢购成功")
        .await;
    let order_id = b
        .text(&format!("{voucher} .result .order-id"))
        .await
        .unwrap();
    assert!(
        order_id.len() >= 16 && order_id.bytes().all(|c| c.is_ascii_digit()),
        "order id shown in full: {order_id}"
    );
    b.wait_contains(&format!("{voucher} .result .state"), "已创建")
        .await;
    b.wait_contains(&format!("{voucher} .stock"), "剩余 99 张")
        .await;
    b.screenshot("04-grabbed").await;

    // Grab again: the refusal.
    b.click(&format!("{voucher} .grab")).await;
    b.wait_contains(&format!("{voucher} .result"), "不能重复下单")
        .await;
    b.screenshot("05-refused").await;

    // My orders: the order, with all its digits.
    b.click("#tabbar a[data-tab=\"orders\"]").await;
    b.wait_contains("#orders", &order_id).await;
    b.screenshot("06-orders").await;

    // Admin: a wrong token is refused, the right one creates a sale.
    b.click("#tabbar a[data-tab=\"admin\"]").await;
    b.wait_contains("#admin-shop-name", "运河人家老灶火锅")
        .await;
    b.type_into("#admin-token", "not-the-token").await;
    b.type_into("#a-title", "浏览器测试秒杀券").await;
    b.type_into("#a-stock", "20").await;
    b.click("#admin-submit").await;
    b.wait_contains("#admin-result", "管理员令牌不正确").await;
    b.type_into("#admin-token", ADMIN_TOKEN).await;
    b.click("#admin-submit").await;
    b.wait_contains("#admin-result", "创建成功").await;
    b.screenshot("07-admin").await;
    let created = b
        .js(
            "return document.querySelector('#admin-result').dataset.voucherId;",
            json!([]),
        )
        .await;
    let sale: i64 = created.as_str().unwrap().parse().unwrap();
    // The form's default start is "now" on the browser's clock in the browser's zone; the
    // server stored that instant (not a time hours away), and the page says how it stored it.
    let stats: Value = app
        .client
        .get(app.url(&format!("/api/voucher/seckill/{sale}/stats")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let begin_ms = stats["data"]["beginMillis"].as_i64().unwrap();
    let from = started.timestamp_millis() - 120_000;
    let to = chrono::Utc::now().timestamp_millis();
    assert!(
        (from..=to).contains(&begin_ms),
        "the sale starts when the admin said: {stats}"
    );
    let stored = b.wait_contains("#admin-stored", "服务器本地时间").await;
    let server_begin = stats["data"]["beginTime"].as_str().unwrap()[..16].replace('T', " ");
    assert!(stored.contains(&server_begin), "{stored} vs {stats}");

    // The dashboard of the new sale: full stock, nothing accepted yet.
    b.click("#admin-open-dash").await;
    b.wait_contains("#dash-status", "进行中").await;
    b.wait_text("#stat-stock .v", "stock 20", |t| t == "20")
        .await;
    b.wait_text("#stat-accepted .v", "accepted 0", |t| t == "0")
        .await;

    // A small sale: eight buyers, fired from the test over ~3 s while the dashboard watches.
    let mut tokens = Vec::new();
    for i in 0..8 {
        tokens.push(app.login(&format!("1390000{:04}", i)).await);
    }
    let points = "return document.querySelector('#line-accepted').getAttribute('points');";
    let before = b.js(points, json!([])).await;
    for (i, t) in tokens.iter().enumerate() {
        let r = grab(&app, t, sale).await;
        assert_eq!(r["success"], true, "buyer {i}: {r}");
        // Not a wait: the sale's pace, for the dashboard to draw.
        tokio::time::sleep(Duration::from_millis(350)).await;
        if i == 4 {
            b.wait_text("#stat-accepted .v", "some accepted", |t| {
                t.parse::<i64>().is_ok_and(|n| n >= 1)
            })
            .await;
            b.screenshot("08-dashboard-during-sale").await;
        }
    }
    // A repeat buyer is refused and changes nothing.
    let r = grab(&app, &tokens[0], sale).await;
    assert_eq!(r["code"], "duplicate_order", "{r}");
    b.wait_text("#stat-accepted .v", "accepted 8", |t| t == "8")
        .await;
    b.wait_text("#stat-stock .v", "stock 12", |t| t == "12")
        .await;
    b.wait_text("#stat-persisted .v", "persisted 8", |t| t == "8")
        .await;
    let peak = b.wait_contains("#stat-rate .small", "峰值").await;
    let peak: f64 = peak
        .trim_start_matches("峰值 ")
        .trim_end_matches("/秒")
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("peak rate {peak:?}: {e}"));
    assert!(peak > 0.0, "the dashboard saw a positive rate");
    // Requests per second come from /metrics when the server exposes it (to the admin token,
    // which the page has from the admin form).
    let has_metrics = app
        .client
        .get(app.url("/metrics"))
        .header("x-admin-token", ADMIN_TOKEN)
        .send()
        .await
        .is_ok_and(|r| r.status() == 200);
    if has_metrics {
        let peak = b.wait_contains("#stat-req .small", "峰值").await;
        let peak: f64 = peak
            .trim_start_matches("峰值 ")
            .split("/秒")
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("request peak {peak:?}: {e}"));
        assert!(peak > 0.0, "the dashboard saw grab requests");
    } else {
        b.wait_contains("#stat-req .small", "/metrics").await;
    }
    let after = b.js(points, json!([])).await;
    assert_ne!(before, after, "the chart moved");
    b.screenshot("09-dashboard-after-sale").await;

    // Two sales created the original's way, in server-local time: one running for another
    // hour, one that has not begun.
    let now = chrono::Local::now().naive_local();
    let base = app.url("");
    let create = |title: &'static str, begin: chrono::NaiveDateTime, end: chrono::NaiveDateTime| {
        let sale = FlashSale::new(5).shop(2).title(title).window(begin, end);
        let (client, base) = (&app.client, &base);
        async move {
            sale.create(client, base, ADMIN_TOKEN)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    let running_begin = now - chrono::Duration::minutes(30);
    let running = create("正在秒杀", running_begin, now + chrono::Duration::hours(1)).await;
    let later = create(
        "明日秒杀",
        now + chrono::Duration::hours(2),
        now + chrono::Duration::hours(3),
    )
    .await;
    b.click("#tabbar a[data-tab=\"home\"]").await;
    b.click("#types a[data-type-id=\"1\"]").await;
    b.click("#shops a[data-shop-id=\"2\"]").await;

    // The running sale, seen from the other zone: open, about an hour left, grab enabled,
    // and its window shown in the browser's local time.
    let card = format!(".voucher[data-voucher-id=\"{running}\"]");
    let countdown = b
        .wait_contains(&format!("{card} .countdown"), "距结束")
        .await;
    assert!(
        countdown.contains("00:59:") || countdown.contains("01:00:00"),
        "{countdown}"
    );
    b.wait_contains(&format!("{card} .grab"), "立即抢购").await;
    let disabled = b
        .js(
            "return document.querySelector(arguments[0]).disabled;",
            json!([format!("{card} .grab")]),
        )
        .await;
    assert_eq!(disabled, false, "the grab button is live during the sale");
    let begin_here = chrono::Local
        .from_local_datetime(&running_begin)
        .unwrap()
        .with_timezone(&chrono::FixedOffset::east_opt(browser_offset * 60).unwrap())
        .format("%Y-%m-%d %H:%M")
        .to_string();
    let window = b.text(&format!("{card} .window")).await.unwrap_or_default();
    assert!(window.starts_with(&begin_here), "{window} vs {begin_here}");

    // The sale that has not begun: a countdown to the start and no way to grab yet.
    let card = format!(".voucher[data-voucher-id=\"{later}\"]");
    let countdown = b
        .wait_contains(&format!("{card} .countdown"), "距开始")
        .await;
    assert!(
        countdown.contains("01:59:") || countdown.contains("02:00:00"),
        "{countdown}"
    );
    b.wait_contains(&format!("{card} .grab"), "未开始").await;
    let disabled = b
        .js(
            "return document.querySelector(arguments[0]).disabled;",
            json!([format!("{card} .grab")]),
        )
        .await;
    assert_eq!(disabled, true, "the grab button waits for the start");
    b.screenshot("10-running-and-not-started").await;

    let errors = b.page_errors().await;
    assert!(errors.is_empty(), "the page reported errors: {errors:?}");
    drop(b);
    stop(app).await;
}

/// The session token the page keeps.
async fn page_token(b: &Browser) -> String {
    b.js("return localStorage.getItem('hmdp.token');", json!([]))
        .await
        .as_str()
        .expect("the page keeps its session")
        .to_owned()
}

/// Clicks `css` once it is in the middle of the window (not under the tab bar).
async fn press(b: &Browser, css: &str) {
    b.element(css).await;
    b.js(
        "document.querySelector(arguments[0]).scrollIntoView({ block: 'center' });",
        json!([css]),
    )
    .await;
    b.click(css).await;
}

/// Grabs `voucher` on the shop page that shows it; the order id the page shows, once written.
async fn grab_in_page(b: &Browser, voucher: i64) -> String {
    let card = format!(".voucher[data-voucher-id=\"{voucher}\"]");
    b.wait_contains(&format!("{card} .grab"), "立即抢购").await;
    press(b, &format!("{card} .grab")).await;
    b.wait_contains(&format!("{card} .result"), "抢购成功")
        .await;
    let id = b.text(&format!("{card} .result .order-id")).await.unwrap();
    b.wait_contains(&format!("{card} .result .state"), "已创建")
        .await;
    id
}

/// The order's part of "my orders" (its rows), as a selector.
fn order_rows(id: &str) -> String {
    format!("#orders tbody.order[data-order-id=\"{id}\"]")
}

/// The names of the buttons an order offers.
async fn buttons(b: &Browser, id: &str) -> Value {
    b.js(
        "return Array.from(document.querySelectorAll(arguments[0] + ' button'))
           .filter(e => !e.disabled).map(e => e.innerText.trim());",
        json!([order_rows(id)]),
    )
    .await
}

/// An order's life in "my orders". One order is paid: 支付 shows the trade number and amount
/// and waits; the gateway's signed notice (posted by the test with what the page showed)
/// turns it 已支付, and 退款 asks for the money back. Another is cancelled and its unit goes
/// back on sale; the sales' dashboards count paid, unpaid and released orders. Last, with a
/// pay timeout of a few seconds, an unpaid order's countdown runs out and the page, left
/// alone, shows it 已取消 once the service closed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_order_is_paid_cancelled_refunded_and_closes_on_its_own() {
    let app = spawn(|_| {}).await;
    let b = Browser::launch(browser_zone()).await;
    let base = app.url("");
    log_in(&b, &app, &base, "13800000021").await;
    let token = page_token(&b).await;
    let to_pay = create_on(
        &app,
        FlashSale::new(5)
            .shop(2)
            .title("支付测试券")
            .values(990, 2000),
    )
    .await;
    let to_cancel = create_on(&app, FlashSale::new(5).shop(2).title("取消测试券")).await;
    b.open(&base, "#/shop/2").await;
    let paid = grab_in_page(&b, to_pay).await;
    let cancelled = grab_in_page(&b, to_cancel).await;

    // Both unpaid, each with its countdown to the close and its two buttons.
    b.open(&base, "#/orders").await;
    for id in [&paid, &cancelled] {
        let rows = order_rows(id);
        b.wait_text(&format!("{rows} .status-name"), "未支付", |t| {
            t == "未支付"
        })
        .await;
        b.wait_contains(&format!("{rows} .countdown"), "后自动关闭")
            .await;
        assert_eq!(buttons(&b, id).await, json!(["支付", "取消"]), "{id}");
    }
    b.screenshot("o01-unpaid").await;

    // Pay: the page shows where and how much, and waits for the gateway.
    press(&b, &format!("{} .pay", order_rows(&paid))).await;
    b.wait_contains(&format!("{} .pay-info", order_rows(&paid)), "等待支付…")
        .await;
    let trade_no = b
        .text(&format!("{} .pay-info .trade-no", order_rows(&paid)))
        .await
        .unwrap();
    let amount = b
        .text(&format!("{} .pay-info .amount", order_rows(&paid)))
        .await
        .unwrap();
    assert_eq!(amount, "¥9.90");
    let order = app
        .get(&format!("/api/voucher-order/{paid}"), Some(&token))
        .await;
    assert_eq!(order.body["data"]["status"], 1, "{order:?}");
    assert_eq!(
        order.body["data"]["payment"]["tradeNo"], trade_no,
        "the page shows the order's trade number: {order:?}"
    );
    assert_eq!(order.body["data"]["payment"]["amount"], 990, "{order:?}");
    b.screenshot("o02-waiting-for-payment").await;
    let notice = signed_notice(&app, paid.parse().unwrap(), &trade_no, 990, "paid").await;
    assert!(notice.success(), "{notice:?}");
    assert_eq!(notice.body["data"]["statusName"], "paid", "{notice:?}");
    // The page sees it on its own: no reload, no click.
    b.wait_text(
        &format!("{} .status-name", order_rows(&paid)),
        "已支付",
        |t| t == "已支付",
    )
    .await;
    let waiting = b
        .js(
            "return document.querySelector(arguments[0]) !== null;",
            json!([format!("{} .pay-info", order_rows(&paid))]),
        )
        .await;
    assert_eq!(waiting, false, "a paid order waits for nothing");
    assert_eq!(buttons(&b, &paid).await, json!(["退款"]));
    b.screenshot("o03-paid").await;

    // Cancel the other: 已取消, nothing left to do with it.
    press(&b, &format!("{} .cancel", order_rows(&cancelled))).await;
    b.wait_text(
        &format!("{} .status-name", order_rows(&cancelled)),
        "已取消",
        |t| t == "已取消",
    )
    .await;
    assert_eq!(buttons(&b, &cancelled).await, json!([]));
    let countdowns = b
        .js(
            "return document.querySelectorAll(arguments[0] + ' .countdown').length;",
            json!([order_rows(&cancelled)]),
        )
        .await;
    assert_eq!(countdowns, 0, "a cancelled order has no countdown");

    // Refund the paid one: 退款中 until the gateway confirms.
    press(&b, &format!("{} .refund", order_rows(&paid))).await;
    b.wait_text(
        &format!("{} .status-name", order_rows(&paid)),
        "退款中",
        |t| t == "退款中",
    )
    .await;
    assert_eq!(buttons(&b, &paid).await, json!([]));
    let table = b.text("#orders").await.unwrap_or_default();
    assert!(
        !table.contains("null") && !table.contains("undefined"),
        "{table}"
    );
    b.screenshot("o04-cancelled-and-refunding").await;

    // The dashboards: the paid sale counts one paid order (now refunding); the cancelled
    // one, a released order whose unit is back in stock.
    b.open(&base, &format!("#/dash/{to_pay}")).await;
    b.wait_text("#stat-paid .v", "paid 1", |t| t == "1").await;
    b.wait_contains("#stat-paid .small", "退款中 1").await;
    b.wait_text("#stat-unpaid .v", "unpaid 0", |t| t == "0")
        .await;
    b.wait_text("#stat-released .v", "released 0", |t| t == "0")
        .await;
    b.wait_text("#stat-stock .v", "stock 4", |t| t == "4").await;
    b.open(&base, &format!("#/dash/{to_cancel}")).await;
    b.wait_text("#stat-released .v", "released 1", |t| t == "1")
        .await;
    b.wait_text("#stat-paid .v", "paid 0", |t| t == "0").await;
    b.wait_text("#stat-unpaid .v", "unpaid 0", |t| t == "0")
        .await;
    b.wait_text("#stat-stock .v", "stock 5", |t| t == "5").await;
    b.screenshot("o05-dashboard-released").await;
    let errors = b.page_errors().await;
    assert!(errors.is_empty(), "the page reported errors: {errors:?}");
    stop(app).await;

    // A service whose orders close a few seconds after the grab: the countdown runs out on
    // the page, which then shows the order closed without being reloaded.
    let app = spawn(|c| c.seckill.pay_timeout = Duration::from_secs(5)).await;
    let base = app.url("");
    log_in(&b, &app, &base, "13800000022").await;
    let sale = create_on(&app, FlashSale::new(5).shop(2).title("超时测试券")).await;
    b.open(&base, "#/shop/2").await;
    let closing = grab_in_page(&b, sale).await;
    b.open(&base, "#/orders").await;
    b.js("window.__sameDocument = true;", json!([])).await;
    let rows = order_rows(&closing);
    b.wait_text(&format!("{rows} .status-name"), "未支付", |t| {
        t == "未支付"
    })
    .await;
    let countdown = b
        .wait_contains(&format!("{rows} .countdown"), "后自动关闭")
        .await;
    assert!(countdown.starts_with("00:00:0"), "{countdown}");
    b.screenshot("o06-counting-down").await;
    b.wait_text(&format!("{rows} .status-name"), "已取消", |t| {
        t == "已取消"
    })
    .await;
    assert_eq!(buttons(&b, &closing).await, json!([]));
    let same = b
        .js("return window.__sameDocument === true;", json!([]))
        .await;
    assert_eq!(same, true, "the page was not reloaded");
    let token = page_token(&b).await;
    let order = app
        .get(&format!("/api/voucher-order/{closing}"), Some(&token))
        .await;
    assert_eq!(order.body["data"]["status"], 4, "{order:?}");
    b.screenshot("o07-closed").await;
    let errors = b.page_errors().await;
    assert!(errors.is_empty(), "the page reported errors: {errors:?}");
    drop(b);
    stop(app).await;
}

/// Creates `sale` on `app` through the admin route; its id.
async fn create_on(app: &TestApp, sale: FlashSale) -> i64 {
    sale.create(&app.client, &app.url(""), ADMIN_TOKEN)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Logs in through the login page with the code from the captured SMS; lands on the home page.
async fn log_in(b: &Browser, app: &TestApp, base: &str, phone: &str) {
    b.open(base, "#/login").await;
    b.type_into("#phone", phone).await;
    b.click("#send-code").await;
    b.wait_contains("#login-msg", "验证码已发送").await;
    let code = app
        .sms
        .last_code_for(phone)
        .expect("the page asked for a code");
    b.type_into("#code", &code).await;
    b.click("#login-btn").await;
    b.element(".page[data-page=\"home\"]").await;
    b.wait_text("#who", "a nickname", |t| !t.contains("未登录"))
        .await;
}

/// The month before "yyyyMM".
fn month_before(month: &str) -> String {
    let (y, m): (i32, u32) = (month[..4].parse().unwrap(), month[4..].parse().unwrap());
    if m == 1 {
        format!("{}12", y - 1)
    } else {
        format!("{y}{:02}", m - 1)
    }
}

/// The social half on the demo data, as demo user 1 (湖畔吃货, who follows 运河边的猫): the hot
/// notes on the home page, a note liked and its author unfollowed and followed again, a note
/// of someone followed in the feed, a note written with an uploaded photo, the daily check-in
/// and the shop's visitors. Last, the same pages on a server without the social routes (the
/// browser's `fetch` answers 404 for them): those sections stay hidden, without an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_demo_user_reads_likes_follows_writes_and_checks_in() {
    let app = spawn(|c| c.social.uv_flush = Duration::from_millis(100)).await;
    let b = Browser::launch(browser_zone()).await;
    let base = app.url("");
    log_in(&b, &app, &base, "16600000001").await;
    let token = page_token(&b).await;

    // Home: the ten hottest notes, the most liked first, each with its cover picture.
    assert_eq!(b.wait_state("#notes-section").await, "shown");
    b.wait_js(
        "ten note cards",
        "return document.querySelectorAll('#hot-notes .note-card').length === 10;",
        json!([]),
    )
    .await;
    b.wait_images("#hot-notes .note-card .cover img", 10).await;
    let first = b.text("#hot-notes .note-card .title").await;
    assert_eq!(first.as_deref(), Some("运河边的鸳鸯锅，辣得刚刚好"));
    b.screenshot("s01-hot-notes").await;

    // A note by 运河边的猫, whom user 1 follows: like it, then unfollow and follow again.
    b.open(&base, "#/blog/2").await;
    b.wait_contains("#note-title", "早上七点的一碗片儿川").await;
    b.wait_text("#follow-btn", "已关注", |t| t == "已关注")
        .await;
    b.wait_images("#note-images img", 1).await;
    assert!(!b.has_class("#like-btn", "on").await, "not liked yet");
    let likes = |text: String| -> i64 {
        text.trim()
            .parse()
            .unwrap_or_else(|e| panic!("like count {text:?}: {e}"))
    };
    b.click("#like-btn").await;
    b.wait_js(
        "the like",
        "return document.querySelector('#like-btn').classList.contains('on');",
        json!([]),
    )
    .await;
    b.wait_js(
        "one liker",
        "return document.querySelectorAll('#likers .avatar').length === 1;",
        json!([]),
    )
    .await;
    let liker = b
        .js(
            "return document.querySelector('#likers .avatar').title;",
            json!([]),
        )
        .await;
    assert_eq!(liker, "湖畔吃货", "the liker is me");
    // The count is the server's (which replaces the demo's stored count by the likers it
    // knows of on a note's first like), on the button and beside the likers.
    let note = app.get("/api/blog/2", Some(&token)).await.body["data"].clone();
    assert_eq!(note["isLike"], true, "{note}");
    let liked = note["liked"].as_i64().unwrap();
    assert!(liked >= 1, "{note}");
    let count = format!("{liked} 人赞过");
    b.wait_text("#likers-count", &count, |t| t == count).await;
    assert_eq!(
        likes(b.text("#like-btn .n").await.unwrap_or_default()),
        liked
    );
    b.screenshot("s02-liked").await;
    let author = note["userId"].clone();
    let following = || async {
        app.get(&format!("/api/follow/or/not/{author}"), Some(&token))
            .await
            .body["data"]
            .clone()
    };
    b.click("#follow-btn").await;
    b.wait_text("#follow-btn", "关注", |t| t == "关注").await;
    assert_eq!(following().await, false, "unfollowed on the server");
    b.click("#follow-btn").await;
    b.wait_text("#follow-btn", "已关注", |t| t == "已关注")
        .await;
    assert_eq!(following().await, true, "followed again on the server");

    // 运河边的猫 publishes (through the API): the note reaches user 1's feed, the only one there.
    let cat = app.login("16600000002").await;
    let title = "浏览器测试：傍晚的运河";
    let r = app
        .post_json(
            "/api/blog",
            &json!({ "shopId": 1, "title": title, "content": "晚霞很好看", "images": "" }),
            Some(&cat),
        )
        .await;
    assert!(r.success(), "{r:?}");
    b.open(&base, "#/feed").await;
    b.wait_contains("#feed", title).await;
    b.wait_text("#feed-more", "没有更多了", |t| t == "没有更多了")
        .await;
    b.screenshot("s03-feed").await;

    // Write a note: pick the shop from a search, upload a photo, publish, read it.
    let dir = tempfile::tempdir().unwrap();
    let photo = dir.path().join("canal.png");
    std::fs::write(&photo, square_png(32, [40, 120, 200])).unwrap();
    b.open(&base, "#/post").await;
    b.type_into("#post-shop-q", "桥西").await;
    let shop = "桥西手冲咖啡";
    b.wait_contains("#post-shop-picks", shop).await;
    let shop_id = b
        .js(
            "const p = Array.from(document.querySelectorAll('#post-shop-picks .chip-pick'))
               .find(e => e.innerText.trim() === arguments[0]);
             return p ? p.dataset.shopId : null;",
            json!([shop]),
        )
        .await;
    let shop_id = shop_id.as_str().expect("the shop is offered").to_owned();
    b.click(&format!(
        "#post-shop-picks .chip-pick[data-shop-id=\"{shop_id}\"]"
    ))
    .await;
    b.wait_contains("#post-shop", shop).await;
    let note_title = "浏览器里写的笔记";
    b.type_into("#post-title", note_title).await;
    b.type_into("#post-content", "窗边的位置，下午的光很好。")
        .await;
    b.choose_file("#post-file", &photo).await;
    b.wait_images("#post-photos .photo img", 1).await;
    let name = b
        .js(
            "return document.querySelector('#post-photos .photo').dataset.name;",
            json!([]),
        )
        .await;
    let name = name.as_str().expect("the photo's name").to_owned();
    assert!(
        name.starts_with("/blogs/") && name.ends_with(".png"),
        "{name}"
    );
    b.screenshot("s04-post").await;
    b.click("#post-submit").await;
    let hash = b
        .wait_js(
            "the new note's page",
            "return /^#\\/blog\\/\\d+$/.test(location.hash)
                 && document.querySelector('.page[data-page=\"blog\"]') ? location.hash : null;",
            json!([]),
        )
        .await;
    let id: i64 = hash.as_str().unwrap()["#/blog/".len()..].parse().unwrap();
    b.wait_text("#note-title", note_title, |t| t == note_title)
        .await;
    b.wait_images("#note-images img", 1).await;
    let src = b
        .js(
            "return document.querySelector('#note-images img').getAttribute('src');",
            json!([]),
        )
        .await;
    assert_eq!(src, format!("/imgs{name}"), "the note shows the photo");
    b.wait_contains("#note-shop", shop).await;
    let stored = app.get(&format!("/api/blog/{id}"), Some(&token)).await;
    assert_eq!(stored.body["data"]["images"], format!("/imgs{name}"));
    assert_eq!(stored.body["data"]["shopId"].to_string(), shop_id);
    b.screenshot("s05-new-note").await;

    // Check in: the button turns into "checked in", today is marked; ‹ shows the month before.
    b.open(&base, "#/me").await;
    assert_eq!(b.wait_state("#sign-card").await, "shown");
    b.wait_js(
        "the check-in button",
        "const e = document.querySelector('#sign-btn');
         return !!e && !e.disabled && e.innerText.includes('签到') && !e.innerText.includes('已签到');",
        json!([]),
    )
    .await;
    let month = b
        .wait_js(
            "the calendar",
            "const e = document.querySelector('#sign-calendar'); return e ? e.dataset.month || null : null;",
            json!([]),
        )
        .await;
    let month = month.as_str().unwrap().to_owned();
    b.click("#sign-btn").await;
    b.wait_js(
        "checked in",
        "const e = document.querySelector('#sign-btn');
         return e.disabled && e.innerText.includes('今日已签到');",
        json!([]),
    )
    .await;
    b.wait_js(
        "today signed",
        "return document.querySelector('#sign-calendar .day.today.signed') !== null;",
        json!([]),
    )
    .await;
    b.screenshot("s06-checked-in").await;
    b.click("#sign-prev").await;
    let prev = month_before(&month);
    b.wait_js(
        "the month before",
        "return document.querySelector('#sign-calendar').dataset.month === arguments[0];",
        json!([prev]),
    )
    .await;
    let heading = format!("{} 年 {} 月", &prev[..4], prev[4..].parse::<u32>().unwrap());
    b.wait_text("#sign-month", &heading, |t| t == heading).await;
    let today_shown = b
        .js(
            "return document.querySelector('#sign-calendar .day.today') !== null;",
            json!([]),
        )
        .await;
    assert_eq!(today_shown, false, "today is not in the month before");

    // The shop's visitors: user 1's visit is counted once flushed (HMDP_UV_FLUSH_MS), and a
    // count is shared for a second; the count is read when the page opens, so the page is
    // reopened once the service counts the visit (asked in-process, not through the user's
    // request limit).
    b.open(&base, "#/shop/1").await;
    let shop = hmdp::testing::domain::ShopId::new(1).unwrap();
    let mut round = 0;
    wait_until(
        Duration::from_secs(15),
        "the visit counted on the page",
        async || {
            let text = b
                .wait_js(
                    "the visitors line",
                    "const e = document.querySelector('#shop-uv:not([data-old])');
                 return e && e.dataset.state ? [e.dataset.state, e.innerText] : null;",
                    json!([]),
                )
                .await;
            assert_eq!(text[0], "shown", "{text}");
            let line = text[1].as_str().unwrap().trim().to_owned();
            let n: i64 = line
                .strip_prefix("近 7 天 ")
                .and_then(|r| r.strip_suffix(" 位访客"))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("visitors line {line:?}"));
            if n >= 1 {
                return Ok(());
            }
            round += 1;
            wait_until(Duration::from_secs(15), "the visit counted", async || {
                app.state
                    .activity
                    .shop_uv(shop, 7, [127, 0, 0, 1].into())
                    .await
                    .unwrap_or(0)
                    >= 1
            })
            .await;
            b.js(
                "document.querySelector('#shop-uv').dataset.old = '1';
             location.hash = '#/shop/1?again=' + arguments[0];",
                json!([round]),
            )
            .await;
            Err(line)
        },
    )
    .await;
    b.screenshot("s07-shop-visitors").await;

    // The profile editor: a nickname with markup is saved, and shown as text, not markup.
    b.open(&base, "#/me").await;
    assert_eq!(b.wait_state("#profile-card").await, "shown");
    let nick = "<b>湖畔吃货</b>";
    b.type_into("#p-nick", nick).await;
    b.type_into("#p-city", "杭州").await;
    // Below the fold, under the tab bar: brought into view as a user would scroll to it.
    b.js(
        "document.querySelector('#profile-save').scrollIntoView({ block: 'center' });",
        json!([]),
    )
    .await;
    b.click("#profile-save").await;
    b.wait_contains("#profile-result .notice.ok", "已保存")
        .await;
    b.wait_text("#me-name", nick, |t| t == nick).await;
    let markup = b
        .js(
            "return document.querySelector('#me-name b') !== null;",
            json!([]),
        )
        .await;
    assert_eq!(markup, false, "the nickname is text");
    let stored = app.get("/api/user/info", Some(&token)).await;
    assert_eq!(stored.body["data"]["nickName"], nick);
    assert_eq!(stored.body["data"]["city"], "杭州");
    b.screenshot("s08-profile").await;

    let errors = b.page_errors().await;
    assert!(errors.is_empty(), "the page reported errors: {errors:?}");
    social_sections_degrade_quietly(&b, &base).await;
    let errors = b.page_errors().await;
    assert!(errors.is_empty(), "the page reported errors: {errors:?}");
    drop(b);
    stop(app).await;
}

/// On a server without the social routes or the profile route (the social half may be switched
/// off or not yet deployed), their sections stay hidden and show no error. The browser's `fetch` stands in
/// for such a server: it answers the routes with the service's 404 envelope; the views are
/// reached by hash changes, so the stand-in stays in place.
async fn social_sections_degrade_quietly(b: &Browser, base: &str) {
    let hidden = |css: &'static str| async move {
        b.js(
            "const e = document.querySelector(arguments[0]); return e ? e.closest('[hidden]') !== null : null;",
            json!([css]),
        )
        .await
    };
    let no_error = |page: &'static str| async move {
        let bad = b
            .js(
                "return Array.from(document.querySelectorAll('.notice.bad')).map(e => e.innerText);",
                json!([]),
            )
            .await;
        assert_eq!(bad, json!([]), "{page} shows no error");
    };
    let to = |route: &'static str, page: &'static str| async move {
        b.js("location.hash = arguments[0];", json!([route])).await;
        b.element(&format!(".page[data-page=\"{page}\"]")).await;
    };

    b.open(base, "#/orders").await;
    b.js(
        "const gone = arguments[0].map(p => new RegExp(p));
         const real = window.fetch.bind(window);
         window.fetch = (url, opts) => {
           const path = new URL(String(url), location.href).pathname;
           if (!gone.some(re => re.test(path))) return real(url, opts);
           const body = { success: false, errorMsg: 'Not Found', code: 'not_found' };
           return Promise.resolve(new Response(JSON.stringify(body),
             { status: 404, headers: { 'content-type': 'application/json' } }));
         };",
        json!([[
            "^/api/blog(/|$)",
            "^/api/follow/",
            "^/api/user/sign(/|$)",
            "^/api/shop/\\d+/uv$",
            "^/api/upload/",
            "^/api/user/info$",
        ]]),
    )
    .await;

    to("#/", "home").await;
    b.wait_contains("#types", "美食").await;
    assert_eq!(b.wait_state("#notes-section").await, "none");
    assert_eq!(
        hidden("#hot-notes").await,
        true,
        "no notes route: no notes section"
    );
    no_error("home").await;

    to("#/shop/1", "shop").await;
    b.wait_contains("#shop-name", "运河人家老灶火锅").await;
    assert_eq!(b.wait_state("#shop-uv").await, "none");
    assert_eq!(
        hidden("#shop-uv").await,
        true,
        "no visitors route: no visitors line"
    );
    b.wait_js(
        "the voucher list",
        "return document.querySelector('.voucher') !== null;",
        json!([]),
    )
    .await;
    assert_eq!(
        hidden("#shop-post").await,
        true,
        "no notes route: no link to write one"
    );
    no_error("shop").await;

    to("#/me", "me").await;
    b.wait_contains("#me-name", "湖畔吃货").await;
    assert_eq!(b.wait_state("#sign-card").await, "none");
    assert_eq!(
        hidden("#sign-card").await,
        true,
        "no sign-in routes: no card"
    );
    assert_eq!(b.wait_state("#profile-card").await, "none");
    assert_eq!(
        hidden("#profile-card").await,
        true,
        "no profile route: no editor"
    );
    no_error("me").await;

    to("#/blog/1", "blog").await;
    b.wait_contains(".page[data-page=\"blog\"] .empty", "笔记")
        .await;
    no_error("note").await;

    to("#/feed", "feed").await;
    b.wait_contains("#feed .empty", "关注动态").await;
    no_error("feed").await;
    b.screenshot("s08-social-sections-without-routes").await;
}

/// The URL layout: our UI at `/app/` always and at `/` only without `HMDP_STATIC_DIR`; it
/// shadows no API path. Plain HTTP, no browser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_lives_at_app_and_at_the_root_unless_a_static_dir_owns_it() {
    let no_redirects = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let get = |app: &TestApp, path: &str| no_redirects.get(app.url(path)).send();

    let app = spawn(|_| {}).await;
    for path in ["/", "/app/", "/app/index.html"] {
        let r = get(&app, path).await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        assert!(
            r.headers().contains_key("content-security-policy"),
            "{path}"
        );
        assert!(r.text().await.unwrap().contains("/app/app.js"), "{path}");
    }
    let r = get(&app, "/app").await.unwrap();
    assert_eq!(r.status(), 308);
    assert_eq!(r.headers()["location"], "/app/");
    for (path, kind) in [
        ("/app/app.js", "text/javascript"),
        ("/app/app.css", "text/css"),
        ("/app/icon.svg", "image/svg+xml"),
    ] {
        let r = get(&app, path).await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(kind),
            "{path}"
        );
    }
    // The API is untouched, at both mount points; unknown paths stay 404 envelopes.
    for path in ["/shop-type/list", "/api/shop-type/list", "/health"] {
        let r = get(&app, path).await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json"),
            "{path}"
        );
    }
    let r: Value = get(&app, "/app/nope.js")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["code"], "not_found");
    let r = no_redirects.post(app.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    // Our pictures: type icons under the original's names, the demo data's pictures.
    for (path, kind) in [
        ("/imgs/types/ms.png", "image/png"),
        ("/imgs/demo/hotpot.svg", "image/svg+xml"),
    ] {
        let r = get(&app, path).await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.headers()["content-type"], kind, "{path}");
        assert!(r.headers().contains_key("content-security-policy"));
    }
    let r: Value = get(&app, "/imgs/demo/nope.svg")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["code"], "not_found");
    stop(app).await;

    // With the operator's pages: they own `/`, our UI stays at `/app/`.
    let parent = tempfile::tempdir().unwrap();
    let site = parent.path().join("site");
    std::fs::create_dir_all(site.join("imgs/types")).unwrap();
    std::fs::write(site.join("index.html"), "<h1>original pages</h1>").unwrap();
    std::fs::write(site.join("imgs/types/ms.png"), "their icon").unwrap();
    std::fs::write(parent.path().join("secret.txt"), "top secret").unwrap();
    let root = site.clone();
    let app = spawn(move |c| c.static_dir = Some(root)).await;
    let r = get(&app, "/").await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "<h1>original pages</h1>");
    let r = get(&app, "/app/").await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("/app/app.js"));
    // Their pictures win; ours fill the gaps; nothing outside the folder is reachable.
    let r = get(&app, "/imgs/types/ms.png").await.unwrap();
    assert_eq!(r.text().await.unwrap(), "their icon");
    let r = get(&app, "/imgs/types/KTV.png").await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/png");
    assert_eq!(
        get(&app, "/imgs/demo/coffee.svg").await.unwrap().status(),
        200
    );
    for path in [
        "/imgs/demo/..%2f..%2f..%2fsecret.txt",
        "/imgs/types/..%2F..%2F..%2Fsecret.txt",
        "/imgs/demo/%2e%2e%2f%2e%2e%2f%2e%2e%2fsecret.txt",
    ] {
        let r = get(&app, path).await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
        assert!(!r.text().await.unwrap().contains("top secret"), "{path}");
    }
    let r: Value = get(&app, "/missing.html")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["code"], "not_found");
    stop(app).await;
}
