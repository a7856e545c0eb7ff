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
//! | `/imgs/types/*`  | shop-type icons, under the original's file names (`ms.png` …)   |
//! | `/imgs/demo/*`   | the demo data's note photos, shop pictures and avatars          |
//!
//! Why a prefix: with `HMDP_STATIC_DIR` the operator's original pages own `/` (they are
//! served by the fallback in [`super::app`]), so our UI must live somewhere that can never
//! collide with them; `/app/` is also outside every API path (`/user/*`, `/shop*`,
//! `/voucher*`, `/health`, `/api/*`). The HTML refers to its assets by absolute `/app/…`
//! paths, so the same document works whether it was loaded from `/` or from `/app/`.
//!
//! Images live under `/imgs/`, where the original pages look for them (`'/imgs/' + icon` for a
//! type, a note's `images` and a user's `icon` are `/imgs/…` paths already), so the demo data
//! shows in our UI and in the original pages alike. Only `types/` and `demo/` are ours:
//! `/imgs/blogs/…` belongs to the photo uploads. When `HMDP_STATIC_DIR` is set, a file of the
//! operator's folder wins (the original pages ship their own `imgs/types/*.png`), and ours fill
//! the gaps. All of them are our own drawings (`ui/imgs/`, the PNGs made by
//! `make-type-icons.py`), compiled in like the rest of the UI.
//!
//! The responses carry `cache-control: no-cache` (a new binary must never be paired with a
//! cached old script), `x-content-type-options: nosniff` and a content security policy that
//! allows only our own script and stylesheet: the script builds the DOM with `textContent`
//! and never uses `innerHTML`, so server or user text cannot become markup (a note's
//! content, sanitized HTML, is parsed inertly and rebuilt from text and a few plain tags).

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

/// One embedded image: its path under `/imgs/` and its bytes.
macro_rules! image {
    ($path:literal) => {
        (
            $path,
            include_bytes!(concat!("../../ui/imgs/", $path)) as &[u8],
        )
    };
}

/// The embedded images, by their path under `/imgs/`.
const IMAGES: &[(&str, &[u8])] = &[
    image!("types/ms.png"),
    image!("types/KTV.png"),
    image!("types/lrmf.png"),
    image!("types/jsyd.png"),
    image!("types/amzl.png"),
    image!("types/spa.png"),
    image!("types/qzyl.png"),
    image!("types/jiuba.png"),
    image!("types/hpg.png"),
    image!("types/mjmj.png"),
    image!("demo/hotpot.svg"),
    image!("demo/noodles.svg"),
    image!("demo/dumplings.svg"),
    image!("demo/coffee.svg"),
    image!("demo/fish.svg"),
    image!("demo/ktv.svg"),
    image!("demo/beer.svg"),
    image!("demo/gym.svg"),
    image!("demo/canal.svg"),
    image!("demo/nails.svg"),
    image!("demo/park.svg"),
    image!("demo/avatar-1.svg"),
    image!("demo/avatar-2.svg"),
    image!("demo/avatar-3.svg"),
    image!("demo/avatar-4.svg"),
    image!("demo/avatar-5.svg"),
];

/// An SVG opened on its own is a document: it may run nothing and load nothing.
const IMAGE_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; sandbox";

/// Only our own files; images may come from anywhere (shop photos are often remote URLs).
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
                   img-src 'self' data: http: https:; connect-src 'self'; \
                   object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// Routes of the embedded UI: `/app/…` always, `/` only when no static folder owns it.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", any(root))
        .route("/app", get(|| async { Redirect::permanent("/app/") }))
        .route("/app/", get(index))
        .route("/app/index.html", get(index))
        .route("/app/app.js", get(app_js))
        .route("/app/app.css", get(app_css))
        .route("/app/icon.svg", get(icon))
        .route("/imgs/types/{file}", get(image))
        .route("/imgs/demo/{file}", get(image))
}

/// `/`: our UI, unless the operator's original pages (`HMDP_STATIC_DIR`) live there; then the
/// request goes to the same file service as the app's fallback, so `/` answers exactly as it
/// would without this route.
async fn root(State(state): State<AppState>, req: Request) -> Response {
    match &state.config.static_dir {
        Some(dir) => super::static_files(dir)
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

/// `/imgs/types/*` and `/imgs/demo/*`: the operator's file when `HMDP_STATIC_DIR` has one,
/// else ours, else the 404 envelope. The lookup of ours is by exact path in a table, so no
/// request path can reach anything else.
async fn image(State(state): State<AppState>, req: Request) -> Response {
    match &state.config.static_dir {
        Some(dir) => {
            let path = req.uri().path().to_owned();
            let ours = any(move || {
                let path = path.clone();
                async move { embedded_image(&path).await }
            });
            // `fallback`, not `not_found_service`: the latter would force a 404 on ours.
            ServeDir::new(dir)
                .fallback(ours.with_state(()))
                .oneshot(req)
                .await
                .map(IntoResponse::into_response)
                .unwrap_or_else(|never| match never {})
        }
        None => embedded_image(req.uri().path()).await,
    }
}

/// Our image at `path` (`/imgs/…`), or the 404 envelope.
async fn embedded_image(path: &str) -> Response {
    let Some(&(name, bytes)) = path
        .strip_prefix("/imgs/")
        .and_then(|name| IMAGES.iter().find(|(n, _)| *n == name))
    else {
        return super::not_found().await.into_response();
    };
    let content_type = if name.ends_with(".svg") {
        "image/svg+xml"
    } else {
        "image/png"
    };
    let mut resp = (StatusCode::OK, bytes).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Images change only with a new binary, and rarely; an hour of caching is harmless.
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(IMAGE_CSP),
    );
    resp
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_icon_of_the_original_has_a_drawing_and_images_stay_small() {
        for icon in [
            "ms", "KTV", "lrmf", "jsyd", "amzl", "spa", "qzyl", "jiuba", "hpg", "mjmj",
        ] {
            let name = format!("types/{icon}.png");
            let (_, bytes) = IMAGES
                .iter()
                .find(|(n, _)| *n == name)
                .unwrap_or_else(|| panic!("no {name}"));
            assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is a PNG");
        }
        for (name, bytes) in IMAGES {
            assert!(bytes.len() < 20 * 1024, "{name}: {} bytes", bytes.len());
            if name.ends_with(".svg") {
                let text = std::str::from_utf8(bytes).unwrap();
                assert!(text.starts_with("<svg"), "{name}");
                assert!(!text.contains("<script"), "{name}");
            }
        }
    }

    #[tokio::test]
    async fn an_unknown_image_is_the_404_envelope() {
        assert_eq!(embedded_image("/imgs/demo/hotpot.svg").await.status(), 200);
        for path in [
            "/imgs/demo/nope.svg",
            "/imgs/demo/../types/ms.png",
            "/imgs/blogs/1/2/x.png",
            "/imgs/",
        ] {
            assert_eq!(embedded_image(path).await.status(), 404, "{path}");
        }
    }
}
