//! The worker's counters and histograms (`hmdp_worker_*`), registered into the process's
//! metrics registry by whoever runs the worker (`hmdp serve`, or `hmdp worker`'s listener).

use prometheus_client::metrics::{counter::Counter, histogram::Histogram};

use crate::metrics::{Registry, TracedHistogram, histogram};

/// Upper bounds of the batch-size histogram's buckets (orders).
pub(crate) const BATCH_SIZE_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
];
/// Upper bounds of the write-time histogram's buckets (seconds).
pub(crate) const WRITE_SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Upper bounds of the order-lag histogram's buckets (seconds): about 1.5× apart, so that a
/// p50 or p99 read from it (`histogram_quantile`) is within a fifth of the truth, from a
/// millisecond to minutes.
pub(super) const LAG_SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15,
    0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];

/// Counters of this worker process. Cheap to update (atomics); read them with `.get()`.
#[derive(Debug)]
pub struct WorkerStats {
    /// Orders inserted into the database.
    pub persisted: Counter,
    /// Entries acknowledged that were already in the database (redeliveries).
    pub already_written: Counter,
    /// Batches committed.
    pub batches: Counter,
    /// Orders per committed batch.
    pub batch_size: Histogram,
    /// Database time of committed batches, in seconds; while traces are exported, a sampled
    /// batch's trace is its bucket's exemplar.
    pub(crate) write_seconds: TracedHistogram,
    /// From the grab's acceptance (its stream entry's time) to the commit of the order, in
    /// seconds: how far behind the sale the database is.
    pub order_lag: Histogram,
    /// Entries moved to a dead-letter stream (conflicts included).
    pub dead_lettered: Counter,
    /// Orders that collided with another order in the database (dead-lettered).
    pub conflicts: Counter,
    /// Entries taken over with `XAUTOCLAIM` (from dead consumers, or this one's failed ones).
    pub claimed: Counter,
    /// Failed batch writes because the database was away or briefly refusing.
    pub db_outages: Counter,
}

impl Default for WorkerStats {
    fn default() -> Self {
        Self {
            persisted: Counter::default(),
            already_written: Counter::default(),
            batches: Counter::default(),
            batch_size: histogram(BATCH_SIZE_BUCKETS),
            write_seconds: TracedHistogram::new(
                WRITE_SECONDS_BUCKETS,
                crate::domain::traces_exported(),
            ),
            order_lag: histogram(LAG_SECONDS_BUCKETS),
            dead_lettered: Counter::default(),
            conflicts: Counter::default(),
            claimed: Counter::default(),
            db_outages: Counter::default(),
        }
    }
}

impl WorkerStats {
    /// Records the lag of orders accepted at `accepted_ms` (Unix milliseconds), committed now.
    pub fn observe_lag(&self, accepted_ms: impl IntoIterator<Item = u64>) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        for at in accepted_ms {
            self.order_lag
                .observe(now.saturating_sub(at) as f64 / 1000.0);
        }
    }

    /// Adds the worker's metrics to `registry` (they share the counters with `self`).
    pub fn register(&self, registry: &mut Registry) {
        let counters = [
            (
                "hmdp_worker_orders_written",
                "Orders inserted by this process's worker",
                &self.persisted,
            ),
            (
                "hmdp_worker_redeliveries",
                "Entries acknowledged that were already written",
                &self.already_written,
            ),
            (
                "hmdp_worker_batches",
                "Committed order batches",
                &self.batches,
            ),
            (
                "hmdp_worker_dead_letters",
                "Orders moved to a dead-letter stream",
                &self.dead_lettered,
            ),
            (
                "hmdp_worker_claimed",
                "Entries taken over from other consumers",
                &self.claimed,
            ),
            (
                "hmdp_worker_conflicts",
                "Accepted orders that collided with another order in the database \
                 (dead-lettered)",
                &self.conflicts,
            ),
            (
                "hmdp_worker_db_outages",
                "Batch writes that failed because the database was away",
                &self.db_outages,
            ),
        ];
        for (name, help, counter) in counters {
            registry.register(name, help, counter.clone());
        }
        registry.register(
            "hmdp_worker_write_seconds",
            "Database time of committed order batches",
            self.write_seconds.clone(),
        );
        registry.register(
            "hmdp_worker_order_lag_seconds",
            "Time from the grab's acceptance of an order to its commit (Redis's clock to this \
             process's)",
            self.order_lag.clone(),
        );
        registry.register(
            "hmdp_worker_batch_size",
            "Orders per committed batch",
            self.batch_size.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registered_metrics_keep_their_names_and_count_into_cumulative_buckets() {
        let stats = WorkerStats::default();
        let mut registry = Registry::default();
        stats.register(&mut registry);
        stats.persisted.inc_by(3);
        for v in [0.5, 1.0, 3.0, 10.0, 50.0, 6000.0] {
            stats.batch_size.observe(v);
        }
        let out = crate::metrics::encode(&registry);
        for line in [
            "hmdp_worker_orders_written_total 3",
            "hmdp_worker_dead_letters_total 0",
            "# TYPE hmdp_worker_batch_size histogram",
            "hmdp_worker_batch_size_bucket{le=\"1.0\"} 2",
            "hmdp_worker_batch_size_bucket{le=\"10.0\"} 4",
            "hmdp_worker_batch_size_bucket{le=\"+Inf\"} 6",
            "hmdp_worker_batch_size_count 6",
        ] {
            assert!(
                out.lines().any(|l| l == line),
                "missing {line:?} in:\n{out}"
            );
        }
    }
}
