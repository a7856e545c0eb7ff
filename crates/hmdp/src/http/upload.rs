//! `/upload/*`: note photos (upload and delete), and serving them at `/imgs/blogs/…`.
//!
//! Unlike the original, which left `/upload/**` open to anyone, both routes need login, and
//! only the uploader may delete. The upload route has its own body limit
//! (`HMDP_UPLOAD_MAX_BYTES` plus room for the multipart framing) instead of the global 64 KiB;
//! the photo itself is counted while it is written. The pages show `/imgs` + the answered name,
//! so [`serve_photo`] answers `/imgs/blogs/…` from the upload folder and falls back to the
//! static folder (`HMDP_STATIC_DIR`), where the original's sample photos are.

use axum::{
    extract::{
        DefaultBodyLimit, Multipart, Request, State,
        multipart::{MultipartError, MultipartRejection},
    },
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use futures_util::TryStreamExt;
use serde::Deserialize;
use tower::ServiceExt;
use tower_http::services::ServeFile;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{
    router::{OpenApiRouter, UtoipaMethodRouterExt},
    routes,
};

use super::{ApiError, ApiResult, AppState, extract::AppQuery, ok, ok_empty};
use crate::{
    config::Config,
    http::CurrentUser,
    uploads::{PhotoName, UploadError},
};

const TAG: &str = "upload";

/// Room for the multipart boundaries and part headers around the photo.
const MULTIPART_SLACK: usize = 16 * 1024;

/// The upload route's path (its own request timeout matches on it; keep it equal to the
/// `#[utoipa::path]` below, which needs a literal — the slow-upload test fails otherwise).
pub(super) const UPLOAD_PATH: &str = "/upload/blog";

pub(super) fn router(config: &Config) -> OpenApiRouter<AppState> {
    let limit = config
        .social
        .upload_max_bytes
        .saturating_add(MULTIPART_SLACK);
    OpenApiRouter::new()
        .routes(routes!(upload).map(|r| r.route_layer(DefaultBodyLimit::max(limit))))
        .routes(routes!(delete))
}

/// The multipart form of an upload.
#[derive(ToSchema)]
#[allow(dead_code)]
struct UploadForm {
    /// The photo: JPEG, PNG, GIF or WebP (judged by its content, not by its name).
    #[schema(value_type = String, format = Binary, content_media_type = "application/octet-stream")]
    file: Vec<u8>,
}

/// Upload a note photo; data is its name, `/blogs/{d1}/{d2}/{uuid}.{ext}`.
///
/// A `multipart/form-data` body with the photo in the field `file`. The pages show it at
/// `/imgs` + the name. Refused: not an image, or one over 20,000 px a side or 50 megapixels
/// (`not_an_image`), larger than `HMDP_UPLOAD_MAX_BYTES` (413 `payload_too_large`), the
/// day's photos or bytes spent (429 `upload_quota`, until midnight), the upload folder's disk
/// nearly full (507 `disk_full`), not multipart (415). A photo no note uses is deleted after
/// `HMDP_UPLOAD_GRACE_SECS`.
#[utoipa::path(post, path = "/upload/blog", tag = TAG, security(("session" = [])),
    request_body(content = inline(UploadForm), content_type = "multipart/form-data"),
    responses((status = OK, body = String,
        example = json!("/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg"))))]
async fn upload(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<String> {
    let mut multipart = multipart.map_err(|_| UploadError::NotMultipart)?;
    let max = state.uploads.max_bytes();
    let body_error = move |e: MultipartError| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            UploadError::TooLarge { max }
        } else {
            UploadError::BadBody(e.body_text())
        }
    };
    while let Some(field) = multipart.next_field().await.map_err(body_error)? {
        if field.name() != Some("file") {
            continue;
        }
        let name = state
            .uploads
            .store(session.user.id, field.map_err(body_error))
            .await?;
        tracing::debug!(user = %session.user.id, %name, "photo uploaded");
        return ok(name.as_str().to_owned());
    }
    Err(ApiError::invalid(
        "请选择要上传的图片 (the multipart field `file` is missing)",
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct DeleteParams {
    /// The name the upload answered, with or without the `/imgs` prefix.
    name: String,
}

/// Delete a photo one uploaded.
///
/// Only the uploader may (`not_your_file`), and only while no published note lists it
/// (`file_in_use`); a name this service never hands out is `invalid_file_name`
/// ("错误的文件名称").
#[utoipa::path(get, path = "/upload/blog/delete", tag = TAG, security(("session" = [])),
    params(DeleteParams))]
async fn delete(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppQuery(params): AppQuery<DeleteParams>,
) -> ApiResult<()> {
    state.uploads.delete(session.user.id, &params.name).await?;
    ok_empty()
}

/// `/imgs/blogs/…`: an uploaded photo from the upload folder, else the static folder's file
/// (the original's sample photos), else a 404 envelope.
pub(super) async fn serve_photo(State(state): State<AppState>, req: Request) -> Response {
    if let Ok(name) = PhotoName::parse(req.uri().path()) {
        match state.uploads.locate(&name).await {
            Ok(Some(path)) => {
                let mut resp = ServeFile::new(path)
                    .oneshot(req)
                    .await
                    .map(IntoResponse::into_response)
                    .unwrap_or_else(|never| match never {});
                let served = resp.status().is_success();
                let h = resp.headers_mut();
                if served {
                    h.insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static(name.kind().mime()),
                    );
                }
                // A name is never reused for other content.
                h.insert(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("public, max-age=86400"),
                );
                h.insert(
                    header::X_CONTENT_TYPE_OPTIONS,
                    HeaderValue::from_static("nosniff"),
                );
                return resp;
            }
            Ok(None) => {}
            Err(e) => return ApiError::internal(e).into_response(),
        }
    }
    match &state.config.static_dir {
        // The same file service as the app's fallback.
        Some(dir) => super::static_files(dir)
            .oneshot(req)
            .await
            .map(IntoResponse::into_response)
            .unwrap_or_else(|never| match never {}),
        None => super::not_found().await.into_response(),
    }
}
