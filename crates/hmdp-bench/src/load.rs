//! The load driver: closed-loop HTTP/1.1 connections and closed-loop library/Redis tasks.
//!
//! Closed loop means every connection (or task) sends its next request only when the previous
//! answer arrived, so the offered load adapts to the server and the latency is the one a
//! client really sees. Every answer is recorded twice: in the phase's HDR histogram (the final
//! percentiles) and in a per-second bucket (the throughput/latency-over-time chart). Each task
//! records into its own histograms and merges them into the shared ones once per second, so
//! the hot path takes no lock.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::Method;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::timeline::Timeline;

/// A latency histogram in microseconds, 1 µs to 60 s, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

/// What one measured phase produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Operations completed (HTTP requests, or library/Redis operations: a pipeline of 64
    /// scripts counts 64).
    pub requests: u64,
    pub elapsed: Duration,
    /// Latency in microseconds (per call: a pipeline's latency is recorded once).
    pub latency: Histogram<u64>,
    /// Failed answers by `code` (or HTTP status / transport error).
    pub errors: BTreeMap<String, u64>,
    /// `(request index, data)` of every successful answer, when the phase collects them.
    pub successes: Vec<(u64, serde_json::Value)>,
    /// When the first successful answer arrived, counted from the phase's start.
    pub first_success: Option<Duration>,
    /// Per-second throughput and latency.
    pub timeline: Timeline,
}

impl Outcome {
    pub fn new() -> Self {
        Self {
            requests: 0,
            elapsed: Duration::ZERO,
            latency: histogram(),
            errors: BTreeMap::new(),
            successes: Vec::new(),
            first_success: None,
            timeline: Timeline::default(),
        }
    }

    /// Adds another task's counts (the timeline is merged separately, through the shared one).
    pub fn merge(&mut self, other: &Outcome) {
        self.requests += other.requests;
        self.latency.add(&other.latency).expect("same bounds");
        for (k, v) in &other.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
        self.successes.extend(other.successes.iter().cloned());
        self.first_success = match (self.first_success, other.first_success) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Operations per second over the phase.
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Answers that were not errors.
    pub fn ok_count(&self) -> u64 {
        self.requests - self.errors.values().sum::<u64>()
    }
}

impl Default for Outcome {
    fn default() -> Self {
        Self::new()
    }
}

/// When a phase stops.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    /// After a duration.
    After(Duration),
    /// After a number of requests.
    Requests(u64),
    /// When both the duration has passed and the number of requests was sent (so a slow
    /// server still gets every user tried once).
    AtLeast(Duration, u64),
    /// When the duration has passed or the number of requests was sent, whichever comes first.
    Within(Duration, u64),
}

impl Stop {
    /// Whether request number `i`, about to start `elapsed` after the phase began, is past the end.
    pub fn done(self, i: u64, elapsed: Duration) -> bool {
        match self {
            Stop::After(d) => elapsed >= d,
            Stop::Requests(n) => i >= n,
            Stop::AtLeast(d, n) => elapsed >= d && i >= n,
            Stop::Within(d, n) => elapsed >= d || i >= n,
        }
    }
}

/// Live progress: operations done so far, shown every second on one stderr line.
struct Progress {
    done: AtomicU64,
    errors: AtomicU64,
    stop: AtomicBool,
}

fn spawn_progress(
    name: String,
    progress: Arc<Progress>,
    stop: Stop,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let started = Instant::now();
        let mut last = 0;
        while !progress.stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let done = progress.done.load(Ordering::Relaxed);
            let errors = progress.errors.load(Ordering::Relaxed);
            let of = match stop {
                Stop::After(d) | Stop::AtLeast(d, _) => {
                    format!("{:>3}/{}s", started.elapsed().as_secs(), d.as_secs())
                }
                Stop::Requests(n) | Stop::Within(_, n) => format!("{done}/{n}"),
            };
            eprint!(
                "\r  {:<40} {of:>14} {}  {:>9} op/s  {errors} refused/failed ",
                name,
                bar(started.elapsed(), stop, done),
                done - last
            );
            last = done;
        }
        eprint!("\r{:120}\r", "");
    })
}

