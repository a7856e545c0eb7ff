//! The response envelope and the HTTP error type: what every error and refusal looks like on
//! the wire.
//!
//! Every answer is the original's `Result` JSON — `{success, errorMsg, data, total}` with null
//! fields omitted — plus, on failures, a stable machine-readable `code`. Which code and message
//! an error gets is said beside its error type ([`Answered`], the codes' table in
//! `domain/refusal.rs`); this file only renders it. Status codes: business refusals are HTTP
//! 200 with `success:false` (as the original, so its pages show the message); malformed input
//! 400; missing or expired login 401; admin token missing 403; rate limited 429 (with
//! `Retry-After`); Redis or the database away 503; anything else 500 with a generic message
//! while the cause goes to the log, never to the client.

use std::{
    borrow::Cow,
    sync::{Arc, LazyLock},
    time::Duration,
};

use axum::{
    Json,
    extract::rejection::{JsonRejection, PathRejection, QueryRejection},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;

pub(crate) use crate::domain::ErrorCode;
use crate::domain::{Answer, Answered};

/// The JSON body of every response.
#[derive(Debug, Serialize)]
pub(crate) struct Envelope<T: Serialize> {
    pub success: bool,
    #[serde(rename = "errorMsg", skip_serializing_if = "Option::is_none")]
    pub error_msg: Option<Cow<'static, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<&'static str>,
}

/// A successful answer: `{"success":true}` plus `data` when there is some.
#[derive(Debug)]
pub(crate) struct Reply<T: Serialize>(pub Option<T>);

impl<T: Serialize> IntoResponse for Reply<T> {
    fn into_response(self) -> Response {
        Json(Envelope {
            success: true,
            error_msg: None,
            data: self.0,
            total: None,
            code: None,
        })
        .into_response()
    }
}

/// A successful answer whose data is JSON text already (a cached value, see
/// [`crate::catalogue::Catalogue::shop_json`]): the envelope is written around the text without
/// decoding it, byte for byte what [`Reply`] writes for the decoded value.
#[derive(Debug)]
pub(crate) struct JsonReply(pub Arc<str>);

impl IntoResponse for JsonReply {
    fn into_response(self) -> Response {
        // The envelope up to its data, as `Envelope` writes it (`data` is its last field that a
        // success writes).
        static HEAD: LazyLock<String> = LazyLock::new(|| {
            let empty = serde_json::to_string(&Envelope {
                success: true,
                error_msg: None,
                data: Some(()),
                total: None,
                code: None,
            })
            .expect("an envelope serializes");
            empty
                .strip_suffix("null}")
                .expect("data is the envelope's last field")
                .to_owned()
        });
        let mut body = String::with_capacity(HEAD.len() + self.0.len() + 1);
        body.push_str(&HEAD);
        body.push_str(&self.0);
        body.push('}');
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response()
    }
}

/// What handlers return.
pub(crate) type ApiResult<T> = Result<Reply<T>, ApiError>;

/// `ok(data)`: success with data.
pub(crate) fn ok<T: Serialize>(data: T) -> ApiResult<T> {
    Ok(Reply(Some(data)))
}

/// `ok()`: success without data (`{"success":true}`).
pub(crate) fn ok_empty() -> ApiResult<()> {
    Ok(Reply(None))
}

/// An error answer: a code, a message for people, and (for 5xx) the logged cause.
#[derive(Debug)]
pub(crate) struct ApiError {
    code: ErrorCode,
    message: Cow<'static, str>,
    /// What the refusal can tell besides its message (e.g. the order a duplicate grab has).
    data: Option<Box<serde_json::Value>>,
    retry_after: Option<Duration>,
    source: Option<anyhow::Error>,
}

impl ApiError {
    fn new(code: ErrorCode, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
            retry_after: None,
            source: None,
        }
    }

    /// 400 with a message naming what is wrong.
    pub(crate) fn invalid(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    pub(crate) fn unauthorized() -> Self {
        Self::new(ErrorCode::Unauthorized, "请先登录 (login required)")
    }

    pub(crate) fn rate_limited(
        message: impl Into<Cow<'static, str>>,
        retry_after: Duration,
    ) -> Self {
        Self::new(ErrorCode::RateLimited, message).with_retry_after(retry_after)
    }

    /// Adds a `Retry-After` header (whole seconds, rounded up, at least 1).
    pub(crate) fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// 403: the route needs the admin token.
    pub(crate) fn admin_required() -> Self {
        Self::new(
            ErrorCode::AdminRequired,
            "需要管理员令牌 (this route needs the admin token in the x-admin-token header)",
        )
    }

    /// 404: no route has this path.
    pub(crate) fn no_route() -> Self {
        Self::new(ErrorCode::NotFound, "接口不存在 (no such route)")
    }

    /// 405: the route exists, not with this method.
    pub(crate) fn method_not_allowed() -> Self {
        Self::new(
            ErrorCode::MethodNotAllowed,
            "请求方法不支持 (method not allowed on this route)",
        )
    }

    /// 431: the request line and headers are over `max` bytes.
    pub(crate) fn headers_too_large(max: usize) -> Self {
        Self::new(
            ErrorCode::HeadersTooLarge,
            format!("请求头过大 (request head larger than {max} bytes)"),
        )
    }

    /// 503: the handler did not answer within `limit`.
    pub(crate) fn timeout(limit: Duration) -> Self {
        Self::new(
            ErrorCode::Timeout,
            format!(
                "请求超时，请稍后重试 (request took longer than {} ms)",
                limit.as_millis()
            ),
        )
    }

    /// 503: the session could not be looked up (the cause was logged where it failed).
    pub(crate) fn session_store_away() -> Self {
        Self::new(
            ErrorCode::Unavailable,
            "服务暂时不可用，请稍后重试 (session store unavailable, retry later)",
        )
    }

    /// 500 for a handler that panicked (the panic hook has printed it).
    pub(crate) fn panicked() -> Self {
        Self::new(ErrorCode::Internal, "服务器异常 (internal error)")
    }

    /// 500; the cause is logged, the client sees only "服务器异常".
    pub(crate) fn internal(source: impl Into<anyhow::Error>) -> Self {
        Self {
            source: Some(source.into()),
            ..Self::new(ErrorCode::Internal, "服务器异常 (internal error)")
        }
    }

    /// 503; the cause is logged.
    pub(crate) fn unavailable(what: &'static str, source: impl Into<anyhow::Error>) -> Self {
        Self {
            source: Some(source.into()),
            ..Self::new(
                ErrorCode::Unavailable,
                format!("服务暂时不可用，请稍后重试 ({what} unavailable, retry later)"),
            )
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.code.status();
        super::pipeline::record_code(self.code.as_str());
        match (&self.source, status.is_server_error()) {
            (Some(cause), true) if self.code == ErrorCode::Internal => {
                tracing::error!(code = self.code.as_str(), cause = ?cause, "request failed")
            }
            (Some(cause), _) => {
                tracing::warn!(code = self.code.as_str(), cause = %cause, "request failed")
            }
            _ => {}
        }
        let mut response = (
            status,
            Json(Envelope::<serde_json::Value> {
                success: false,
                error_msg: Some(self.message),
                data: self.data.map(|d| *d),
                total: None,
                code: Some(self.code.as_str()),
            }),
        )
            .into_response();
        if status == StatusCode::PAYLOAD_TOO_LARGE
            || status == StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        {
            // The rest of the body was never read (or the client is sending heads no one
            // should), so the connection cannot carry another request. Saying so keeps clients
            // from reusing it and racing the server's close.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if let Some(after) = self.retry_after {
            let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            if let Ok(v) = HeaderValue::from_str(&secs.max(1).to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        response
    }
}

/// Every error type answers for itself ([`Answered`]); a refusal that is a server error (503,
/// 507) still logs its cause.
impl<E: Answered> From<E> for ApiError {
    fn from(e: E) -> Self {
        match e.answer() {
            Answer::Refused(r) => {
                let source = r.code.status().is_server_error().then(|| e.into());
                Self {
                    code: r.code,
                    message: r.message,
                    data: r.data.map(Box::new),
                    retry_after: r.retry_after,
                    source,
                }
            }
            Answer::Unavailable(what) => ApiError::unavailable(what, e),
            Answer::Internal => ApiError::internal(e),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return ApiError::new(
                ErrorCode::PayloadTooLarge,
                "请求体过大 (request body too large)",
            );
        }
        let detail = match &r {
            JsonRejection::MissingJsonContentType(_) => {
                "expected a JSON body with `Content-Type: application/json`".to_owned()
            }
            other => other.body_text(),
        };
        ApiError::invalid(format!("请求体格式错误 (invalid JSON body: {detail})"))
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::invalid(format!("请求参数错误 (invalid query: {})", r.body_text()))
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::invalid(format!("路径参数错误 (invalid path: {})", r.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_omits_null_fields() {
        let ok = serde_json::to_value(Envelope::<()> {
            success: true,
            error_msg: None,
            data: None,
            total: None,
            code: None,
        })
        .unwrap();
        assert_eq!(ok, serde_json::json!({"success": true}));
    }

    #[tokio::test]
    async fn a_json_reply_is_the_reply_of_the_decoded_value() {
        let data = serde_json::json!({"id": 1, "name": "面馆\"一号\"", "x": 120.5, "tags": [1, 2]});
        let text: Arc<str> = Arc::from(serde_json::to_string(&data).unwrap());
        let (a, b) = (
            Reply(Some(data)).into_response(),
            JsonReply(text).into_response(),
        );
        assert_eq!(a.status(), b.status());
        assert_eq!(
            a.headers().get(header::CONTENT_TYPE),
            b.headers().get(header::CONTENT_TYPE)
        );
        let a = axum::body::to_bytes(a.into_body(), 1 << 16).await.unwrap();
        let b = axum::body::to_bytes(b.into_body(), 1 << 16).await.unwrap();
        assert_eq!(a, b);
    }

    #[tokio::test]
    async fn internal_errors_do_not_leak_their_cause() {
        let resp =
            ApiError::internal(anyhow::anyhow!("password=hunter2 at db:3306")).into_response();
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("\"code\":\"internal\""), "{text}");
    }

    #[tokio::test]
    async fn a_voucher_redis_keeps_losing_is_a_retryable_503() {
        let resp = ApiError::from(crate::seckill::SeckillError::NotLoaded).into_response();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(text.contains("\"code\":\"unavailable\""), "{text}");
    }

    #[tokio::test]
    async fn rate_limits_carry_retry_after() {
        let resp = ApiError::rate_limited("slow down", Duration::from_millis(1500)).into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "2");
    }
}
