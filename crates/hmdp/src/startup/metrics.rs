//! The one place stats types are registered into a process's metrics registry.
//!
//! A stats type keeps its metrics and registers them itself (`register(&mut Registry)`, beside
//! its counters, so a new counter touches that file only). Which stats each process exposes is
//! [`Exposed::registry`], for `hmdp serve` and `hmdp worker` alike: a new stats type is one line
//! there.

use hmdp_cache::CacheClient;
use hmdp_lock::LockClient;

use super::failover::FailoverStats;
use crate::{
    activity::UvStats,
    http::{ConnectionStats, HttpMetrics},
    kv::RedisConn,
    metrics::{CacheCollector, LockCollector, Registry},
    order_life::OrderStats,
    order_stream::StreamMetrics,
    seckill::SeckillStats,
    worker::OrderWorker,
};

/// What a process exposes at `/metrics`.
pub(super) struct Exposed<'a> {
    /// The HTTP service's own; `None` in `hmdp worker`.
    pub service: Option<ServiceStats<'a>>,
    /// The listener's connections.
    pub connections: &'a ConnectionStats,
    /// The order worker of this process, if it runs one.
    pub worker: Option<&'a OrderWorker>,
    /// The order life cycle's moves (the service's and its closer's).
    pub orders: Option<&'a OrderStats>,
    pub streams: &'a StreamMetrics,
    /// Redis primary moves followed (Sentinel).
    pub failovers: &'a FailoverStats,
}

/// The stats only the HTTP service has.
pub(super) struct ServiceStats<'a> {
    pub http: &'a HttpMetrics,
    pub seckill: &'a SeckillStats,
    pub cache: &'a CacheClient<RedisConn>,
    pub locks: &'a LockClient<RedisConn>,
    pub visits: &'a UvStats,
}

impl Exposed<'_> {
    /// A registry of every stats type given, sharing their counters.
    pub(super) fn registry(self) -> Registry {
        let mut registry = Registry::default();
        let r = &mut registry;
        if let Some(service) = &self.service {
            service.http.register(r);
        }
        self.connections.register(r);
        if let Some(service) = &self.service {
            service.seckill.register(r);
            r.register_collector(Box::new(CacheCollector(service.cache.clone())));
            r.register_collector(Box::new(LockCollector(service.locks.clone())));
        }
        if let Some(worker) = self.worker {
            worker.stats().register(r);
            if worker.uses_rabbitmq() {
                worker.amqp_stats().register(r);
            }
        }
        if let Some(orders) = self.orders {
            orders.register(r);
        }
        self.streams.register(r);
        self.failovers.register(r);
        if let Some(service) = &self.service {
            service.visits.register(r);
        }
        registry
    }
}
