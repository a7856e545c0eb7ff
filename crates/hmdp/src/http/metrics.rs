//! `GET /metrics`: Prometheus text exposition of what the service is doing.
//!
//! Counters live where the work happens (cache client, flash sale, order worker) as plain
//! atomics; this module only reads them, plus a per-route request histogram recorded by
//! [`track`], the outermost middleware but tracing. Being outside the rate limits, the request
//! timeout, the body limit and the panic catcher, it counts their refusals too (a flood shows up
//! as 429s on its route). Labels are bounded, because unbounded label values would blow up
//! Prometheus: the route is the template (e.g. `/shop/{id}`, never the raw path), or
//! `unmatched` for everything no route took (unknown paths, static files); methods outside the
//! standard set are counted as `OTHER`. Stream gauges are read from Redis when scraped.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    sync::{Mutex, atomic::Ordering},
    time::Instant,
};

use axum::{
    extract::{MatchedPath, Request, State},
    http::{Method, header},
    middleware::Next,
    response::{IntoResponse, Response},
};

use super::AppState;
use crate::{
    kv::{Keys, RedisConn},
    order_stream,
};

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Default, Clone)]
struct Series {
    count: u64,
    sum_seconds: f64,
    buckets: [u64; BUCKETS.len()],
}

/// Request counters and latency histograms by (method, route, status).
#[derive(Default)]
pub struct HttpMetrics {
    /// Route template → (method, status) → series. Keyed so that recording a request looks
    /// its series up by `&str` and allocates nothing once the series exists (this runs on every
    /// request). A `std` mutex: held for a lookup and a few additions, never across an await.
    series: Mutex<BTreeMap<String, RouteSeries>>,
}

/// One route's series, by method and status (a handful per route, so a linear scan).
type RouteSeries = Vec<(Method, u16, Series)>;

impl HttpMetrics {
    fn record(&self, method: &Method, route: &str, status: u16, seconds: f64) {
        let mut map = self.series.lock().expect("metrics poisoned");
        let by_status = match map.get_mut(route) {
            Some(v) => v,
            None => map.entry(route.to_owned()).or_default(),
        };
        let s = match by_status
            .iter()
            .position(|(m, st, _)| m == method && *st == status)
        {
            Some(i) => &mut by_status[i].2,
            None => {
                by_status.push((method.clone(), status, Series::default()));
                &mut by_status.last_mut().expect("just pushed").2
            }
        };
        s.count += 1;
        s.sum_seconds += seconds;
        for (i, le) in BUCKETS.iter().enumerate() {
            if seconds <= *le {
                s.buckets[i] += 1;
            }
        }
    }

    /// Every series as `((method, route, status), series)`, sorted.
    fn snapshot(&self) -> BTreeMap<(String, String, u16), Series> {
        let map = self.series.lock().expect("metrics poisoned");
        let mut out = BTreeMap::new();
        for (route, v) in map.iter() {
            for (m, status, series) in v {
                out.insert(
                    (m.as_str().to_owned(), route.clone(), *status),
                    series.clone(),
                );
            }
        }
        out
    }
}

/// The method label: the method itself if standard, else `OTHER` (any token is a valid method,
/// and each would otherwise become a series). Cloning a standard method allocates nothing.
fn method_label(method: &Method) -> Method {
    static OTHER: std::sync::LazyLock<Method> =
        std::sync::LazyLock::new(|| Method::from_bytes(b"OTHER").expect("a valid token"));
    match *method {
        Method::GET
        | Method::POST
        | Method::PUT
        | Method::DELETE
        | Method::HEAD
        | Method::OPTIONS
        | Method::PATCH
        | Method::TRACE
        | Method::CONNECT => method.clone(),
        _ => OTHER.clone(),
    }
}

/// Records one request, whatever answered it. Installed with `Router::layer`, which axum
/// applies per route after routing, so the matched route is known here; the fallback (no
/// route) has none and is counted as `unmatched`.
pub async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(req.method());
    let route = req.extensions().get::<MatchedPath>().cloned();
    let resp = next.run(req).await;
    let route = route
        .as_ref()
        .map(|p| p.as_str().trim_start_matches("/api"))
        .unwrap_or("unmatched");
    state.http_metrics.record(
        &method,
        route,
        resp.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    resp
}

