//! Per-second buckets of a phase: how many operations finished in each second and their
//! latency, for the throughput-over-time chart (a steady line, a warm-up ramp or a stall
//! shows there, not in the phase's averages).

use hdrhistogram::Histogram;
use serde::Serialize;

/// One second's operations. The histogram has 2 significant digits: enough for a chart, and
/// 8 times smaller than the phase histogram's, since there is one per second.
#[derive(Debug, Clone)]
pub struct Second {
    pub requests: u64,
    pub errors: u64,
    pub latency: Histogram<u64>,
}

impl Second {
    fn new() -> Self {
        Self {
            requests: 0,
            errors: 0,
            latency: Histogram::new_with_bounds(1, 60_000_000, 2).expect("histogram bounds"),
        }
    }
}

/// Buckets by whole seconds since the phase started.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    pub seconds: Vec<Second>,
}

/// One bucket as reported (JSON and chart).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SecondSummary {
    pub second: u64,
    /// Operations per second in this bucket (the last, partial bucket is scaled to its length).
    pub rate: f64,
    pub errors: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Timeline {
    fn bucket(&mut self, second: u64) -> &mut Second {
        let i = second as usize;
        while self.seconds.len() <= i {
            self.seconds.push(Second::new());
        }
        &mut self.seconds[i]
    }

    /// Records one call of `ops` operations that took `micros`, finished in `second`.
    pub fn record(&mut self, second: u64, micros: u64, ops: u64, failed: bool) {
        let b = self.bucket(second);
        b.requests += ops;
        b.errors += u64::from(failed);
        b.latency.saturating_record(micros.max(1));
    }

    pub fn is_empty(&self) -> bool {
        self.seconds.iter().all(|s| s.latency.is_empty())
    }

    pub fn merge(&mut self, other: &Timeline) {
        for (i, s) in other.seconds.iter().enumerate() {
            let b = self.bucket(i as u64);
            b.requests += s.requests;
            b.errors += s.errors;
            b.latency.add(&s.latency).expect("same bounds");
        }
    }

    /// The buckets as rates and percentiles; `elapsed_secs` is the phase's length, which
    /// tells how much of the last bucket the phase covered. A last bucket covering less than
    /// half a second is left out: it holds only the stragglers of the final round, and its
    /// rate would be noise.
    pub fn summary(&self, elapsed_secs: f64) -> Vec<SecondSummary> {
        let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        self.seconds
            .iter()
            .enumerate()
            .filter(|(i, _)| elapsed_secs - *i as f64 >= 0.5)
            .map(|(i, s)| {
                let covered = (elapsed_secs - i as f64).clamp(0.5, 1.0);
                SecondSummary {
                    second: i as u64,
                    rate: s.requests as f64 / covered,
                    errors: s.errors,
                    p50_ms: ms(&s.latency, 0.5),
                    p90_ms: ms(&s.latency, 0.9),
                    p99_ms: ms(&s.latency, 0.99),
                    max_ms: s.latency.max() as f64 / 1000.0,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_by_second_and_merges() {
        let mut a = Timeline::default();
        a.record(0, 1000, 1, false);
        a.record(2, 3000, 64, true);
        let mut b = Timeline::default();
        b.record(0, 2000, 1, false);
        a.merge(&b);
        assert_eq!(a.seconds.len(), 3);
        assert_eq!(a.seconds[0].requests, 2);
        assert_eq!(a.seconds[1].requests, 0);
        assert_eq!(a.seconds[2].requests, 64);
        assert_eq!(a.seconds[2].errors, 1);
        assert!(!a.is_empty());
        assert!(Timeline::default().is_empty());
    }

    #[test]
    fn summary_scales_the_last_partial_second() {
        let mut t = Timeline::default();
        for _ in 0..100 {
            t.record(0, 1000, 1, false);
        }
        for _ in 0..50 {
            t.record(1, 4000, 1, false);
        }
        assert_eq!(t.summary(1.2).len(), 1);
        let s = t.summary(1.5);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].rate, 100.0);
        assert_eq!(s[1].rate, 100.0);
        assert!((s[0].p50_ms - 1.0).abs() < 0.02);
        assert!((s[1].p99_ms - 4.0).abs() < 0.05);
    }
}
