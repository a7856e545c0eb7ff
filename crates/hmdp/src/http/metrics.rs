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
//!
//! While traces are exported, a sampled request is its latency bucket's exemplar. Only a
//! scraper whose `Accept` names OpenMetrics (Prometheus does) is shown exemplars; the body is
//! OpenMetrics text either way (exemplars are optional in it), so the `Content-Type` is the same,
//! and `Vary: Accept` tells caches the answer depends on the header.

use std::{
    collections::HashSet,
    sync::{LazyLock, RwLock},
};

use axum::{
    extract::State,
    http::{HeaderMap, Method, header},
    response::{IntoResponse, Response},
};

use super::{Admin, AppState};
use crate::metrics::{Counter, EncodeLabelSet, Family, Registry, TraceExemplar, TracedHistogram};

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

type LatencyFamily = Family<RouteLabels, TracedHistogram>;

/// A route's latency histogram, with exemplars if traces are exported.
fn latency_histogram() -> TracedHistogram {
    TracedHistogram::new(&BUCKETS, crate::domain::traces_exported())
}

/// Request counters by (method, route, status) and latency histograms by (method, route).
pub struct HttpMetrics {
    requests: Family<RequestLabels, Counter>,
    latency: LatencyFamily,
}

impl Default for HttpMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
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

    /// Counts one answered request (`route`: its template without `/api`, or `unmatched`);
    /// `trace`, the request's sampled trace, becomes its latency bucket's exemplar.
    pub(super) fn record(
        &self,
        method: &'static str,
        route: &str,
        status: u16,
        seconds: f64,
        trace: Option<TraceExemplar>,
    ) {
        let route = intern(route);
        self.latency
            .get_or_create(&RouteLabels { method, route })
            .observe(seconds, trace);
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
pub(super) async fn metrics(
    _: Admin,
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Response {
    state
        .stream_metrics
        .refresh(&state.redis, &state.keys, state.config.seckill.shards)
        .await;
    exposition(&state.metrics, &headers)
}

/// The registry as a `/metrics` answer to a request with `headers`: with exemplars if it asks
/// for OpenMetrics.
pub(crate) fn exposition(registry: &Registry, headers: &HeaderMap) -> Response {
    let text = crate::metrics::encode(registry);
    let text = if asks_for_openmetrics(headers) {
        text
    } else {
        crate::metrics::without_exemplars(&text)
    };
    (
        [
            (header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE),
            (header::VARY, "accept"),
        ],
        text,
    )
        .into_response()
}

/// Whether `Accept` names `application/openmetrics-text` with a quality above zero.
fn asks_for_openmetrics(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let mut params = range.split(';').map(str::trim);
            let kind = params.next().unwrap_or("");
            kind.eq_ignore_ascii_case("application/openmetrics-text")
                && params
                    .filter_map(|p| p.split_once('='))
                    .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                    .is_none_or(|(_, q)| q.trim().parse::<f32>().is_ok_and(|q| q > 0.0))
        })
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn openmetrics_is_asked_for_only_with_a_quality_above_zero() {
        let asks = |accept: &[&str]| {
            let mut headers = HeaderMap::new();
            for a in accept {
                headers.append(header::ACCEPT, HeaderValue::from_str(a).unwrap());
            }
            asks_for_openmetrics(&headers)
        };
        // What Prometheus 2.x sends.
        assert!(asks(&[
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
             version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        ]));
        assert!(asks(&["text/plain", "Application/OpenMetrics-Text; q=0.2"]));
        assert!(!asks(&[]));
        assert!(!asks(&["*/*"]));
        assert!(!asks(&["text/plain;version=0.0.4"]));
        assert!(!asks(&["application/openmetrics-text;q=0"]));
        assert!(!asks(&["application/openmetrics-textual"]));
    }
}
