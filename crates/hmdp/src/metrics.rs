//! Prometheus metrics, through `prometheus-client` (the Prometheus project's own Rust client).
//!
//! Each module's stats type registers the metrics it owns into the process's one [`Registry`]:
//! requests in `http`, flash-sale outcomes in `seckill`, batches in `worker`, stream gauges in
//! `order_stream`; which of them a process exposes is said in one place, `startup/metrics.rs`.
//! The library crates (locks, cache) keep plain atomics so they depend on no metrics library;
//! the collectors here read them at scrape time. Names, labels and help texts are the ones
//! dashboards already use.

pub use prometheus_client::registry::Registry;
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet},
    metrics::{MetricType, counter::ConstCounter, histogram::Histogram},
};
pub(crate) use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
};

use crate::kv::RedisConn;

/// The `Content-Type` of [`encode`]'s output (OpenMetrics text, which Prometheus negotiates).
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The registry in the text exposition format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::with_capacity(8 * 1024);
    prometheus_client::encoding::text::encode(&mut out, registry)
        .expect("writing to a String cannot fail");
    out
}

/// A histogram with the given bucket upper bounds (`+Inf` is implicit).
pub(crate) fn histogram(bounds: &[f64]) -> Histogram {
    Histogram::new(bounds.iter().copied())
}

/// Writes one counter of a constant value read from an atomic (`name` without `_total`).
fn const_counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> std::fmt::Result {
    ConstCounter::new(value).encode(encoder.encode_descriptor(
        name,
        help,
        None,
        MetricType::Counter,
    )?)
}

/// Writes one counter family with a single label, e.g. `result="hit"`.
fn const_counters(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    label: &str,
    samples: &[(&str, u64)],
) -> std::fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (value, n) in samples {
        ConstCounter::new(*n).encode(family.encode_family(&[(label, *value)])?)?;
    }
    Ok(())
}

// Help texts written by collectors end in a full stop, as `Registry::register` adds one.

/// Exposes the distributed locks' counters and wait histogram (`hmdp_lock_*`).
#[derive(Debug)]
pub(crate) struct LockCollector(pub hmdp_lock::LockClient<RedisConn>);

impl Collector for LockCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let s = self.0.stats();
        const_counters(
            &mut encoder,
            "hmdp_lock_acquisitions",
            "Lock acquisitions by result (acquired at once, contended = after waiting, timeout = \
             wait budget spent, error = Redis failed). Sync-mode order locks never wait: a \
             refusal counts as a timeout.",
            "result",
            &[
                ("acquired", s.acquired),
                ("contended", s.contended),
                ("timeout", s.timeouts),
                ("error", s.errors),
            ],
        )?;
        const_counter(
            &mut encoder,
            "hmdp_lock_lost",
            "Locks lost while held (lease ran out or a renewal failed).",
            s.lost,
        )?;
        let buckets: Vec<(f64, u64)> = hmdp_lock::WAIT_BUCKETS
            .iter()
            .map(|b| b.as_secs_f64())
            .chain([f64::INFINITY])
            .zip(s.wait_buckets.iter().scan(0, |prev, &cum| {
                // The encoder wants per-bucket counts; the library's are cumulative.
                let n = cum - *prev;
                *prev = cum;
                Some(n)
            }))
            .collect();
        let mut histogram = encoder.encode_descriptor(
            "hmdp_lock_wait_seconds",
            "Time spent waiting for a held lock (waits that ended).",
            None,
            MetricType::Histogram,
        )?;
        histogram.encode_histogram::<NoLabelSet>(
            s.wait_time_us as f64 / 1e6,
            s.waits(),
            &buckets,
            None,
        )
    }
}

/// Exposes the shop cache's read counters (`hmdp_cache_*`).
#[derive(Debug)]
pub(crate) struct CacheCollector(pub hmdp_cache::CacheClient<RedisConn>);

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
        let c = self.0.stats();
        let l = |a: &AtomicU64| a.load(Relaxed);
        const_counters(
            &mut encoder,
            "hmdp_cache_reads",
            "Shop cache reads by result (l1, hit, null_hit, miss, filtered = turned away by the \
             Bloom filter).",
            "result",
            &[
                ("l1", l(&c.l1_hits)),
                ("hit", l(&c.hits)),
                ("null_hit", l(&c.null_hits)),
                ("miss", l(&c.misses)),
                ("filtered", l(&c.filtered)),
            ],
        )?;
        for (name, help, value) in [
            (
                "hmdp_cache_loads",
                "Database loads caused by cache misses.",
                &c.loads,
            ),
            (
                "hmdp_cache_rebuilds",
                "Background rebuilds of logically expired entries.",
                &c.rebuilds,
            ),
            (
                "hmdp_cache_fallbacks",
                "Reads served from the database because Redis was away.",
                &c.fallbacks,
            ),
        ] {
            const_counter(&mut encoder, name, help, l(value))?;
        }
        Ok(())
    }
}
