//! The Grafana board and the Prometheus rules of `deploy/observability/`, run on a real
//! Prometheus (Debian's `prometheus` and `promtool`; `scripts/test.sh` installs them).
//!
//! A board whose queries name a metric hmdp does not serve shows "No data" forever, and an alert
//! on such a name never fires: nothing fails, so only running them finds out. Two services (one
//! per order transport, so the RabbitMQ panels have series too) make a small sale each; a
//! private Prometheus scrapes their metrics listeners every second and loads `alerts.yml`. Then
//! every panel's query must be accepted and return data, every metric name in the board and the
//! rules must be carried by a series, every rule must evaluate without error, and only the
//! rules this setup is known to trip may be active.
//!
//! With `HMDP_BOARD_SNAPSHOT=<file.svg>` the test also draws the board from that Prometheus
//! before it stops (`scripts/board-snapshot.py`): the picture of docs/internals/observability.md.
//!
//! Prometheus runs with its exemplar storage on: a traced service's sampled request reaches
//! `/api/v1/query_exemplars` with its trace id.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::Arc,
    time::Duration,
};

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::helpers::{
    Backend, ChildGuard, Patience, Receiver, TestApp, TracedServe, create_sale, free_port,
    grab_raw, order_id_of, spawn_app, spawn_app_with, spawn_app_with_rabbitmq, wait_for_orders,
    wait_until,
};

/// The variable that asks the board test for a picture of the board, and where to write it.
const SNAPSHOT_VAR: &str = "HMDP_BOARD_SNAPSHOT";

/// What Grafana puts for the board's variables: every instance, and a rate window that holds
/// several of the test's one-second scrapes.
const VARIABLES: [(&str, &str); 4] = [
    ("${instance}", ".*"),
    ("$instance", ".*"),
    ("${__rate_interval}", "15s"),
    ("$__rate_interval", "15s"),
];

/// Rules a healthy service may trip here, and why: the test Redis keeps no AOF and the test
/// services do not wait for replicas, which is what this rule is for (it is checked to be
/// active exactly when `/health` warns `redis_not_durable`).
const TRIPPED_BY_THE_TEST_REDIS: &str = "HmdpRedisNotDurable";

fn repository_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn observability_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/observability")
}

/// `name` on `PATH`, or a panic naming the package.
fn tool(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!("{name} is missing: `apt-get install prometheus` (scripts/test.sh does)")
        })
}

