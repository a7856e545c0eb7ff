//! What every request goes through before its handler, as one middleware.
//!
//! In order: the request is counted and timed (outside every refusal below, so a flood shows
//! up as 429s on its route; a sampled trace is its latency's exemplar), a panic anywhere inside
//! becomes a 500 envelope, the request gets its time limit, its client address, the per-address
//! rate limit, the session (the original's RefreshTokenInterceptor) and the per-user rate limit.
//!
//! These were seven layers once: six `from_fn` layers and tower-http's panic catcher. Axum
//! applies layers per route, and every `from_fn` layer clones the rest of the stack and boxes a
//! future for each request, so a 404 paid for six clones, six boxes and their frees: the profile
//! of the 404 under load showed malloc, free and memmove at 18 % (docs/14-benchmarking.md, the 404's profile). One
//! function runs the same steps in the same order with one of each.

use std::{future::Future, net::SocketAddr, panic::AssertUnwindSafe, task::Poll, time::Instant};

use axum::{
    extract::{ConnectInfo, MatchedPath, Request, State},
    http::{HeaderValue, Method, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use futures_util::FutureExt as _;
use tracing::{Instrument as _, Span, field};

use super::{ApiError, AppState, client::ClientIp, extract::SessionLookupFailed};
use crate::{
    domain::{SPAN_TARGET, SessionToken, TRACEPARENT, TraceParent},
    metrics::TraceExemplar,
};

/// The middleware: see the module docs.
pub(super) async fn pipeline(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = super::metrics::method_label(req.method());
    let route = req.extensions().get::<MatchedPath>().cloned();
    let limit = time_limit(&state, &req, route.as_ref());
    let span = request_span(&req, route.as_ref());
    let mut resp = unless_panicked(async {
        let mut answer = std::pin::pin!(guarded(&state, req, next));
        // Most answers are ready at once (a 404, a cached shop, a refusal from memory) and need
        // no timer: making one takes the runtime's handle (a shared reference count) and the
        // clock, and the profile of a cached shop read showed it.
        if let Poll::Ready(resp) = futures_util::poll!(answer.as_mut()) {
            return resp;
        }
        let deadline = tokio::time::Instant::from_std(started) + limit;
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(resp) => resp,
            Err(_elapsed) => ApiError::timeout(limit).into_response(),
        }
    })
    .instrument(span.clone())
    .await;
    let trace = if span.is_disabled() {
        None
    } else {
        answered(&span, &mut resp)
    };
    // No route took it (unknown paths, static files): one bounded label for all of them.
    let route = route
        .as_ref()
        .map_or("unmatched", |p| p.as_str().trim_start_matches("/api"));
    state.http_metrics.record(
        method,
        route,
        resp.status().as_u16(),
        started.elapsed().as_secs_f64(),
        trace,
    );
    resp
}

/// The response header that names the request's trace: `00-<trace id>-<span id>-<flags>`, the
/// request's own server span in the W3C Trace Context format (Level 2 calls it
/// `traceresponse`). Sent only when traces are exported.
pub(crate) const TRACERESPONSE: &str = "traceresponse";

/// The request's server span (disabled, and free, unless traces are exported): named after its
/// route template, a child of the caller's `traceparent` if it sent a valid one.
fn request_span(req: &Request, route: Option<&MatchedPath>) -> Span {
    let span = tracing::info_span!(
        target: SPAN_TARGET,
        "request",
        otel.name = field::Empty,
        otel.kind = "server",
        otel.status_code = field::Empty,
        http.request.method = field::Empty,
        http.route = field::Empty,
        url.path = field::Empty,
        http.response.status_code = field::Empty,
        hmdp.code = field::Empty,
    );
    if span.is_disabled() {
        return span;
    }
    let route = route.map_or("unmatched", |p| p.as_str());
    span.record("otel.name", format!("{} {route}", req.method()))
        .record("http.request.method", req.method().as_str())
        .record("http.route", route)
        .record("url.path", req.uri().path());
    if let Some(parent) = req
        .headers()
        .get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(TraceParent::parse)
    {
        parent.adopt(&span);
    }
    span
}

/// Records the answer on the request's span and names the trace in [`TRACERESPONSE`]. A
/// refusal's `code` was recorded by the error's rendering ([`record_code`]). Returns the trace
/// as the request's latency exemplar if it is sampled.
fn answered(span: &Span, resp: &mut Response) -> Option<TraceExemplar> {
    let status = resp.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
    let trace = TraceParent::of(span)?;
    if let Ok(value) = HeaderValue::from_str(trace.as_str()) {
        resp.headers_mut().insert(TRACERESPONSE, value);
    }
    trace.sampled_trace_id().map(TraceExemplar::new)
}

/// Records a refusal's code on the request's span (a no-op unless traces are exported).
pub(super) fn record_code(code: &'static str) {
    Span::current().record("hmdp.code", code);
}

/// `HMDP_REQUEST_TIMEOUT_MS`, or `HMDP_UPLOAD_TIMEOUT_SECS` for photo uploads
/// (`POST /upload/blog`, also under `/api`).
fn time_limit(state: &AppState, req: &Request, route: Option<&MatchedPath>) -> std::time::Duration {
    let is_upload = req.method() == Method::POST
        && route.is_some_and(|p| p.as_str().ends_with(super::upload::UPLOAD_PATH));
    if is_upload {
        state.config.social.upload_timeout
    } else {
        state.config.request_timeout
    }
}

/// The client address, the rate limits and the session, then the handler.
async fn guarded(state: &AppState, mut req: Request, next: Next) -> Response {
    // Requests without a peer address (in-process tests of the router) get no client.
    if let Some(ConnectInfo(peer)) = req.extensions().get::<ConnectInfo<SocketAddr>>() {
        let client = ClientIp::resolve(peer.ip(), req.headers(), &state.config.trusted_proxies);
        if let Err(refused) = state.limits.check_ip(client) {
            return refused.into_response();
        }
        req.extensions_mut().insert(client);
    }
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(SessionToken::parse);
    // A live session puts its user into the request and slides its TTL; anything else passes
    // through anonymous, and the routes that need login refuse it (see `CurrentUser`).
    if let Some(token) = token {
        match state.sessions.touch(&token).await {
            Ok(Some(user)) => {
                if let Err(refused) = state.limits.check_user(&user) {
                    return refused.into_response();
                }
                req.extensions_mut().insert(user);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "session lookup failed");
                req.extensions_mut().insert(SessionLookupFailed);
            }
        }
    }
    next.run(req).await
}

