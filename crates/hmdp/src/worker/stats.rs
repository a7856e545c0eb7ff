//! The worker's counters and histograms, read by `/metrics` (`http::metrics`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the batch-size histogram's buckets (orders).
pub const BATCH_SIZE_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
];
/// Upper bounds of the write-time histogram's buckets (seconds).
pub const WRITE_SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A histogram with fixed buckets, recorded with atomics (no lock, no allocation).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One counter per bound, plus one for larger values (not cumulative).
    buckets: Box<[AtomicU64]>,
    /// The sum of observed values, as `f64` bits.
    sum: AtomicU64,
}

/// A copy of a [`Histogram`] at one moment, Prometheus-shaped.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound, observations ≤ bound)`, cumulative, ascending; `+Inf` is `count`.
    pub buckets: Vec<(f64, u64)>,
    /// Observations.
    pub count: u64,
    /// Sum of the observed values.
    pub sum: f64,
}

impl Histogram {
    /// A histogram with the given ascending upper bounds.
    pub fn new(bounds: &'static [f64]) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Records one value.
    pub fn observe(&self, v: f64) {
        let i = self.bounds.partition_point(|b| *b < v);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + v).to_bits())
            });
    }

    /// The current counts.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let mut buckets = Vec::with_capacity(self.bounds.len());
        for (b, c) in self.bounds.iter().zip(self.buckets.iter()) {
            total += c.load(Ordering::Relaxed);
            buckets.push((*b, total));
        }
        total += self.buckets[self.bounds.len()].load(Ordering::Relaxed);
        HistogramSnapshot {
            buckets,
            count: total,
            sum: f64::from_bits(self.sum.load(Ordering::Relaxed)),
        }
    }
}

impl HistogramSnapshot {
    /// Appends the histogram in the Prometheus text format (`name_bucket{le=…}`, `name_sum`,
    /// `name_count`).
    pub fn render_prometheus(&self, out: &mut String, name: &str, help: &str) {
        use std::fmt::Write as _;
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (le, n) in &self.buckets {
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {n}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}", self.sum);
        let _ = writeln!(out, "{name}_count {}", self.count);
    }
}

/// Counters of this worker process.
#[derive(Debug)]
pub struct WorkerStats {
    /// Orders inserted into the database.
    pub persisted: AtomicU64,
    /// Entries acknowledged that were already in the database (redeliveries).
    pub already_written: AtomicU64,
    /// Batches committed.
    pub batches: AtomicU64,
    /// Orders per committed batch.
    pub batch_size: Histogram,
    /// Database time of committed batches, in seconds.
    pub write_seconds: Histogram,
    /// Entries moved to a dead-letter stream (conflicts included).
    pub dead_lettered: AtomicU64,
    /// Orders that collided with another order in the database (dead-lettered).
    pub conflicts: AtomicU64,
    /// Entries taken over with `XAUTOCLAIM` (from dead consumers, or this one's failed ones).
    pub claimed: AtomicU64,
    /// Failed batch writes because the database was away or briefly refusing.
    pub db_outages: AtomicU64,
}

impl Default for WorkerStats {
    fn default() -> Self {
        Self {
            persisted: AtomicU64::new(0),
            already_written: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            batch_size: Histogram::new(BATCH_SIZE_BUCKETS),
            write_seconds: Histogram::new(WRITE_SECONDS_BUCKETS),
            dead_lettered: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            claimed: AtomicU64::new(0),
            db_outages: AtomicU64::new(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_count_into_cumulative_buckets() {
        static BOUNDS: &[f64] = &[1.0, 10.0, 100.0];
        let h = Histogram::new(BOUNDS);
        for v in [0.5, 1.0, 3.0, 10.0, 50.0, 1000.0] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.buckets, vec![(1.0, 2), (10.0, 4), (100.0, 5)]);
        assert_eq!(s.count, 6);
        assert!((s.sum - 1064.5).abs() < 1e-9);
        let mut out = String::new();
        s.render_prometheus(&mut out, "x_seconds", "Some help.");
        assert!(out.contains("# TYPE x_seconds histogram\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"10\"} 4\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"+Inf\"} 6\n"), "{out}");
        assert!(out.contains("x_seconds_count 6\n"), "{out}");
    }
}