/// Runs `promtool` with `args`; panics with its output unless it succeeds.
fn promtool(args: &[&str]) {
    let out = Command::new(tool("promtool"))
        .args(args)
        .current_dir(observability_dir())
        .output()
        .expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private Prometheus on a free port, its storage in a temp folder; killed when dropped.
struct Prometheus {
    url: String,
    client: reqwest::Client,
    log: PathBuf,
    _process: ChildGuard,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Scrapes `targets` every second as job `hmdp` and evaluates `alerts.yml` every second.
    async fn start(targets: &[String]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let rules = observability_dir().join("alerts.yml");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {rules}\n\
             scrape_configs:\n  - job_name: hmdp\n    static_configs:\n      - targets: [{targets}]\n",
            rules = rules.canonicalize().unwrap().display(),
            targets = targets.join(", "),
        );
        let config_file = dir.path().join("prometheus.yml");
        std::fs::write(&config_file, config).unwrap();
        let port = free_port();
        let log = dir.path().join("prometheus.log");
        let process = Command::new(tool("prometheus"))
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--enable-feature=exemplar-storage")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("prometheus starts");
        let prometheus = Self {
            url: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
            log,
            _process: ChildGuard(process),
            _dir: dir,
        };
        let ready = Patience::new(Duration::from_secs(30)).every(Duration::from_millis(100));
        wait_until(ready, "Prometheus ready", async || {
            let r = prometheus
                .client
                .get(format!("{}/-/ready", prometheus.url))
                .send()
                .await;
            matches!(r, Ok(r) if r.status().is_success())
        })
        .await;
        prometheus
    }

    /// `GET path` of the HTTP API: its `data`, or Prometheus's error.
    async fn api(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, String> {
        let r = self
            .client
            .get(format!("{}{path}", self.url))
            .query(query)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let body: Value = r.json().await.map_err(|e| e.to_string())?;
        match body["status"].as_str() {
            Some("success") => Ok(body["data"].clone()),
            _ => Err(format!("{}: {}", body["errorType"], body["error"])),
        }
    }

    /// The series (or scalar) `expr` evaluates to now; an error when Prometheus refuses it.
    async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.api("/api/v1/query", &[("query", expr)]).await?;
        Ok(match &data["result"] {
            Value::Array(series) => series.clone(),
            scalar => vec![scalar.clone()],
        })
    }

    /// The value of a query that yields one number (e.g. a `sum(...)`), if it yields one.
    async fn number(&self, expr: &str) -> Option<f64> {
        let series = self.query(expr).await.ok()?;
        series.first()?["value"][1].as_str()?.parse().ok()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Draws the board from this Prometheus's data since `since` into `out`
    /// (`scripts/board-snapshot.py`); panics with the script's output unless it succeeds.
    fn snapshot(&self, since: DateTime<Utc>, out: &Path) {
        let script = repository_dir().join("scripts/board-snapshot.py");
        let result = Command::new("python3")
            .arg(script)
            .args(["--prometheus", &self.url])
            .arg(format!("--start={}", since.timestamp()))
            .arg("--out")
            .arg(out)
            .output()
            .expect("python3 runs");
        assert!(
            result.status.success(),
            "board-snapshot.py failed:\n{}{}",
            String::from_utf8_lossy(&result.stdout),
            String::from_utf8_lossy(&result.stderr)
        );
    }
}

/// Every panel's title and queries in the board (rows included), with Grafana's variables put
/// in as it would.
fn board_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(observability_dir().join("hmdp-dashboard.json")).unwrap();
    let board: Value = serde_json::from_str(&text).expect("the board is JSON");
    let mut out = Vec::new();
    fn walk(panels: &Value, out: &mut Vec<(String, String)>) {
        for panel in panels.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("?");
            for target in panel["targets"].as_array().into_iter().flatten() {
                let mut expr = target["expr"]
                    .as_str()
                    .expect("a Prometheus target")
                    .to_owned();
                for (variable, value) in VARIABLES {
                    expr = expr.replace(variable, value);
                }
                assert!(
                    !expr.contains('$'),
                    "panel {title:?} uses a variable the test does not know: {expr}"
                );
                out.push((title.to_owned(), expr));
            }
            walk(&panel["panels"], out);
        }
    }
    walk(&board["panels"], &mut out);
    out
}

/// The alert names `alerts.yml` declares.
fn declared_alerts() -> BTreeSet<String> {
    let text = std::fs::read_to_string(observability_dir().join("alerts.yml")).unwrap();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("- alert:"))
        .map(|name| name.trim().to_owned())
        .collect()
}

/// The metric names `expr` reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let name = regex::Regex::new(r"\b(hmdp_[a-z0-9_]+|up)\b").unwrap();
    name.find_iter(expr)
        .map(|m| m.as_str().to_owned())
        .collect()
}

