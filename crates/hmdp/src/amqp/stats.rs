//! The pipeline's counters and gauges (`hmdp_amqp_*`), shared by the relay and the consumer of
//! one process and registered by whoever runs them.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use prometheus_client::metrics::{counter::Counter, gauge::Gauge};

use crate::metrics::Registry;

/// Counters of this process's relay and consumer. Cheap to update; read them with `.get()`.
#[derive(Debug, Default)]
pub struct AmqpStats {
    /// Order messages sent to the exchange (a retried batch counts again).
    pub published: Counter,
    /// Messages the broker confirmed (acked, routed to at least one queue).
    pub confirmed: Counter,
    /// Messages the broker returned as unroutable (no queue bound): retried.
    pub returned: Counter,
    /// Messages the broker refused (nacked): retried.
    pub nacked: Counter,
    /// Messages delivered to this process's consumer (redeliveries count again).
    pub consumed: Counter,
    /// Messages the consumer sent to the dead-letter exchange.
    pub dead_lettered: Counter,
    /// Ready messages in `direct.seckill.queue`, as the consumer last saw them.
    pub queue_depth: Gauge,
    relay_up: AtomicBool,
    consumer_up: AtomicBool,
    /// Which halves this process runs (the others do not count for [`AmqpStats::connected`]).
    relays: AtomicBool,
    consumes: AtomicBool,
    relay_gauge: Gauge,
    consumer_gauge: Gauge,
}

impl AmqpStats {
    /// Records whether the relay has a working connection.
    pub fn set_relay_up(&self, up: bool) {
        self.relay_up.store(up, Relaxed);
        self.relay_gauge.set(i64::from(up));
    }

    /// Records whether the consumer has a working connection.
    pub fn set_consumer_up(&self, up: bool) {
        self.consumer_up.store(up, Relaxed);
        self.consumer_gauge.set(i64::from(up));
    }

    /// Records which halves of the pipeline this process runs.
    pub fn set_role(&self, relays: bool, consumes: bool) {
        self.relays.store(relays, Relaxed);
        self.consumes.store(consumes, Relaxed);
    }

    /// Whether the halves this process runs are connected (what `/health` reports).
    pub fn connected(&self) -> bool {
        (!self.relays.load(Relaxed) || self.relay_up.load(Relaxed))
            && (!self.consumes.load(Relaxed) || self.consumer_up.load(Relaxed))
    }

    /// Adds the metrics to `registry` (they share the counters with `self`).
    pub fn register(&self, registry: &mut Registry) {
        let counters = [
            (
                "hmdp_amqp_published",
                "Order messages published to hmdianping.direct (retries count again)",
                &self.published,
            ),
            (
                "hmdp_amqp_confirmed",
                "Order messages the broker confirmed",
                &self.confirmed,
            ),
            (
                "hmdp_amqp_returned",
                "Order messages returned as unroutable (retried)",
                &self.returned,
            ),
            (
                "hmdp_amqp_nacked",
                "Order messages the broker refused (retried)",
                &self.nacked,
            ),
            (
                "hmdp_amqp_consumed",
                "Order messages delivered to this process's consumer",
                &self.consumed,
            ),
            (
                "hmdp_amqp_dead_lettered",
                "Order messages the consumer sent to hmdianping.dlx",
                &self.dead_lettered,
            ),
        ];
        for (name, help, counter) in counters {
            registry.register(name, help, counter.clone());
        }
        registry.register(
            "hmdp_amqp_queue_depth",
            "Ready messages in direct.seckill.queue as last seen by the consumer",
            self.queue_depth.clone(),
        );
        registry.register(
            "hmdp_amqp_relay_connected",
            "1 while the relay is connected to RabbitMQ",
            self.relay_gauge.clone(),
        );
        registry.register(
            "hmdp_amqp_consumer_connected",
            "1 while the consumer is connected to RabbitMQ",
            self.consumer_gauge.clone(),
        );
    }
}
