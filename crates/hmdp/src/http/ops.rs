//! A small listener of its own for the scraper: `GET /metrics` and `GET /health`, nothing else.
//!
//! `/metrics` tells sales volumes, order rates and outages: on the public port it needs the
//! admin token. A Prometheus that cannot send a header, or should not hold the admin token,
//! scrapes this listener instead, bound where only it reaches: `hmdp serve` opens it on
//! `HMDP_METRICS_LISTEN`, `hmdp worker` on `HMDP_WORKER_LISTEN` (both off by default). A worker
//! scaled out into its own processes writes the orders, so its batch sizes, database write
//! latency, redeliveries, dead letters and outages exist only in that process; the metric names
//! are the ones `hmdp serve` uses for its embedded worker, so one dashboard covers both. There
//! is no API, UI or admin route here, and no rate limit.

use std::sync::Arc;

use axum::{Router, extract::State, http::HeaderMap, response::Response, routing::get};

use super::{health, metrics};
use crate::{
    kv::{Keys, RedisConn},
    metrics::Registry,
    order_stream::StreamMetrics,
    storage::Db,
};

/// What the scraper's listener reads.
pub(crate) struct OpsEndpoint {
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
    /// `Some(HMDP_REDIS_WAIT_REPLICAS)` when accepted orders wait in Redis: `/health` warns
    /// when Redis would lose them (see `health::sale_redis`).
    pub sale_redis: Option<u32>,
    /// Everything `/metrics` shows, `stream_metrics` included.
    pub metrics: Arc<Registry>,
    /// The order stream gauges, registered in `metrics`, read at each scrape.
    pub stream_metrics: StreamMetrics,
}

/// `/metrics` and `/health` without a credential (served by [`super::serve`]).
pub(crate) fn ops_app(endpoint: OpsEndpoint) -> Router {
    Router::new()
        .route("/metrics", get(ops_metrics))
        .route("/health", get(ops_health))
        .fallback(super::not_found)
        .with_state(Arc::new(endpoint))
}

async fn ops_metrics(State(ep): State<Arc<OpsEndpoint>>, headers: HeaderMap) -> Response {
    ep.stream_metrics
        .refresh(&ep.redis, &ep.keys, ep.shards)
        .await;
    metrics::exposition(&ep.metrics, &headers)
}

async fn ops_health(State(ep): State<Arc<OpsEndpoint>>) -> Response {
    health::check(&ep.redis, &ep.db, ep.broker.as_deref(), ep.sale_redis).await
}