/// A 20-character progress bar.
fn bar(elapsed: Duration, stop: Stop, done: u64) -> String {
    let frac = match stop {
        Stop::After(d) | Stop::AtLeast(d, _) => elapsed.as_secs_f64() / d.as_secs_f64().max(1e-9),
        Stop::Requests(n) => done as f64 / n.max(1) as f64,
        Stop::Within(d, n) => {
            (elapsed.as_secs_f64() / d.as_secs_f64().max(1e-9)).max(done as f64 / n.max(1) as f64)
        }
    }
    .clamp(0.0, 1.0);
    let full = (frac * 20.0).round() as usize;
    format!("[{}{}]", "#".repeat(full), ".".repeat(20 - full))
}

/// Per-task recording: into local histograms, merged into the shared timeline once a second.
struct Recorder {
    out: Outcome,
    started: Instant,
    second: u64,
    local: Timeline,
    shared: Arc<Mutex<Timeline>>,
    progress: Arc<Progress>,
}

impl Recorder {
    fn new(started: Instant, shared: Arc<Mutex<Timeline>>, progress: Arc<Progress>) -> Self {
        Self {
            out: Outcome::new(),
            started,
            second: 0,
            local: Timeline::default(),
            shared,
            progress,
        }
    }

    /// Records one call that did `ops` operations and took `micros`; `error` names its failure.
    fn record(&mut self, micros: u64, ops: u64, error: Option<String>) {
        let now = self.started.elapsed();
        let second = now.as_secs();
        if second != self.second {
            self.flush();
            self.second = second;
        }
        let micros = micros.max(1);
        self.out.latency.saturating_record(micros);
        self.out.requests += ops;
        let failed = error.is_some();
        self.local.record(second, micros, ops, failed);
        self.progress.done.fetch_add(ops, Ordering::Relaxed);
        match error {
            Some(e) => {
                self.progress.errors.fetch_add(1, Ordering::Relaxed);
                *self.out.errors.entry(e).or_default() += 1;
            }
            None => {
                if self.out.first_success.is_none() {
                    self.out.first_success = Some(now);
                }
            }
        }
    }

    fn flush(&mut self) {
        if !self.local.is_empty() {
            self.shared
                .lock()
                .expect("timeline lock")
                .merge(&std::mem::take(&mut self.local));
        }
    }

    fn finish(mut self) -> Outcome {
        self.flush();
        self.out
    }
}

/// One HTTP request to send.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: Method,
    pub path: String,
    pub headers: Vec<(&'static str, String)>,
    /// A JSON body.
    pub body: Option<Bytes>,
}

impl Req {
    pub fn get(path: impl Into<String>) -> Self {
        Self {
            method: Method::GET,
            path: path.into(),
            headers: Vec::new(),
            body: None,
        }
    }

    pub fn post(path: impl Into<String>) -> Self {
        Self {
            method: Method::POST,
            ..Self::get(path)
        }
    }

