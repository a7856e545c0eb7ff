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

use axum::{
    Router,
    extract::State,
    http::header,
    response::{IntoResponse, Response},
    routing::get,
};

use super::{health, metrics};
use crate::{
    kv::{Keys, RedisConn},
    storage::Db,
    worker::WorkerStats,
};

/// What the standalone worker's listener reads.
#[derive(Clone)]
pub struct WorkerEndpoint {
    /// Pinged by `/health`.
    pub db: Db,
    /// Pinged by `/health`; the stream gauges are read through it.
    pub redis: RedisConn,
    /// Names the order streams.
    pub keys: Keys,
    /// How many order streams there are (`HMDP_SECKILL_SHARDS`).
    pub shards: u32,
    /// The running worker's counters ([`crate::worker::OrderWorker::stats`]).
    pub stats: Arc<WorkerStats>,
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
    let mut out = String::with_capacity(4 * 1024);
    metrics::worker_section(&mut out, &ep.stats);
    metrics::stream_section(&mut out, &ep.redis, &ep.keys, ep.shards).await;
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

async fn worker_health(State(ep): State<Arc<WorkerEndpoint>>) -> Response {
    health::check(&ep.redis, &ep.db).await
}