/// The answer of `answer`, or a 500 envelope if it panics (the panic hook has printed it).
async fn unless_panicked(answer: impl Future<Output = Response>) -> Response {
    AssertUnwindSafe(answer)
        .catch_unwind()
        .await
        .unwrap_or_else(|_panic| {
            tracing::error!("a request handler panicked");
            ApiError::panicked().into_response()
        })
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    #[tokio::test]
    async fn a_panic_is_a_500_envelope_and_an_answer_passes_through() {
        let resp = unless_panicked(async { panic!("a bug") }).await;
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = axum::body::to_bytes(resp.into_body(), 1024).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["success"], false);
        assert_eq!(body["code"], "internal");

        let resp = unless_panicked(async { StatusCode::IM_A_TEAPOT.into_response() }).await;
        assert_eq!(resp.status(), StatusCode::IM_A_TEAPOT);
    }

    fn future_size<'a, R: 'a, Fut: Future>(_: impl FnOnce(&'a R) -> Fut) -> usize {
        std::mem::size_of::<Fut>()
    }

    /// The futures of the hot answers stay small: axum allocates and copies each handler's
    /// future, whose size is that of its largest state, so the slow paths behind a cached
    /// shop and a grab are boxed (1.9 and 2.7 KB before).
    #[test]
    fn the_hot_paths_futures_are_small() {
        let (shop, user, voucher) = (
            crate::domain::ShopId::new(1).unwrap(),
            crate::domain::UserId::new(1).unwrap(),
            crate::domain::VoucherId::new(1).unwrap(),
        );
        let read = future_size::<crate::catalogue::Catalogue, _>(|c| c.shop_json(shop));
        let grab = future_size::<crate::seckill::Seckill, _>(|s| s.grab(user, voucher));
        assert!(read <= 512, "a shop read's future is {read} bytes");
        assert!(grab <= 512, "a grab's future is {grab} bytes");
    }
}