    pub fn put(path: impl Into<String>) -> Self {
        Self {
            method: Method::PUT,
            ..Self::get(path)
        }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub fn json(mut self, body: &serde_json::Value) -> Self {
        self.body = Some(Bytes::from(body.to_string()));
        self
    }
}

/// An answer in the `{success, code, data}` envelope.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

impl Answer {
    /// Checked on the raw bytes: parsing every hot-path answer would spend the CPU the
    /// server needs (client and server share 2 cores).
    pub fn success(&self) -> bool {
        self.body.starts_with(b"{\"success\":true")
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The error code (`sold_out`, …), or `http_<status>` when the body has none.
    pub fn code(&self) -> String {
        self.json()["code"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("http_{}", self.status))
    }

    /// The `data` field.
    pub fn data(&self) -> serde_json::Value {
        self.json()["data"].take()
    }
}

/// One keep-alive HTTP/1.1 client connection.
pub struct Conn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    host: String,
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) =
            hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(Self {
            sender,
            host: addr.to_string(),
        })
    }

    pub async fn call(&mut self, req: &Req) -> anyhow::Result<Answer> {
        let mut b = hyper::Request::builder()
            .method(req.method.clone())
            .uri(&req.path)
            .header(hyper::header::HOST, &self.host);
        for (k, v) in &req.headers {
            b = b.header(*k, v);
        }
        if req.body.is_some() {
            b = b.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let request = b.body(Full::new(req.body.clone().unwrap_or_default()))?;
        self.sender.ready().await?;
        let resp = self.sender.send_request(request).await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok(Answer { status, body })
    }
}

/// One request on a fresh connection (set-up calls: login, creating a voucher).
pub async fn call_once(addr: SocketAddr, req: &Req) -> anyhow::Result<Answer> {
    Conn::connect(addr).await?.call(req).await
}

/// A phase's shared machinery: progress line, shared timeline, start instant.
struct Phase {
    progress: Arc<Progress>,
    ticker: tokio::task::JoinHandle<()>,
    shared: Arc<Mutex<Timeline>>,
    started: Instant,
}

