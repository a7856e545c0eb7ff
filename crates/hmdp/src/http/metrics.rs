//! `GET /metrics`, and the request metrics that the request pipeline records.
//!
//! On the public port `/metrics` needs the admin token (`x-admin-token`): it tells sales
//! volumes, order rates and outages to whoever asks. A scraper without the token scrapes
//! `HMDP_METRICS_LISTEN` instead ([`super::ops`]).
//!
//! The pipeline (`super::pipeline`) records every request, its own refusals included. Labels
//! are bounded, because unbounded label values would
//! blow up Prometheus: the route is the template (e.g. `/shop/{id}`, never the raw path), or
//! `unmatched` for everything no route took (unknown paths, static files); methods outside the
//! standard set are counted as `OTHER`. Everything else on `/metrics` is registered by the
//! module that owns it (see [`crate::metrics`]).

use std::{
    collections::HashSet,
    sync::{LazyLock, RwLock},
};

use axum::{
    extract::State,
    http::{Method, header},
    response::{IntoResponse, Response},
};

use super::{Admin, AppState};
use crate::metrics::{Counter, EncodeLabelSet, Family, Registry};

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    route: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: &'static str,
    route: &'static str,
}

type LatencyFamily = Family<RouteLabels, prometheus_client::metrics::histogram::Histogram>;

/// Request counters by (method, route, status) and latency histograms by (method, route).
pub struct HttpMetrics {
    requests: Family<RequestLabels, Counter>,
    latency: LatencyFamily,
}

impl Default for HttpMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(|| crate::metrics::histogram(&BUCKETS)),
        }
    }
}

impl HttpMetrics {
    /// Adds the request metrics to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "hmdp_http_requests",
            "HTTP requests by method, route and status",
            self.requests.clone(),
        );
        registry.register(
            "hmdp_http_request_duration_seconds",
            "Request latency by method and route",
            self.latency.clone(),
        );
    }

    /// Counts one answered request (`route`: its template without `/api`, or `unmatched`).
    pub(super) fn record(&self, method: &'static str, route: &str, status: u16, seconds: f64) {
        let route = intern(route);
        self.latency
            .get_or_create(&RouteLabels { method, route })
            .observe(seconds);
        self.requests
            .get_or_create(&RequestLabels {
                method,
                route,
                status,
            })
            .inc();
    }
}

/// A route template as `&'static str`, so that recording a request allocates nothing. Each
/// template is leaked once; there are only as many as the router has (plus `unmatched`).
fn intern(route: &str) -> &'static str {
    static ROUTES: LazyLock<RwLock<HashSet<&'static str>>> = LazyLock::new(Default::default);
    if let Some(known) = ROUTES.read().expect("routes poisoned").get(route) {
        return known;
    }
    let mut routes = ROUTES.write().expect("routes poisoned");
    match routes.get(route) {
        Some(known) => known,
        None => {
            let leaked: &'static str = Box::leak(route.into());
            routes.insert(leaked);
            leaked
        }
    }
}

/// The method label: the method itself if standard, else `OTHER` (any token is a valid method,
/// and each would otherwise become a series).
pub(super) fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => "OTHER",
    }
}

/// `GET /metrics` (admin only): the stream gauges are read from Redis now, the rest is in memory.
pub(super) async fn metrics(_: Admin, State(state): State<AppState>) -> Response {
    state
        .stream_metrics
        .refresh(&state.redis, &state.keys, state.config.seckill.shards)
        .await;
    exposition(&state.metrics)
}

/// The registry as a `/metrics` answer.
pub(crate) fn exposition(registry: &Registry) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        crate::metrics::encode(registry),
    )
        .into_response()
}
