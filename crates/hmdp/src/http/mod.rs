//! The HTTP API, compatible with the original front-end.
//!
//! One module per resource, each with its own `router()`; [`app`] merges them, mounts the
//! whole API both at `/…` and at `/api/…` (the original pages call `/api`, which nginx used to
//! strip), and wraps it in request tracing, a body size limit and [`pipeline`]: metrics, panic
//! catching, a request timeout, the client address, rate limits and the session refresh (the
//! original's RefreshTokenInterceptor), in one middleware.
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
pub(crate) mod health;
mod limits;
mod metrics;
mod openapi;
mod ops;
mod order;
mod pipeline;
mod serve;
mod shop;
mod ui;
mod upload;
mod user;
mod voucher;

use std::sync::Arc;

use axum::{
    Router,
    extract::{DefaultBodyLimit, Request},
    middleware,
};
use tower_http::{
    services::ServeDir,
    trace::{DefaultOnResponse, TraceLayer},
};
use tracing::Level;
use utoipa_axum::router::OpenApiRouter;

pub(crate) use error::{ApiError, ApiResult, Envelope, ErrorCode, JsonReply, Reply, ok, ok_empty};
pub(crate) use extract::{Admin, CurrentUser};
pub(crate) use limits::Limits;
pub(crate) use metrics::HttpMetrics;
pub(crate) use ops::{OpsEndpoint, ops_app};
pub(crate) use serve::{ConnectionStats, ServeOptions, serve};

use crate::{
    auth::{CodeIssuer, SessionStore, SmsSender},
    catalogue::Catalogue,
    config::{Config, Secret},
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
    pub seckill: crate::seckill::Seckill,
    /// Pay, cancel, use, refund, and the gateway's notices.
    pub orders: crate::order_life::OrderLife,
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
    /// The embedded order worker's counters, when it runs in this process (the bench watches
    /// them).
    #[cfg(feature = "test-util")]
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
pub(crate) fn app(state: AppState) -> Router {
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
    // Outside-in: the request's trace span, then the pipeline (metrics, panics, timeout, client
    // address, rate limits, session; see `pipeline`). Axum applies `Router::layer` to each route
    // (and the fallback) after routing, so the pipeline already sees the route template.
    router
        .layer(DefaultBodyLimit::max(state.config.body_limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            pipeline::pipeline,
        ))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_response(DefaultOnResponse::new().level(Level::DEBUG)),
        )
        .with_state(state)
}

/// The span every request's log lines carry: `tower-http`'s default (method, URI, version) with
/// the phone numbers in the URI masked.
fn request_span(req: &Request) -> tracing::Span {
    tracing::info_span!(
        "request",
        method = %req.method(),
        // A server's request target is its path and query: masked in place, not copied first.
        uri = %crate::domain::mask_phones(req.uri().path_and_query().map_or("/", |p| p.as_str())),
        version = ?req.version(),
    )
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
    ApiError::no_route()
}

async fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed()
}
