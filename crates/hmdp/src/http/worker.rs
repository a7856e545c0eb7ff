//! The standalone worker's own small listener: `hmdp worker` with `HMDP_WORKER_LISTEN` set
//! serves `GET /metrics` and `GET /health`, nothing else.
//!
//! A worker scaled out into its own processes writes the orders, so its batch sizes, database
//! write latency, redeliveries, dead letters and outages exist only in that process: without a
//! listener an operator could see the streams fill up (any serving instance's gauges) but not
//! why. The metric names are the ones `hmdp serve` uses for its embedded worker, so one
//! dashboard covers both. There is no API, UI or admin route here, and no rate limit: bind it
//! where only the scraper reaches (the default is off).

use std::sync::Arc;

use axum::{Router, extract::State, response::Response, routing::get};

use super::{health, metrics};
use crate::{
    kv::{Keys, RedisConn},
    metrics::Registry,
    order_stream::StreamMetrics,
    storage::Db,
};

/// What the standalone worker's listener reads.
pub struct WorkerEndpoint {
    /// Pinged by `/health`.
    pub db: Db,
    /// Pinged by `/health`; the stream gauges are read through it.
    pub redis: RedisConn,
    /// Names the order streams.
    pub keys: Keys,
    /// How many order streams there are (`HMDP_SECKILL_SHARDS`).
    pub shards: u32,
    /// The RabbitMQ relay and consumer, with `HMDP_ORDER_TRANSPORT=rabbitmq`.
    pub broker: Option<Arc<crate::amqp::AmqpStats>>,
    /// The worker's metrics ([`crate::worker::WorkerStats::register`]) and `stream_metrics`.
    pub metrics: Registry,
    /// The order stream gauges, registered in `metrics`, read at each scrape.
    pub stream_metrics: StreamMetrics,
}

/// `/metrics` and `/health` for a standalone worker (served by [`super::serve`]).
pub fn worker_app(endpoint: WorkerEndpoint) -> Router {
    Router::new()
        .route("/metrics", get(worker_metrics))
        .route("/health", get(worker_health))
        .fallback(super::not_found)
        .with_state(Arc::new(endpoint))
}

async fn worker_metrics(State(ep): State<Arc<WorkerEndpoint>>) -> Response {
    ep.stream_metrics
        .refresh(&ep.redis, &ep.keys, ep.shards)
        .await;
    metrics::exposition(&ep.metrics)
}

async fn worker_health(State(ep): State<Arc<WorkerEndpoint>>) -> Response {
    health::check(&ep.redis, &ep.db, ep.broker.as_deref()).await
}