/// `GET /metrics`.
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut out = String::with_capacity(8 * 1024);
    http_section(&mut out, &state);
    counters_section(&mut out, &state);
    locks_section(&mut out, &state);
    if let Some(w) = &state.worker {
        worker_section(&mut out, w);
    }
    stream_section(
        &mut out,
        &state.redis,
        &state.keys,
        state.config.seckill.shards,
    )
    .await;
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}

fn http_section(out: &mut String, state: &AppState) {
    let map = state.http_metrics.snapshot();
    out.push_str("# HELP hmdp_http_requests_total HTTP requests by method, route and status.\n");
    out.push_str("# TYPE hmdp_http_requests_total counter\n");
    for ((m, r, s), v) in map.iter() {
        let _ = writeln!(
            out,
            "hmdp_http_requests_total{{method=\"{m}\",route=\"{r}\",status=\"{s}\"}} {}",
            v.count
        );
    }
    out.push_str(
        "# HELP hmdp_http_request_duration_seconds Request latency by method and route.\n",
    );
    out.push_str("# TYPE hmdp_http_request_duration_seconds histogram\n");
    let mut by_route: BTreeMap<(&str, &str), Series> = BTreeMap::new();
    for ((m, r, _), v) in map.iter() {
        let agg = by_route.entry((m, r)).or_default();
        agg.count += v.count;
        agg.sum_seconds += v.sum_seconds;
        for (a, b) in agg.buckets.iter_mut().zip(v.buckets.iter()) {
            *a += b;
        }
    }
    for ((m, r), v) in &by_route {
        for (le, n) in BUCKETS.iter().zip(v.buckets.iter()) {
            let _ = writeln!(
                out,
                "hmdp_http_request_duration_seconds_bucket{{method=\"{m}\",route=\"{r}\",le=\"{le}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "hmdp_http_request_duration_seconds_bucket{{method=\"{m}\",route=\"{r}\",le=\"+Inf\"}} {}",
            v.count
        );
        let _ = writeln!(
            out,
            "hmdp_http_request_duration_seconds_sum{{method=\"{m}\",route=\"{r}\"}} {}",
            v.sum_seconds
        );
        let _ = writeln!(
            out,
            "hmdp_http_request_duration_seconds_count{{method=\"{m}\",route=\"{r}\"}} {}",
            v.count
        );
    }
}

fn counter(out: &mut String, name: &str, help: &str, samples: &[(&str, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (labels, v) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {v}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    }
}

/// The distributed locks of this instance (cache rebuilds, voucher warm-ups, sync-mode orders).
fn locks_section(out: &mut String, state: &AppState) {
    let s = state.locks.stats();
    counter(
        out,
        "hmdp_lock_acquisitions_total",
        "Lock acquisitions by result (acquired at once, contended = after waiting, timeout = wait \
         budget spent, error = Redis failed). Sync-mode order locks never wait: a refusal counts \
         as a timeout.",
        &[
            ("result=\"acquired\"", s.acquired),
            ("result=\"contended\"", s.contended),
            ("result=\"timeout\"", s.timeouts),
            ("result=\"error\"", s.errors),
        ],
    );
    counter(
        out,
        "hmdp_lock_lost_total",
        "Locks lost while held (lease ran out or a renewal failed).",
        &[("", s.lost)],
    );
    let name = "hmdp_lock_wait_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time spent waiting for a held lock (waits that ended).\n# TYPE {name} histogram"
    );
    for (le, n) in hmdp_lock::WAIT_BUCKETS.iter().zip(s.wait_buckets.iter()) {
        let _ = writeln!(out, "{name}_bucket{{le=\"{}\"}} {n}", le.as_secs_f64());
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", s.waits());
    let _ = writeln!(out, "{name}_sum {}", s.wait_time_us as f64 / 1e6);
    let _ = writeln!(out, "{name}_count {}", s.waits());
}

fn counters_section(out: &mut String, state: &AppState) {
    let c = state.catalogue.cache().stats();
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    counter(
        out,
        "hmdp_cache_reads_total",
        "Shop cache reads by result (l1, hit, null_hit, miss, filtered = turned away by the Bloom filter).",
        &[
            ("result=\"l1\"", l(&c.l1_hits)),
            ("result=\"hit\"", l(&c.hits)),
            ("result=\"null_hit\"", l(&c.null_hits)),
            ("result=\"miss\"", l(&c.misses)),
            ("result=\"filtered\"", l(&c.filtered)),
        ],
    );
    counter(
        out,
        "hmdp_cache_loads_total",
        "Database loads caused by cache misses.",
        &[("", l(&c.loads))],
    );
    counter(
        out,
        "hmdp_cache_rebuilds_total",
        "Background rebuilds of logically expired entries.",
        &[("", l(&c.rebuilds))],
    );
    counter(
        out,
        "hmdp_cache_fallbacks_total",
        "Reads served from the database because Redis was away.",
        &[("", l(&c.fallbacks))],
    );
    let s = state.seckill.stats();
    counter(
        out,
        "hmdp_seckill_outcomes_total",
        "Flash-sale requests decided by this instance, by outcome code.",
        &[
            ("outcome=\"accepted\"", l(&s.accepted)),
            ("outcome=\"sold_out\"", l(&s.sold_out)),
            ("outcome=\"duplicate_order\"", l(&s.duplicate)),
            ("outcome=\"seckill_not_started\"", l(&s.not_started)),
            ("outcome=\"seckill_ended\"", l(&s.ended)),
            ("outcome=\"voucher_not_found\"", l(&s.unknown)),
        ],
    );
    counter(
        out,
        "hmdp_seckill_warm_ups_total",
        "Vouchers loaded into Redis from the database.",
        &[("", l(&s.warm_ups))],
    );
}

/// The order worker's counters and histograms (the embedded worker's, or a standalone
/// `hmdp worker`'s on its own listener).
pub(crate) fn worker_section(out: &mut String, w: &crate::worker::WorkerStats) {
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    counter(
        out,
        "hmdp_worker_orders_written_total",
        "Orders inserted by this process's worker.",
        &[("", l(&w.persisted))],
    );
    counter(
        out,
        "hmdp_worker_redeliveries_total",
        "Entries acknowledged that were already written.",
        &[("", l(&w.already_written))],
    );
    counter(
        out,
        "hmdp_worker_batches_total",
        "Committed order batches.",
        &[("", l(&w.batches))],
    );
    counter(
        out,
        "hmdp_worker_dead_letters_total",
        "Orders moved to a dead-letter stream.",
        &[("", l(&w.dead_lettered))],
    );
    counter(
        out,
        "hmdp_worker_claimed_total",
        "Entries taken over from other consumers.",
        &[("", l(&w.claimed))],
    );
    counter(
        out,
        "hmdp_worker_conflicts_total",
        "Accepted orders that collided with another order in the database (dead-lettered).",
        &[("", l(&w.conflicts))],
    );
    counter(
        out,
        "hmdp_worker_db_outages_total",
        "Batch writes that failed because the database was away.",
        &[("", l(&w.db_outages))],
    );
    w.write_seconds.snapshot().render_prometheus(
        out,
        "hmdp_worker_write_seconds",
        "Database time of committed order batches.",
    );
    w.batch_size.snapshot().render_prometheus(
        out,
        "hmdp_worker_batch_size",
        "Orders per committed batch.",
    );
}

/// The order streams' length, pending and lag gauges, read from Redis at scrape time.
pub(crate) async fn stream_section(out: &mut String, redis: &RedisConn, keys: &Keys, shards: u32) {
    let mut lines = (String::new(), String::new(), String::new());
    for shard in 0..shards {
        let Ok(g) = order_stream::read_gauges(redis, &keys.seckill_stream(shard)).await else {
            continue;
        };
        let _ = writeln!(
            lines.0,
            "hmdp_order_stream_length{{shard=\"{shard}\"}} {}",
            g.length
        );
        if let Some(g) = g.group {
            let _ = writeln!(
                lines.1,
                "hmdp_order_stream_pending{{shard=\"{shard}\"}} {}",
                g.pending
            );
            if let Some(lag) = g.lag {
                let _ = writeln!(lines.2, "hmdp_order_stream_lag{{shard=\"{shard}\"}} {lag}");
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP hmdp_order_stream_length Entries in each order stream.\n# TYPE hmdp_order_stream_length gauge\n{}",
        lines.0.trim_end()
    );
    let _ = writeln!(
        out,
        "# HELP hmdp_order_stream_pending Entries delivered to a worker, not yet written.\n# TYPE hmdp_order_stream_pending gauge\n{}",
        lines.1.trim_end()
    );
    let _ = writeln!(
        out,
        "# HELP hmdp_order_stream_lag Entries not yet delivered to any worker.\n# TYPE hmdp_order_stream_lag gauge\n{}",
        lines.2.trim_end()
    );
}
