//! The web UI, embedded in the binary.
//!
//! The UI is three static files in `crates/hmdp/ui` (an HTML shell, one stylesheet, one
//! vanilla-JS script; no front-end build step), compiled in with `include_str!` so a single
//! `hmdp` binary is the whole product. The script is a small single-page app with hash routes
//! (`#/login`, `#/shop/1`, `#/dash/1`, …) that talks to the API under `/api`.
//!
//! # URL layout
//!
//! | path             | what                                                            |
//! |------------------|-----------------------------------------------------------------|
//! | `/app/`          | the UI (always)                                                 |
//! | `/app`           | redirect to `/app/`                                             |
//! | `/app/app.js`, `/app/app.css`, `/app/icon.svg` | the assets                        |
//! | `/`              | the UI too, **only when `HMDP_STATIC_DIR` is unset**            |
//!
//! Why a prefix: with `HMDP_STATIC_DIR` the operator's original pages own `/` (they are
//! served by the fallback in [`super::app`]), so our UI must live somewhere that can never
//! collide with them; `/app/` is also outside every API path (`/user/*`, `/shop*`,
//! `/voucher*`, `/health`, `/api/*`). The HTML refers to its assets by absolute `/app/…`
//! paths, so the same document works whether it was loaded from `/` or from `/app/`.
//!
//! The responses carry `cache-control: no-cache` (a new binary must never be paired with a
//! cached old script), `x-content-type-options: nosniff` and a content security policy that
//! allows only our own script and stylesheet: the script builds the DOM with `textContent`
//! and never uses `innerHTML`, so server or user text cannot become markup.

use axum::{
    Router,
    extract::{Request, State},
    http::{HeaderValue, Method, StatusCode, header},
    response::{IntoResponse, Redirect, Response},
    routing::{any, get},
};
use tower::ServiceExt;
use tower_http::services::ServeDir;

use super::AppState;

const INDEX_HTML: &str = include_str!("../../ui/index.html");
const APP_JS: &str = include_str!("../../ui/app.js");
const APP_CSS: &str = include_str!("../../ui/app.css");
const ICON_SVG: &str = include_str!("../../ui/icon.svg");

/// Only our own files; images may come from anywhere (shop photos are often remote URLs).
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
                   img-src 'self' data: http: https:; connect-src 'self'; \
                   object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// Routes of the embedded UI: `/app/…` always, `/` only when no static folder owns it.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", any(root))
        .route("/app", get(|| async { Redirect::permanent("/app/") }))
        .route("/app/", get(index))
        .route("/app/index.html", get(index))
        .route("/app/app.js", get(app_js))
        .route("/app/app.css", get(app_css))
        .route("/app/icon.svg", get(icon))
}

/// `/`: our UI, unless the operator's original pages (`HMDP_STATIC_DIR`) live there; then the
/// request goes to the same file service as the app's fallback, so `/` answers exactly as it
/// would without this route.
async fn root(State(state): State<AppState>, req: Request) -> Response {
    match &state.config.static_dir {
        Some(dir) => ServeDir::new(dir)
            .append_index_html_on_directories(true)
            .not_found_service(any(super::not_found).with_state(()))
            .oneshot(req)
            .await
            .map(IntoResponse::into_response)
            .unwrap_or_else(|never| match never {}),
        None if req.method() == Method::GET || req.method() == Method::HEAD => index().await,
        None => super::method_not_allowed().await.into_response(),
    }
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

async fn icon() -> Response {
    asset("image/svg+xml", ICON_SVG)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}
