//! The HTTP API, compatible with the original front-end.
//!
//! One module per resource, each with its own `router()`; [`app`] merges them, mounts the
//! whole API both at `/…` and at `/api/…` (the original pages call `/api`, which nginx used to
//! strip), and wraps it in the cross-cutting layers: request tracing, panic catching, a request
//! timeout, a body size limit and the session refresh (the original's RefreshTokenInterceptor).
//! Login-required routes are the ones whose handlers take a [`CurrentUser`]. The request log
//! shows each URI with its phone numbers masked (`138****5678`): `POST /user/code?phone=…`
//! carries one in its query string, and logs are read by more people than the database.
//!
//! Each handler carries its OpenAPI operation (`#[utoipa::path]`) and each resource's router
//! registers it with `routes!`, so a route is declared once, documented where it is declared;
//! [`api`] collects them, and [`openapi`] serves the document.

mod blog;
mod client;
mod docs;
mod error;
mod extract;
mod follow;
mod health;
mod limits;
mod metrics;
mod openapi;
mod ops;
mod order;
mod serve;
mod shop;
mod ui;
mod upload;
mod user;
mod voucher;

use std::sync::Arc;

use axum::{
    Router,
    body::Body,
    extract::{DefaultBodyLimit, Request, State},
    http::{StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use tower_http::{
    catch_panic::CatchPanicLayer,
    services::ServeDir,
    trace::{DefaultOnResponse, TraceLayer},
};
use tracing::Level;
use utoipa_axum::router::OpenApiRouter;

pub use client::{ClientIp, limit_key};
pub use error::{ApiError, ApiResult, Envelope, ErrorCode, Reply, ok, ok_empty};
pub use extract::{Admin, AppJson, AppPath, AppQuery, CurrentUser};
pub use limits::Limits;
pub use metrics::HttpMetrics;
pub use ops::{OpsEndpoint, ops_app};
pub use serve::{ConnectionStats, ServeOptions, serve};

use crate::{
    auth::{CodeIssuer, SessionStore, SmsSender},
    catalogue::Catalogue,
    config::{Config, Secret},
    domain::SessionToken,
    kv::{Keys, RedisConn},
    storage::Db,
};

/// Everything a handler may need, behind one `Arc`.
///
/// Axum clones the state for every `from_fn_with_state` middleware and every extractor of every
/// request. A profile of the flash sale showed a field-by-field clone and drop of this struct
/// (a dozen handles, several of them nested `Arc`s and `String`s) at about 13 % of the server's
/// CPU; behind one `Arc` a clone is a single atomic increment. Fields are reached through
/// `Deref`, so handlers write `state.db` as before.
#[derive(Clone)]
pub struct AppState(Arc<AppStateInner>);

impl AppState {
    /// Wraps the parts.
    pub fn new(inner: AppStateInner) -> Self {
        Self(Arc::new(inner))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppStateInner;

    fn deref(&self) -> &AppStateInner {
        &self.0
    }
}

/// The parts of [`AppState`].
pub struct AppStateInner {
    pub db: Db,
    pub redis: RedisConn,
    pub keys: Keys,
    pub sessions: SessionStore,
    pub codes: CodeIssuer,
    pub sms: Arc<dyn SmsSender>,
    pub catalogue: Catalogue,
    pub locks: hmdp_lock::LockClient<RedisConn>,
    pub seckill: crate::seckill::Seckill,
    /// Notes, likes, follows and the feed.
    pub social: crate::social::Social,
    /// Sign-in and unique visitors.
    pub activity: crate::activity::Activity,
    /// Note photos.
    pub uploads: crate::uploads::Uploads,
    /// Per-IP and per-user request rate limits.
    pub limits: Arc<limits::Limits>,
    /// Request counters and latency histograms, recorded by every request.
    pub http_metrics: Arc<metrics::HttpMetrics>,
    /// Everything `/metrics` shows (built by [`crate::startup`]).
    pub metrics: Arc<crate::metrics::Registry>,
    /// The order stream gauges (registered in `metrics`), read from Redis at each scrape.
    pub stream_metrics: crate::order_stream::StreamMetrics,
    /// The embedded order worker's counters, when it runs in this process.
    pub worker: Option<Arc<crate::worker::WorkerStats>>,
    /// Its RabbitMQ relay and consumer, with `HMDP_ORDER_TRANSPORT=rabbitmq` (`/health`).
    pub broker: Option<Arc<crate::amqp::AmqpStats>>,
    pub admin_token: Arc<Secret>,
    pub config: Arc<Config>,
}

/// The documented API: every route with its OpenAPI operation, without layers or prefix.
///
/// [`app`] serves it at `/…` and `/api/…` with `/openapi.json`, `/docs` and `/metrics` (admin
/// only) beside it, and nothing else there: a test checks that every route of this router is
/// documented.
pub fn api(config: &Config) -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(health::router())
        .merge(user::router(config))
        .merge(shop::router())
        .merge(voucher::router())
        .merge(order::router())
        .merge(blog::router())
        .merge(follow::router())
        .merge(upload::router(config))
}

/// The complete application: the API at `/` and `/api`, the layers, and the static files.
pub fn app(state: AppState) -> Router {
    let (api, doc) = api(&state.config).split_for_parts();
    // Built once and mounted twice: both mounts share the route-level quotas' state.
    let api = api
        .merge(openapi::routes(doc))
        .route("/metrics", axum::routing::get(metrics::metrics));
    let mut router = Router::new()
        .merge(ui::routes())
        .merge(api.clone())
        .nest("/api", api)
        // Uploaded note photos, where the pages look for them (`/imgs` + the upload's name);
        // other `/imgs/blogs/…` files come from the static folder.
        .route(
            "/imgs/blogs/{*path}",
            axum::routing::get(upload::serve_photo),
        )
        .method_not_allowed_fallback(method_not_allowed);
    router = match &state.config.static_dir {
        // Unknown paths fall through to the files; a missing file is a 404 envelope.
        Some(dir) => router.fallback_service(static_files(dir)),
        None => router.fallback(not_found),
    };
    // Layers run outside-in: trace, metrics, panic, timeout, body limit, client address, IP
    // limit, session, user limit. Axum applies `Router::layer` to each route (and the fallback) after routing,
    // so every layer, the metrics one included, already sees the route template (`MatchedPath`).
    let router: Router = router
        .layer(middleware::from_fn_with_state(
            state.clone(),
            limits::limit_user,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            refresh_session,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            limits::limit_ip,
        ))
        // The one place the client address is decided (`HMDP_TRUSTED_PROXIES`).
        .layer(middleware::from_fn_with_state(
            state.clone(),
            client::resolve_client,
        ))
        .layer(DefaultBodyLimit::max(state.config.body_limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            request_timeout,
        ))
        .layer(CatchPanicLayer::custom(panic_response))
        // Outside every refusal (rate limits, timeout, body limit, panics, unknown routes), so
        // those answers are counted too.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_response(DefaultOnResponse::new().level(Level::DEBUG)),
        )
        .with_state(state);
    // Paths with doubled slashes are routed as if merged, as nginx (`merge_slashes on`, the
    // original's front) does: `index.html` asks for `'/imgs/' + icon` with icons stored as
    // `/types/…`, i.e. `/imgs//types/…`. Routing happens inside the inner router, after this.
    Router::new().fallback_service(tower::ServiceExt::map_request(router, merge_slashes))
}

/// The span every request's log lines carry: `tower-http`'s default (method, URI, version) with
/// the phone numbers in the URI masked.
fn request_span(req: &Request) -> tracing::Span {
    tracing::info_span!(
        "request",
        method = %req.method(),
        uri = %crate::domain::mask_phones(&req.uri().to_string()),
        version = ?req.version(),
    )
}

/// Collapses runs of `/` in the request path (the query is left alone).
fn merge_slashes(mut req: Request) -> Request {
    let uri = req.uri();
    if !uri.path().contains("//") {
        return req;
    }
    let mut path = String::with_capacity(uri.path().len());
    for c in uri.path().chars() {
        if !(c == '/' && path.ends_with('/')) {
            path.push(c);
        }
    }
    let path_and_query = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    let mut parts = uri.clone().into_parts();
    if let Ok(pq) = path_and_query.parse() {
        parts.path_and_query = Some(pq);
        if let Ok(merged) = axum::http::Uri::from_parts(parts) {
            *req.uri_mut() = merged;
        }
    }
    req
}

/// Reads the `authorization` header and, for a live session, puts the user into the request
/// and slides the session's TTL. Requests without a valid session pass through anonymous;
/// the routes that need login refuse them (see [`CurrentUser`]).
async fn refresh_session(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(SessionToken::parse);
    if let Some(token) = token {
        match state.sessions.touch(&token).await {
            Ok(Some(user)) => {
                req.extensions_mut().insert(user);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "session lookup failed");
                req.extensions_mut().insert(extract::SessionLookupFailed);
            }
        }
    }
    next.run(req).await
}

