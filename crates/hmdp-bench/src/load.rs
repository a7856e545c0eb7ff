//! The load driver: closed-loop HTTP/1.1 connections and raw Redis baselines.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// What one measured phase produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub requests: u64,
    pub elapsed: Duration,
    /// Latency in microseconds.
    pub latency: Histogram<u64>,
    /// Failed answers by `code` (or HTTP status / transport error).
    pub errors: BTreeMap<String, u64>,
}

impl Outcome {
    fn new() -> Self {
        Self {
            requests: 0,
            elapsed: Duration::ZERO,
            latency: Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds"),
            errors: BTreeMap::new(),
        }
    }

    fn merge(&mut self, other: &Outcome) {
        self.requests += other.requests;
        self.latency.add(&other.latency).expect("same bounds");
        for (k, v) in &other.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
    }

    /// Requests per second over the phase.
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// When a phase stops: after a duration, or after a number of requests.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    After(Duration),
    Requests(u64),
}

/// Live progress: requests done so far, printed every second.
struct Progress {
    done: AtomicU64,
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
            let of = match stop {
                Stop::After(d) => format!("{:>3}/{}s", started.elapsed().as_secs(), d.as_secs()),
                Stop::Requests(n) => format!("{done}/{n}"),
            };
            eprint!("\r  {name:<40} {of:>14}  {:>9} req/s", done - last);
            last = done;
        }
        eprint!("\r{:80}\r", "");
    })
}

/// Runs `connections` closed-loop HTTP connections to `addr`; `path(i)` is the i-th request's
/// path (a counter shared by all connections).
pub async fn http_phase(
    name: &str,
    addr: SocketAddr,
    connections: usize,
    stop: Stop,
    path: Arc<dyn Fn(u64) -> String + Send + Sync>,
) -> anyhow::Result<Outcome> {
    let progress = Arc::new(Progress {
        done: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let ticker = spawn_progress(name.to_owned(), progress.clone(), stop);
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (progress, counter, path) = (progress.clone(), counter.clone(), path.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = Outcome::new();
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
                    .await?;
            tokio::spawn(conn);
            let host = addr.to_string();
            loop {
                let i = counter.fetch_add(1, Ordering::Relaxed);
                let done = match stop {
                    Stop::After(d) => started.elapsed() >= d,
                    Stop::Requests(n) => i >= n,
                };
                if done {
                    break;
                }
                let req = hyper::Request::get(path(i))
                    .header(hyper::header::HOST, &host)
                    .body(Empty::<Bytes>::new())?;
                let t = Instant::now();
                let result = async {
                    sender.ready().await?;
                    let resp = sender.send_request(req).await?;
                    let status = resp.status();
                    let body = resp.into_body().collect().await?.to_bytes();
                    anyhow::Ok((status, body))
                }
                .await;
                let micros = t.elapsed().as_micros() as u64;
                out.latency.saturating_record(micros.max(1));
                out.requests += 1;
                progress.done.fetch_add(1, Ordering::Relaxed);
                match result {
                    Ok((status, body)) if body.starts_with(b"{\"success\":true") => {
                        let _ = status;
                    }
                    Ok((status, body)) => {
                        let code = serde_json::from_slice::<serde_json::Value>(&body)
                            .ok()
                            .and_then(|v| v["code"].as_str().map(str::to_owned))
                            .unwrap_or_else(|| format!("http_{}", status.as_u16()));
                        *out.errors.entry(code).or_default() += 1;
                    }
                    Err(e) => {
                        *out.errors.entry(format!("transport: {e}")).or_default() += 1;
                        break;
                    }
                }
            }
            anyhow::Ok(out)
        }));
    }
    let mut total = Outcome::new();
    for t in tasks {
        total.merge(&t.await??);
    }
    total.elapsed = started.elapsed();
    progress.stop.store(true, Ordering::Relaxed);
    let _ = ticker.await;
    Ok(total)
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
    let progress = Arc::new(Progress {
        done: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let ticker = spawn_progress(name.to_owned(), progress.clone(), Stop::After(duration));
    let client = redis::Client::open(redis_url)?;
    let started = Instant::now();
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let mut conn = client.get_multiplexed_async_connection().await?;
        let (progress, counter, make_cmd) = (progress.clone(), counter.clone(), make_cmd.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = Outcome::new();
            while started.elapsed() < duration {
                let cmd = make_cmd(counter.fetch_add(1, Ordering::Relaxed));
                let t = Instant::now();
                let r: redis::RedisResult<redis::Value> = cmd.query_async(&mut conn).await;
                out.latency
                    .saturating_record((t.elapsed().as_micros() as u64).max(1));
                out.requests += 1;
                progress.done.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = r {
                    *out.errors
                        .entry(format!("redis: {:?}", e.kind()))
                        .or_default() += 1;
                }
            }
            out
        }));
    }
    let mut total = Outcome::new();
    for t in tasks {
        total.merge(&t.await?);
    }
    total.elapsed = started.elapsed();
    progress.stop.store(true, Ordering::Relaxed);
    let _ = ticker.await;
    Ok(total)
}
