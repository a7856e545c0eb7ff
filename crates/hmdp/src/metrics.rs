//! Prometheus metrics, through `prometheus-client` (the Prometheus project's own Rust client).
//!
//! Each module's stats type registers the metrics it owns into the process's one [`Registry`]:
//! requests in `http`, flash-sale outcomes in `seckill`, batches in `worker`, stream gauges in
//! `order_stream`; which of them a process exposes is said in one place, `startup/metrics.rs`.
//! The library crates (locks, cache) keep plain atomics so they depend on no metrics library;
//! the collectors here read them at scrape time. Names, labels and help texts are the ones
//! dashboards already use.
//!
//! While traces are exported, the latency histograms ([`TracedHistogram`]) keep per bucket the
//! trace of the latest sampled observation, as an OpenMetrics exemplar (`trace_id`), so that a
//! slow bucket leads to a trace. Exemplars are an OpenMetrics feature: `/metrics` shows them
//! only to a scraper that asks for OpenMetrics ([`without_exemplars`] takes them out for the
//! others).

pub use prometheus_client::registry::Registry;
use std::time::SystemTime;

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric, LabelSetEncoder, MetricEncoder, NoLabelSet},
    metrics::{
        MetricType, TypedMetric, counter::ConstCounter, exemplar::HistogramWithExemplars,
        histogram::Histogram,
    },
};
pub(crate) use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
};

use crate::kv::RedisConn;

/// The `Content-Type` of [`encode`]'s output (OpenMetrics text, which Prometheus negotiates),
/// with or without its exemplars: they are optional in that format.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The registry in the text exposition format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::with_capacity(8 * 1024);
    prometheus_client::encoding::text::encode(&mut out, registry)
        .expect("writing to a String cannot fail");
    out
}

/// `text` (as [`encode`] writes it) without the exemplars of its samples. In the OpenMetrics
/// text format an exemplar follows a sample's value as ` # {labels} value [timestamp]`, and a `#`
/// outside a quoted label value starts nothing else on a sample line.
pub(crate) fn without_exemplars(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let sample = line.trim_end_matches('\n');
        match exemplar_start(sample) {
            Some(at) => {
                out.push_str(sample[..at].trim_end());
                out.push_str(&line[sample.len()..]);
            }
            None => out.push_str(line),
        }
    }
    out
}

/// Where the exemplar of a sample line starts (its `#`), if it has one.
fn exemplar_start(line: &str) -> Option<usize> {
    if line.starts_with('#') {
        return None;
    }
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '#' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

/// A histogram with the given bucket upper bounds (`+Inf` is implicit).
pub(crate) fn histogram(bounds: &[f64]) -> Histogram {
    Histogram::new(bounds.iter().copied())
}

/// An exemplar's labels: the W3C trace id (32 lowercase hex digits) of the trace an observation
/// was made in. Kept as bytes, so that recording one allocates nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TraceExemplar([u8; 16]);

impl TraceExemplar {
    /// The label's name, as Grafana and Prometheus's exemplar queries expect it.
    pub(crate) const LABEL: &str = "trace_id";

    pub(crate) fn new(trace_id: [u8; 16]) -> Self {
        Self(trace_id)
    }
}

impl prometheus_client::encoding::EncodeLabelSet for TraceExemplar {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> std::fmt::Result {
        let mut hex = [0u8; 32];
        hex::encode_to_slice(self.0, &mut hex).expect("32 digits for 16 bytes");
        let hex = std::str::from_utf8(&hex).expect("hex digits are ASCII");
        [(Self::LABEL, hex)].encode(encoder)
    }
}

/// A latency histogram that, while traces are exported, keeps per bucket the latest sampled
/// observation's trace as an exemplar; a plain [`Histogram`] otherwise, so that a process
/// without traces pays nothing for them.
#[derive(Clone, Debug)]
pub(crate) enum TracedHistogram {
    Plain(Histogram),
    Exemplars(HistogramWithExemplars<TraceExemplar>),
}

impl TracedHistogram {
    /// Buckets with the given upper bounds; exemplars only if `traced` (traces are exported).
    pub(crate) fn new(bounds: &[f64], traced: bool) -> Self {
        let bounds = bounds.iter().copied();
        if traced {
            Self::Exemplars(HistogramWithExemplars::new(bounds))
        } else {
            Self::Plain(Histogram::new(bounds))
        }
    }

    /// Observes `value`; `trace` (the sampled trace it was measured in) becomes its bucket's
    /// exemplar, stamped now.
    pub(crate) fn observe(&self, value: f64, trace: Option<TraceExemplar>) {
        match self {
            Self::Plain(h) => h.observe(value),
            Self::Exemplars(h) => {
                let at = trace.is_some().then(SystemTime::now);
                h.observe(value, trace, at);
            }
        }
    }
}

impl TypedMetric for TracedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for TracedHistogram {
    fn encode(&self, encoder: MetricEncoder) -> std::fmt::Result {
        match self {
            Self::Plain(h) => h.encode(encoder),
            Self::Exemplars(h) => h.encode(encoder),
        }
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: [u8; 16] = [
        0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47,
        0x36,
    ];

    #[test]
    fn a_traced_observation_is_its_buckets_exemplar_and_can_be_taken_out() {
        let traced = TracedHistogram::new(&[0.1, 1.0], true);
        let plain = TracedHistogram::new(&[0.1, 1.0], false);
        let mut registry = Registry::default();
        registry.register("traced_seconds", "Traced", traced.clone());
        registry.register("plain_seconds", "Plain", plain.clone());
        traced.observe(0.05, None);
        traced.observe(0.5, Some(TraceExemplar::new(TRACE)));
        plain.observe(0.5, Some(TraceExemplar::new(TRACE)));

        let text = encode(&registry);
        let bucket = text
            .lines()
            .find(|l| l.starts_with(r#"traced_seconds_bucket{le="1.0"} 2 # "#))
            .unwrap_or_else(|| panic!("no exemplar on the 1.0 bucket:\n{text}"));
        assert!(
            bucket.contains(r#"# {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 0.5 "#),
            "{bucket}"
        );
        assert_eq!(
            text.matches(" # {").count(),
            1,
            "one traced observation, one exemplar:\n{text}"
        );

        let stripped = without_exemplars(&text);
        assert!(!stripped.contains("trace_id"), "{stripped}");
        let kept: Vec<&str> = text.lines().filter(|l| !l.contains(" # {")).collect();
        let stripped_lines: Vec<&str> = stripped.lines().collect();
        assert_eq!(stripped_lines.len(), text.lines().count());
        assert!(stripped_lines.contains(&r#"traced_seconds_bucket{le="1.0"} 2"#));
        for line in kept {
            assert!(stripped_lines.contains(&line), "{line:?} changed");
        }
        assert!(stripped.ends_with("# EOF\n"), "{stripped}");
    }

    #[test]
    fn a_hash_inside_a_label_value_is_not_an_exemplar() {
        let text = "# HELP a_total A # with a hash.\n\
                    a_total{path=\"/x # {y}\",q=\"\\\"#\"} 3 # {trace_id=\"00\"} 1.0 12.5\n\
                    b_total{path=\"#\"} 1\n# EOF\n";
        assert_eq!(
            without_exemplars(text),
            "# HELP a_total A # with a hash.\n\
             a_total{path=\"/x # {y}\",q=\"\\\"#\"} 3\n\
             b_total{path=\"#\"} 1\n# EOF\n"
        );
    }
}