impl Phase {
    fn start(name: &str, stop: Stop) -> Self {
        let progress = Arc::new(Progress {
            done: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let ticker = spawn_progress(name.to_owned(), progress.clone(), stop);
        Self {
            progress,
            ticker,
            shared: Arc::default(),
            started: Instant::now(),
        }
    }

    fn recorder(&self) -> Recorder {
        Recorder::new(self.started, self.shared.clone(), self.progress.clone())
    }

    async fn finish(self, parts: Vec<Outcome>) -> Outcome {
        let mut total = Outcome::new();
        for p in &parts {
            total.merge(p);
        }
        total.elapsed = self.started.elapsed();
        total.timeline = std::mem::take(&mut *self.shared.lock().expect("timeline lock"));
        self.progress.stop.store(true, Ordering::Relaxed);
        let _ = self.ticker.await;
        total
    }
}

/// Runs `connections` closed-loop HTTP connections to `addr`; `make(i)` is the i-th request
/// (a counter shared by all connections). With `collect`, the `data` of every successful
/// answer is kept with its request index.
pub async fn request_phase(
    name: &str,
    addr: SocketAddr,
    connections: usize,
    stop: Stop,
    collect: bool,
    make: Arc<dyn Fn(u64) -> Req + Send + Sync>,
) -> anyhow::Result<Outcome> {
    paced_request_phase(name, addr, connections, stop, collect, None, make).await
}

/// [`request_phase`], with request `i` sent no earlier than `i / rate` seconds after the start
/// when a `rate` (requests/s over all connections) is given: a steady load below saturation.
pub async fn paced_request_phase(
    name: &str,
    addr: SocketAddr,
    connections: usize,
    stop: Stop,
    collect: bool,
    rate: Option<f64>,
    make: Arc<dyn Fn(u64) -> Req + Send + Sync>,
) -> anyhow::Result<Outcome> {
    // Connect first, so connection set-up is not part of the measured time.
    let mut conns = Vec::with_capacity(connections);
    for _ in 0..connections {
        conns.push(Conn::connect(addr).await?);
    }
    let phase = Phase::start(name, stop);
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for mut conn in conns {
        let (counter, make) = (counter.clone(), make.clone());
        let mut rec = phase.recorder();
        let started = phase.started;
        tasks.push(tokio::spawn(async move {
            loop {
                let i = counter.fetch_add(1, Ordering::Relaxed);
                if stop.done(i, started.elapsed()) {
                    break;
                }
                if let Some(rate) = rate {
                    let due = started + Duration::from_secs_f64(i as f64 / rate);
                    tokio::time::sleep_until(due.into()).await;
                }
                let req = make(i);
                let t = Instant::now();
                let result = conn.call(&req).await;
                let micros = t.elapsed().as_micros() as u64;
                match result {
                    Ok(a) if a.success() => {
                        if collect {
                            rec.out.successes.push((i, a.data()));
                        }
                        rec.record(micros, 1, None);
                    }
                    Ok(a) => rec.record(micros, 1, Some(a.code())),
                    Err(e) => {
                        rec.record(micros, 1, Some(format!("transport: {e}")));
                        break;
                    }
                }
            }
            rec.finish()
        }));
    }
    let mut parts = Vec::new();
    for t in tasks {
        parts.push(t.await?);
    }
    Ok(phase.finish(parts).await)
}

/// `request_phase` with plain GETs of `path(i)`.
pub async fn http_phase(
    name: &str,
    addr: SocketAddr,
    connections: usize,
    stop: Stop,
    path: Arc<dyn Fn(u64) -> String + Send + Sync>,
) -> anyhow::Result<Outcome> {
    request_phase(
        name,
        addr,
        connections,
        stop,
        false,
        Arc::new(move |i| Req::get(path(i))),
    )
    .await
}

/// One multi-request operation on a connection (e.g. code + login): gets the connection and
/// the operation's index, hands the connection back with the outcome.
pub type ConnOp =
    Arc<dyn Fn(Conn, u64) -> BoxFuture<'static, (Conn, Result<(), String>)> + Send + Sync>;

/// Runs `connections` closed-loop connections, each running `op` until `stop`.
pub async fn conn_phase(
    name: &str,
    addr: SocketAddr,
    connections: usize,
    stop: Stop,
    op: ConnOp,
) -> anyhow::Result<Outcome> {
    let mut conns = Vec::with_capacity(connections);
    for _ in 0..connections {
        conns.push(Conn::connect(addr).await?);
    }
    let phase = Phase::start(name, stop);
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for conn in conns {
        let (counter, op) = (counter.clone(), op.clone());
        let mut rec = phase.recorder();
        let started = phase.started;
        tasks.push(tokio::spawn(async move {
            let mut conn = conn;
            loop {
                let i = counter.fetch_add(1, Ordering::Relaxed);
                if stop.done(i, started.elapsed()) {
                    break;
                }
                let t = Instant::now();
                let (c, r) = op(conn, i).await;
                conn = c;
                rec.record(t.elapsed().as_micros() as u64, 1, r.err());
            }
            rec.finish()
        }));
    }
    let mut parts = Vec::new();
    for t in tasks {
        parts.push(t.await?);
    }
    Ok(phase.finish(parts).await)
}

/// One library or raw-Redis operation: `op(i)` does its work and answers how many
/// operations it completed (a pipeline of 64 scripts: 64) or why it failed.
pub type Op = Arc<dyn Fn(u64) -> BoxFuture<'static, Result<u64, String>> + Send + Sync>;

/// Runs one closed-loop task per entry of `ops` (each usually owning its own connection)
/// until `duration` has passed.
pub async fn op_phase(name: &str, duration: Duration, ops: Vec<Op>) -> anyhow::Result<Outcome> {
    let phase = Phase::start(name, Stop::After(duration));
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for op in ops {
        let counter = counter.clone();
        let mut rec = phase.recorder();
        let started = phase.started;
        tasks.push(tokio::spawn(async move {
            while started.elapsed() < duration {
                let i = counter.fetch_add(1, Ordering::Relaxed);
                let t = Instant::now();
                let r = op(i).await;
                let micros = t.elapsed().as_micros() as u64;
                match r {
                    Ok(n) => rec.record(micros, n, None),
                    Err(e) => rec.record(micros, 1, Some(e)),
                }
            }
            rec.finish()
        }));
    }
    let mut parts = Vec::new();
    for t in tasks {
        parts.push(t.await?);
    }
    Ok(phase.finish(parts).await)
}

/// Raw Redis baseline: `connections` tasks, each on its own connection, sending one command at
/// a time (no pipelining) for the phase's duration.
pub async fn redis_phase(
    name: &str,
    redis_url: &str,
    connections: usize,
    duration: Duration,
    make_cmd: Arc<dyn Fn(u64) -> redis::Cmd + Send + Sync>,
) -> anyhow::Result<Outcome> {
    let client = redis::Client::open(redis_url)?;
    let mut ops: Vec<Op> = Vec::new();
    for _ in 0..connections {
        let conn = client.get_multiplexed_async_connection().await?;
        let make_cmd = make_cmd.clone();
        ops.push(Arc::new(move |i| {
            let mut conn = conn.clone();
            let cmd = make_cmd(i);
            Box::pin(async move {
                let r: redis::RedisResult<redis::Value> = cmd.query_async(&mut conn).await;
                r.map(|_| 1).map_err(|e| format!("redis: {:?}", e.kind()))
            })
        }));
    }
    op_phase(name, duration, ops).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_rules() {
        let s = Duration::from_secs;
        assert!(!Stop::After(s(2)).done(1_000_000, s(1)));
        assert!(Stop::After(s(2)).done(0, s(2)));
        assert!(Stop::Requests(10).done(10, s(0)));
        assert!(!Stop::Requests(10).done(9, s(100)));
        assert!(!Stop::AtLeast(s(2), 10).done(5, s(3)));
        assert!(!Stop::AtLeast(s(2), 10).done(50, s(1)));
        assert!(Stop::AtLeast(s(2), 10).done(10, s(2)));
        assert!(Stop::Within(s(2), 10).done(5, s(3)));
        assert!(Stop::Within(s(2), 10).done(10, s(1)));
        assert!(!Stop::Within(s(2), 10).done(9, s(1)));
    }

    #[test]
    fn answers_read_the_envelope() {
        let ok = Answer {
            status: 200,
            body: Bytes::from_static(br#"{"success":true,"data":7205759403792793601}"#),
        };
        assert!(ok.success());
        assert_eq!(ok.data().as_i64(), Some(7205759403792793601));
        let refused = Answer {
            status: 200,
            body: Bytes::from_static(br#"{"success":false,"errorMsg":"x","code":"sold_out"}"#),
        };
        assert!(!refused.success());
        assert_eq!(refused.code(), "sold_out");
        let bare = Answer {
            status: 502,
            body: Bytes::from_static(b"bad gateway"),
        };
        assert_eq!(bare.code(), "http_502");
    }

    #[test]
    fn outcomes_merge() {
        let mut a = Outcome::new();
        a.requests = 3;
        a.latency.record(100).unwrap();
        a.errors.insert("sold_out".into(), 1);
        a.first_success = Some(Duration::from_millis(5));
        let mut b = Outcome::new();
        b.requests = 2;
        b.latency.record(300).unwrap();
        b.errors.insert("sold_out".into(), 2);
        b.first_success = Some(Duration::from_millis(2));
        a.merge(&b);
        assert_eq!(a.requests, 5);
        assert_eq!(a.errors["sold_out"], 3);
        assert_eq!(a.ok_count(), 2);
        assert_eq!(a.latency.len(), 2);
        assert_eq!(a.first_success, Some(Duration::from_millis(2)));
    }

    #[test]
    fn progress_bar_fills() {
        let s = Duration::from_secs;
        assert_eq!(
            bar(s(0), Stop::After(s(10)), 0),
            format!("[{}]", ".".repeat(20))
        );
        assert_eq!(
            bar(s(20), Stop::After(s(10)), 0),
            format!("[{}]", "#".repeat(20))
        );
        assert_eq!(
            bar(s(0), Stop::Requests(4), 2),
            format!("[{}{}]", "#".repeat(10), ".".repeat(10))
        );
    }
}