/// A small sale on `app`: five buyers for three units, a second try, one order cancelled, a
/// few shop reads (a hit, a miss, one the Bloom filter turns away), and, where the per-user
/// limit is on, one user over it.
async fn small_sale(app: &TestApp, phones: u32) {
    let voucher = create_sale(app, 3, -60, 3600).await;
    let mut buyers = Vec::new();
    for i in 0..5 {
        let token = app.login(&format!("1{phones}{i:07}")).await;
        let (_, body) = grab_raw(app, voucher, &token).await;
        buyers.push((token, order_id_of(&body)));
    }
    let (status, _) = grab_raw(app, voucher, &buyers[0].0).await;
    assert_eq!(status, 200, "a second try is a business refusal");
    wait_for_orders(app, voucher, 3).await;
    let (token, order) = buyers
        .iter()
        .find_map(|(t, o)| Some((t, (*o)?)))
        .expect("an accepted grab");
    let r = app
        .post(&format!("/api/voucher-order/{order}/cancel"), Some(token))
        .await;
    assert!(r.success(), "cancel {order}: {r:?}");
    for shop in [1, 1, 2, 987_654] {
        app.get(&format!("/api/shop/{shop}"), None).await;
    }
    if app.state.config.rate_limit_user > 0 {
        let token = &buyers[4].0;
        let over = Patience::new(Duration::from_secs(10)).every(Duration::from_millis(1));
        wait_until(over, "a 429 for one user over the limit", async || {
            app.get("/api/user/me", Some(token)).await.status == 429
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_board_and_the_alerts_run_on_a_real_prometheus() {
    promtool(&["check", "rules", "alerts.yml"]);
    promtool(&["check", "config", "prometheus.yml"]);

    let listen = |c: &mut hmdp::Config| c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let streams = Arc::new(
        spawn_app_with(Backend::Sqlite, |c| {
            listen(c);
            c.rate_limit_user = 5;
        })
        .await,
    );
    let rabbitmq = Arc::new(spawn_app_with_rabbitmq(Backend::Sqlite, listen).await);
    let targets: Vec<String> = [&streams, &rabbitmq]
        .iter()
        .map(|app| app.metrics_addr.expect("a metrics listener").to_string())
        .collect();
    let prometheus = Prometheus::start(&targets).await;
    let started = Utc::now();
    let scraped = Patience::new(Duration::from_secs(30)).every(Duration::from_millis(200));
    wait_until(scraped, "both services scraped", async || {
        prometheus.number(r#"sum(up{job="hmdp"})"#).await == Some(2.0)
    })
    .await;

    tokio::join!(small_sale(&streams, 391), small_sale(&rabbitmq, 392));
    let written = Patience::new(Duration::from_secs(30)).every(Duration::from_millis(200));
    wait_until(
        written,
        "Prometheus sees the six orders written",
        async || {
            prometheus
                .number("sum(hmdp_worker_orders_written_total)")
                .await
                .filter(|n| *n == 6.0)
        },
    )
    .await;

    // Every panel's query is valid PromQL and shows data.
    let queries = board_queries();
    assert!(
        queries.len() >= 30,
        "the board has {} queries",
        queries.len()
    );
    let data = Patience::new(Duration::from_secs(30)).every(Duration::from_millis(500));
    wait_until(data, "every panel's query returns data", async || {
        let mut empty = Vec::new();
        for (title, expr) in &queries {
            match prometheus.query(expr).await {
                Ok(series) if !series.is_empty() => {}
                Ok(_) => empty.push(format!("{title}: no data for {expr}")),
                Err(e) => panic!("Prometheus refuses the query of {title:?}: {e}\n{expr}"),
            }
        }
        if empty.is_empty() {
            Ok(())
        } else {
            Err(empty.join("\n"))
        }
    })
    .await;

    // The rules: every declared one loaded, evaluated without error, and quiet but for the one
    // this Redis trips.
    let health = streams.get("/health", None).await;
    let not_durable = health.body["data"]["warnings"]
        .as_array()
        .is_some_and(|w| w.iter().any(|w| w == "redis_not_durable"));
    let declared = declared_alerts();
    assert!(declared.len() >= 10, "{declared:?}");
    let since = Utc::now();
    let evaluated = Patience::new(Duration::from_secs(30)).every(Duration::from_millis(500));
    let rules = wait_until(
        evaluated,
        "every rule evaluated on the sale's data",
        async || {
            let data = prometheus.api("/api/v1/rules", &[]).await?;
            let mut rules = Vec::new();
            let mut wrong = Vec::new();
            for group in data["groups"].as_array().into_iter().flatten() {
                for rule in group["rules"].as_array().into_iter().flatten() {
                    let name = rule["name"].as_str().unwrap_or("?").to_owned();
                    let state = rule["state"].as_str().unwrap_or("?");
                    let last = rule["lastEvaluation"]
                        .as_str()
                        .and_then(|t| DateTime::parse_from_rfc3339(t).ok());
                    if last.is_none_or(|t| t <= since) {
                        wrong.push(format!("{name}: not evaluated since the sale"));
                    } else if rule["health"] != "ok"
                        || !rule["lastError"].as_str().unwrap_or("").is_empty()
                    {
                        panic!("rule {name} fails: {}", rule["lastError"]);
                    }
                    let expected_active = name == TRIPPED_BY_THE_TEST_REDIS && not_durable;
                    if (state != "inactive") != expected_active {
                        wrong.push(format!("{name} is {state}"));
                    }
                    rules.push((name, rule["query"].as_str().unwrap_or("").to_owned()));
                }
            }
            let loaded: BTreeSet<String> = rules.iter().map(|(n, _)| n.clone()).collect();
            if loaded != declared {
                wrong.push(format!("loaded {loaded:?}, declared {declared:?}"));
            }
            if wrong.is_empty() {
                Ok(rules)
            } else {
                Err(wrong.join("; "))
            }
        },
    )
    .await;

    // Every metric the board and the rules read is one a series carries (a typo, or a metric
    // renamed in the code, shows "No data" or never fires).
    let mut missing = Vec::new();
    let exprs = queries.iter().chain(rules.iter());
    let names: BTreeSet<String> = exprs.flat_map(|(_, e)| metric_names(e)).collect();
    for name in &names {
        let series = prometheus
            .query(&format!(r#"count({{__name__="{name}"}})"#))
            .await
            .unwrap();
        if series.is_empty() {
            missing.push(name.as_str());
        }
    }
    assert!(
        missing.is_empty(),
        "no series carries {missing:?}; Prometheus's log:\n{}",
        prometheus.log()
    );
    assert!(names.len() >= 40, "{names:?}");

    if let Some(out) = std::env::var_os(SNAPSHOT_VAR).filter(|v| !v.is_empty()) {
        // The picture shows the sale and the quiet after it: scrapes up to 20 s from now.
        let quiet = (Utc::now() + chrono::Duration::seconds(20)).timestamp() as f64;
        let scraped = Patience::new(Duration::from_secs(60)).every(Duration::from_millis(500));
        wait_until(
            scraped,
            "20 s more of scrapes for the picture",
            async || {
                prometheus
                    .number(r#"min(timestamp(up{job="hmdp"}))"#)
                    .await
                    .filter(|t| *t >= quiet)
            },
        )
        .await;
        prometheus.snapshot(started, Path::new(&out));
    }
}

/// A traced service's sampled request, scraped as OpenMetrics, is kept by Prometheus as an
/// exemplar of its route's latency series, under the trace id the answer named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_keeps_a_sampled_requests_exemplar() {
    let app = spawn_app(Backend::Sqlite).await;
    let receiver = Receiver::start().await;
    let serve = TracedServe::start(&app, &receiver, "exemplar-serve").await;
    let prometheus = Prometheus::start(&[serve.metrics.to_string()]).await;
    let since = Utc::now() - chrono::Duration::minutes(1);

    let resp = app
        .client
        .get(format!("http://127.0.0.1:{}/shop-type/list", serve.port))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let answered = resp.headers()["traceresponse"].to_str().unwrap().to_owned();
    let trace = answered.split('-').nth(1).unwrap().to_owned();

    let kept = Patience::new(Duration::from_secs(30)).every(Duration::from_millis(200));
    wait_until(
        kept,
        "Prometheus keeps the request's exemplar",
        async || {
            let end = (Utc::now() + chrono::Duration::minutes(1))
                .timestamp()
                .to_string();
            let data = prometheus
                .api(
                    "/api/v1/query_exemplars",
                    &[
                        (
                            "query",
                            r#"hmdp_http_request_duration_seconds_bucket{route="/shop-type/list"}"#,
                        ),
                        ("start", &since.timestamp().to_string()),
                        ("end", &end),
                    ],
                )
                .await?;
            let found = data.as_array().into_iter().flatten().any(|series| {
                series["exemplars"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|e| e["labels"]["trace_id"] == trace.as_str())
            });
            if found {
                Ok(())
            } else {
                Err(format!("{data}"))
            }
        },
    )
    .await;
}