/// Answers 503 in the envelope when a request takes longer than `HMDP_REQUEST_TIMEOUT_MS`.
///
/// Photo uploads (`POST /upload/blog`, also under `/api`) get `HMDP_UPLOAD_TIMEOUT_SECS`.
async fn request_timeout(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let is_upload = req.method() == axum::http::Method::POST
        && req
            .extensions()
            .get::<axum::extract::MatchedPath>()
            .is_some_and(|p| p.as_str().ends_with(upload::UPLOAD_PATH));
    let limit = if is_upload {
        state.config.social.upload_timeout
    } else {
        state.config.request_timeout
    };
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => ApiError::new(
            ErrorCode::Timeout,
            format!(
                "请求超时，请稍后重试 (request took longer than {} ms)",
                limit.as_millis()
            ),
        )
        .into_response(),
    }
}

/// The operator's folder (`HMDP_STATIC_DIR`) as a file service: `index.html` for folders, the
/// 404 envelope for a missing file. The fallback, `/` and `/imgs/blogs/…` all answer through it.
fn static_files(
    dir: &std::path::Path,
) -> ServeDir<tower_http::set_status::SetStatus<axum::routing::MethodRouter>> {
    ServeDir::new(dir)
        .append_index_html_on_directories(true)
        .not_found_service(axum::routing::any(not_found).with_state(()))
}

async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "接口不存在 (no such route)")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "请求方法不支持 (method not allowed on this route)",
    )
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response<Body> {
    tracing::error!("a request handler panicked");
    let mut resp =
        ApiError::new(ErrorCode::Internal, "服务器异常 (internal error)").into_response();
    *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    resp
}
