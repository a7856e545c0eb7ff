//! The response envelope, the HTTP error type, and what each domain error and refusal is
//! answered with: every mapping from the services' errors to a code and status is here, none in
//! the resource files.
//!
//! Every answer is the original's `Result` JSON — `{success, errorMsg, data, total}` with null
//! fields omitted — plus, on failures, a stable machine-readable `code`. Status codes:
//! business refusals are HTTP 200 with `success:false` (as the original, so its pages show the
//! message); malformed input 400; missing or expired login 401; admin token missing 403;
//! rate limited 429 (with `Retry-After`); Redis or the database away 503; anything else 500 with
//! a generic message while the cause goes to the log, never to the client.

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

use crate::{
    activity::ActivityError,
    auth::{CodeError, CodeVerdict},
    catalogue::CatalogueError,
    domain::{LoginCodeError, NickNameError, PhoneError, ProfileError, VoucherOrderStatus},
    order_life::{Action, LifeError},
    seckill::{Refusal, SeckillError},
    social::SocialError,
    storage::StorageError,
    uploads::UploadError,
};

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

macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident => ($code:literal, $status:ident),)*) => {
        /// Stable, machine-readable error codes. The strings never change meaning.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum ErrorCode {
            $($(#[$doc])* $variant,)*
        }

        impl ErrorCode {
            /// The `code` field of the envelope.
            pub(crate) fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $code,)* }
            }

            /// The HTTP status this code is answered with.
            pub(crate) fn status(self) -> StatusCode {
                match self { $(ErrorCode::$variant => StatusCode::$status,)* }
            }

            /// Every code, for documentation and tests.
            pub(crate) const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];
        }
    };
}

error_codes! {
    /// The phone number does not follow the phone rule ("手机号格式错误").
    InvalidPhone => ("invalid_phone", OK),
    /// The login code is not six digits.
    InvalidCode => ("invalid_code", OK),
    /// The login code is wrong ("验证码错误").
    WrongCode => ("wrong_code", OK),
    /// There is no code for this phone: never sent, expired or already used.
    CodeExpired => ("code_expired", OK),
    /// Too many wrong tries (from this address, or for this phone): ask for a new code.
    CodeVoid => ("code_void", OK),
    /// Password login is not offered (the original never implemented it).
    PasswordLoginUnsupported => ("password_login_unsupported", OK),
    /// A shop update without an id ("店铺id不能为空").
    ShopIdRequired => ("shop_id_required", OK),
    /// No such shop ("店铺不存在！").
    ShopNotFound => ("shop_not_found", OK),
    /// The voucher is sold out ("库存不足").
    SoldOut => ("sold_out", OK),
    /// The user already bought this voucher ("不能重复下单").
    DuplicateOrder => ("duplicate_order", OK),
    /// The sale has not begun ("秒杀尚未开始").
    SeckillNotStarted => ("seckill_not_started", OK),
    /// The sale is over ("秒杀已经结束").
    SeckillEnded => ("seckill_ended", OK),
    /// No such flash-sale voucher on sale.
    VoucherNotFound => ("voucher_not_found", OK),
    /// No such order of this user.
    OrderNotFound => ("order_not_found", OK),
    /// The order was accepted but is not written yet: ask again in a moment (`Retry-After`).
    OrderPending => ("order_pending", OK),
    /// Paying an order that is not unpaid (`data` has its `status` and `statusName`).
    OrderNotPayable => ("order_not_payable", OK),
    /// Paying an order whose pay deadline has passed (it is being closed).
    PayExpired => ("pay_expired", OK),
    /// Cancelling an order that is neither unpaid nor cancelled (`data`: its status).
    OrderNotCancellable => ("order_not_cancellable", OK),
    /// Using an order that is neither paid nor used (`data`: its status).
    OrderNotUsable => ("order_not_usable", OK),
    /// Refunding an order that is neither paid nor refunding (`data`: its status).
    OrderNotRefundable => ("order_not_refundable", OK),
    /// A payment notice without a valid `x-pay-signature`.
    BadSignature => ("bad_signature", UNAUTHORIZED),
    /// A payment notice for an order that does not exist.
    UnknownOrder => ("unknown_order", NOT_FOUND),
    /// A payment notice whose `tradeNo` is not the order's payment.
    UnknownTrade => ("unknown_trade", CONFLICT),
    /// A payment notice whose `amount` is not the payment's (`data.expected`).
    WrongAmount => ("wrong_amount", CONFLICT),
    /// A payment notice that does not fit the payment (a refund nobody asked for; `data.payment`).
    UnexpectedNotice => ("unexpected_notice", CONFLICT),
    /// No such note ("笔记不存在").
    BlogNotFound => ("blog_not_found", OK),
    /// A note that breaks a rule: empty or too long title or content, too many photos, an
    /// unknown shop.
    InvalidBlog => ("invalid_blog", OK),
    /// Deleting a note someone else wrote.
    NotYourBlog => ("not_your_blog", OK),
    /// No such comment.
    CommentNotFound => ("comment_not_found", OK),
    /// A comment that breaks a rule: empty or too long content, a `parentId` or `answerId`
    /// that names no comment of the note (or names comments of two threads).
    InvalidComment => ("invalid_comment", OK),
    /// Deleting a comment someone else wrote, on a note someone else wrote.
    NotYourComment => ("not_your_comment", OK),
    /// No such user.
    UserNotFound => ("user_not_found", OK),
    /// Following oneself.
    FollowSelf => ("follow_self", OK),
    /// Following more users than `HMDP_FOLLOW_MAX` allows.
    FollowLimit => ("follow_limit", OK),
    /// An upload that is not an image (judged by its content).
    NotAnImage => ("not_an_image", OK),
    /// A photo name that is not one this service hands out ("错误的文件名称").
    InvalidFileName => ("invalid_file_name", OK),
    /// Deleting a photo someone else uploaded.
    NotYourFile => ("not_your_file", OK),
    /// Deleting one's photo that a published note uses.
    FileInUse => ("file_in_use", OK),
    /// An upload that is not `multipart/form-data`.
    UnsupportedMediaType => ("unsupported_media_type", UNSUPPORTED_MEDIA_TYPE),
    /// Malformed input: bad JSON, a missing field, a wrong type, a bad path or query value.
    InvalidRequest => ("invalid_request", BAD_REQUEST),
    /// A profile's nickname that is empty, longer than 32 characters or has control characters.
    InvalidNickName => ("invalid_nickname", BAD_REQUEST),
    /// A profile's icon that is not empty nor a photo the user uploaded and still has.
    InvalidIcon => ("invalid_icon", BAD_REQUEST),
    /// A profile's city or introduction too long for its column or with control characters, or
    /// a birthday that is not a date `YYYY-MM-DD` between 1900-01-01 and today.
    InvalidProfile => ("invalid_profile", BAD_REQUEST),
    /// No or expired login on a route that needs one.
    Unauthorized => ("unauthorized", UNAUTHORIZED),
    /// A catalogue-changing route without the right `x-admin-token`.
    AdminRequired => ("admin_required", FORBIDDEN),
    /// No such route.
    NotFound => ("not_found", NOT_FOUND),
    /// The route exists but not with this method.
    MethodNotAllowed => ("method_not_allowed", METHOD_NOT_ALLOWED),
    /// The request body is larger than the configured limit.
    PayloadTooLarge => ("payload_too_large", PAYLOAD_TOO_LARGE),
    /// The request line and headers are larger than the configured limit; the connection is
    /// closed.
    HeadersTooLarge => ("headers_too_large", REQUEST_HEADER_FIELDS_TOO_LARGE),
    /// Too many requests of this kind (e.g. login codes for one phone).
    RateLimited => ("rate_limited", TOO_MANY_REQUESTS),
    /// The user's photos or bytes of the day are spent (`HMDP_UPLOAD_USER_DAILY_*`); until
    /// midnight (`Retry-After`).
    UploadQuota => ("upload_quota", TOO_MANY_REQUESTS),
    /// The user's comments of the day are spent (`HMDP_COMMENT_USER_DAILY_COUNT`); until
    /// midnight (`Retry-After`).
    CommentQuota => ("comment_quota", TOO_MANY_REQUESTS),
    /// The upload folder's free space is below `HMDP_UPLOAD_MIN_FREE_BYTES`: uploads wait.
    DiskFull => ("disk_full", INSUFFICIENT_STORAGE),
    /// This client address used its wrong login-code tries of the day across all phones
    /// (`HMDP_CODE_IP_WRONG_DAILY_LIMIT`).
    TooManyWrongCodes => ("too_many_wrong_codes", TOO_MANY_REQUESTS),
    /// The service sent its login codes for this hour (`HMDP_SMS_HOURLY_LIMIT`).
    SmsBudgetSpent => ("sms_budget_spent", SERVICE_UNAVAILABLE),
    /// Redis or the database cannot be reached right now; retry later.
    Unavailable => ("unavailable", SERVICE_UNAVAILABLE),
    /// The order was accepted (`data` names it) but the Redis replicas did not confirm it in
    /// time (`HMDP_REDIS_WAIT_REPLICAS`): query it before buying again.
    NotReplicated => ("not_replicated", SERVICE_UNAVAILABLE),
    /// The request took longer than the configured timeout.
    Timeout => ("timeout", SERVICE_UNAVAILABLE),
    /// A bug or unexpected failure; details are in the server log.
    Internal => ("internal", INTERNAL_SERVER_ERROR),
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
    pub(crate) fn new(code: ErrorCode, message: impl Into<Cow<'static, str>>) -> Self {
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

    /// Adds `data` to the failure envelope (left out when `None`).
    pub(crate) fn with_data(mut self, data: Option<serde_json::Value>) -> Self {
        self.data = data.map(Box::new);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.code.status();
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

// What the services' errors and refusals are answered with.

impl From<StorageError> for ApiError {
    fn from(e: StorageError) -> Self {
        if e.is_unavailable() {
            ApiError::unavailable("database", e)
        } else {
            ApiError::internal(e)
        }
    }
}

impl From<CatalogueError> for ApiError {
    fn from(e: CatalogueError) -> Self {
        use CatalogueError as E;
        if let Some(storage) = e.storage() {
            if storage.is_unavailable() {
                return ApiError::unavailable("database", e);
            }
            return ApiError::internal(e);
        }
        match &e {
            E::Cache(c) if c.is_redis_unavailable() || c.is_overloaded() => {
                ApiError::unavailable("redis", e)
            }
            E::Redis(r) if hmdp_lock::is_unavailable(r) => ApiError::unavailable("redis", e),
            _ => ApiError::internal(e),
        }
    }
}

impl From<SeckillError> for ApiError {
    fn from(e: SeckillError) -> Self {
        use SeckillError as E;
        /// What is away, if that is why it failed.
        fn away(e: &E) -> Option<&'static str> {
            match e {
                E::Storage(s) if s.is_unavailable() => Some("database"),
                E::Redis(r) if hmdp_lock::is_unavailable(r) => Some("redis"),
                E::Lock(l) if l.is_connection_error() || l.is_timeout() => Some("redis"),
                E::Id(i) if i.is_redis() => Some("redis"),
                // Redis keeps losing the voucher's keys: retryable, like Redis being away.
                E::NotLoaded => Some("redis"),
                E::Shared(inner) => away(inner),
                _ => None,
            }
        }
        if let E::NotReplicated { order_id, .. } = e {
            return Self {
                source: Some(e.into()),
                ..ApiError::new(
                    ErrorCode::NotReplicated,
                    "订单已受理，但尚未确认，请稍后查询订单 (order accepted but not yet confirmed \
                     by the Redis replicas: query it before buying again)",
                )
            }
            .with_data(Some(order_data(order_id)));
        }
        match away(&e) {
            Some(what) => ApiError::unavailable(what, e),
            None => ApiError::internal(e),
        }
    }
}

impl From<LifeError> for ApiError {
    fn from(e: LifeError) -> Self {
        use LifeError as E;
        let status_data = |s: VoucherOrderStatus| {
            Some(serde_json::json!({"status": s.code(), "statusName": s.name()}))
        };
        match e {
            E::Storage(s) => s.into(),
            E::Seckill(s) => s.into(),
            E::Redis(r) => r.into(),
            E::NotFound => ApiError::new(
                ErrorCode::OrderNotFound,
                "订单不存在 (no such order of yours)",
            ),
            E::Pending => ApiError::new(
                ErrorCode::OrderPending,
                "订单处理中，请稍后再试 (the order is being written: retry in a moment)",
            )
            .with_retry_after(Duration::from_secs(1)),
            E::Refused { action, status } => {
                let (code, what) = match action {
                    Action::Pay => (
                        ErrorCode::OrderNotPayable,
                        "订单无法支付 (only an unpaid order can be paid)",
                    ),
                    Action::Cancel => (
                        ErrorCode::OrderNotCancellable,
                        "订单无法取消 (only an unpaid order can be cancelled)",
                    ),
                    Action::Use => (
                        ErrorCode::OrderNotUsable,
                        "订单无法核销 (only a paid order can be used)",
                    ),
                    Action::Refund => (
                        ErrorCode::OrderNotRefundable,
                        "订单无法退款 (only a paid order can be refunded)",
                    ),
                };
                ApiError::new(code, what).with_data(status_data(status))
            }
            E::Expired => ApiError::new(
                ErrorCode::PayExpired,
                "订单已超时，无法支付 (the pay deadline has passed; the order is being closed)",
            ),
            E::BadSignature => ApiError::new(
                ErrorCode::BadSignature,
                "签名错误 (missing or wrong x-pay-signature)",
            ),
            E::InvalidNotice(m) => ApiError::invalid(m),
            E::UnknownOrder => ApiError::new(ErrorCode::UnknownOrder, "no such order"),
            E::UnknownTrade => ApiError::new(
                ErrorCode::UnknownTrade,
                "tradeNo is not this order's payment",
            ),
            E::WrongAmount(expected) => ApiError::new(
                ErrorCode::WrongAmount,
                format!("amount is not the payment's ({expected})"),
            )
            .with_data(Some(serde_json::json!({"expected": expected}))),
            E::UnexpectedNotice(state) => ApiError::new(
                ErrorCode::UnexpectedNotice,
                format!(
                    "the notice does not fit the payment, which is {}",
                    state.as_str()
                ),
            )
            .with_data(Some(serde_json::json!({"payment": state.as_str()}))),
        }
    }
}

/// An order's id as `data` of an answer: as a number and, for JavaScript, as a string.
pub(super) fn order_data(id: i64) -> serde_json::Value {
    serde_json::json!({"id": id, "idStr": id.to_string()})
}

impl From<redis::RedisError> for ApiError {
    fn from(e: redis::RedisError) -> Self {
        if hmdp_lock::is_unavailable(&e) {
            ApiError::unavailable("redis", e)
        } else {
            ApiError::internal(e)
        }
    }
}

impl From<ActivityError> for ApiError {
    fn from(e: ActivityError) -> Self {
        match e {
            ActivityError::Redis(r) => r.into(),
            ActivityError::Busy { retry_after } => ApiError::rate_limited(
                "请求过于频繁，请稍后再试 (visitor counts are busy)",
                retry_after,
            ),
        }
    }
}

impl From<PhoneError> for ApiError {
    fn from(e: PhoneError) -> Self {
        ApiError::new(ErrorCode::InvalidPhone, e.to_string())
    }
}

impl From<LoginCodeError> for ApiError {
    fn from(e: LoginCodeError) -> Self {
        ApiError::new(ErrorCode::InvalidCode, e.to_string())
    }
}

/// A login code that is not sent: the phone's cooldown, a daily cap or the hourly budget.
impl From<CodeError> for ApiError {
    fn from(e: CodeError) -> Self {
        match e {
            CodeError::Cooldown { retry_after } => ApiError::rate_limited(
                format!(
                    "验证码发送过于频繁，请 {} 秒后再试 (too many codes: retry in {} s)",
                    ceil_secs(retry_after),
                    ceil_secs(retry_after)
                ),
                retry_after,
            ),
            CodeError::DailyLimit { retry_after } => ApiError::rate_limited(
                format!(
                    "今日验证码次数已用完 (daily code limit reached: retry in {} s)",
                    ceil_secs(retry_after)
                ),
                retry_after,
            ),
            CodeError::AddressDailyLimit { retry_after } => ApiError::rate_limited(
                format!(
                    "今日从此网络获取验证码的次数已用完 (daily code limit for this phone from this address reached: retry in {} s)",
                    ceil_secs(retry_after)
                ),
                retry_after,
            ),
            CodeError::SmsBudgetSpent { retry_after } => ApiError::new(
                ErrorCode::SmsBudgetSpent,
                format!(
                    "短信发送量已达上限，请稍后再试 (the service's login codes for this hour are sent: retry in {} s)",
                    ceil_secs(retry_after)
                ),
            )
            .with_retry_after(retry_after),
            CodeError::Redis(e) => e.into(),
        }
    }
}

/// `Ok` when the login code matched, else the refusal of the login.
pub(super) fn accept_code(verdict: CodeVerdict) -> Result<(), ApiError> {
    match verdict {
        CodeVerdict::Match => Ok(()),
        CodeVerdict::Wrong { tries_left } => Err(ApiError::new(
            ErrorCode::WrongCode,
            format!("验证码错误 (wrong code: {tries_left} tries left)"),
        )),
        CodeVerdict::Exhausted => Err(ApiError::new(
            ErrorCode::CodeVoid,
            "验证码错误次数过多，请重新获取 (too many wrong tries from this address: request a new code)",
        )),
        CodeVerdict::Void => Err(ApiError::new(
            ErrorCode::CodeVoid,
            "验证码错误次数过多，请重新获取 (too many wrong tries for this phone: its codes are void, request a new code)",
        )),
        CodeVerdict::Missing => Err(ApiError::new(
            ErrorCode::CodeExpired,
            "验证码已失效，请重新获取 (no valid code for this phone: request one)",
        )),
        CodeVerdict::AddressSpent { retry_after } => Err(ApiError::new(
            ErrorCode::TooManyWrongCodes,
            format!(
                "验证码错误次数过多，请稍后再试 (too many wrong codes from this address: retry in {} s)",
                ceil_secs(retry_after)
            ),
        )
        .with_retry_after(retry_after)),
    }
}

/// Whole seconds for a message, rounded up, at least 1.
fn ceil_secs(d: Duration) -> u64 {
    (d.as_millis().div_ceil(1000) as u64).max(1)
}

/// A refused grab: the original's messages, each with its own code.
impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::SoldOut => ApiError::new(ErrorCode::SoldOut, "库存不足"),
            // With the order the user has: a retry after a lost answer finds it.
            Refusal::Duplicate(prior) => ApiError::new(ErrorCode::DuplicateOrder, "不能重复下单")
                .with_data(prior.map(order_data)),
            Refusal::NotStarted => ApiError::new(ErrorCode::SeckillNotStarted, "秒杀尚未开始"),
            Refusal::Ended => ApiError::new(ErrorCode::SeckillEnded, "秒杀已经结束"),
            Refusal::UnknownVoucher => ApiError::new(
                ErrorCode::VoucherNotFound,
                "优惠券不存在 (no flash-sale voucher with this id)",
            ),
        }
    }
}

impl From<SocialError> for ApiError {
    fn from(e: SocialError) -> Self {
        match e {
            SocialError::Storage(s) => s.into(),
            SocialError::Redis(r) => r.into(),
            SocialError::Catalogue(c) => c.into(),
            SocialError::BlogNotFound => ApiError::new(ErrorCode::BlogNotFound, "笔记不存在"),
            SocialError::InvalidBlog(msg) => ApiError::new(ErrorCode::InvalidBlog, msg),
            SocialError::NotYourBlog => ApiError::new(
                ErrorCode::NotYourBlog,
                "只能删除自己的笔记 (only the author may delete a note)",
            ),
            SocialError::CommentNotFound => {
                ApiError::new(ErrorCode::CommentNotFound, "评论不存在 (no such comment)")
            }
            SocialError::InvalidComment(msg) => ApiError::new(ErrorCode::InvalidComment, msg),
            SocialError::NotYourComment => ApiError::new(
                ErrorCode::NotYourComment,
                "只能删除自己的评论或自己笔记下的评论 (only the comment's author or the note's \
                 may delete a comment)",
            ),
            SocialError::CommentQuota { count, retry_after } => ApiError::new(
                ErrorCode::CommentQuota,
                format!("今日评论已达上限 (daily comment quota spent: {count} comments a day)"),
            )
            .with_retry_after(retry_after),
            SocialError::UserNotFound => {
                ApiError::new(ErrorCode::UserNotFound, "用户不存在 (no such user)")
            }
            SocialError::FollowSelf => ApiError::new(
                ErrorCode::FollowSelf,
                "不能关注自己 (you cannot follow yourself)",
            ),
            SocialError::LikesNotLoaded => ApiError::unavailable("redis", e),
            SocialError::FollowLimit(max) => ApiError::new(
                ErrorCode::FollowLimit,
                format!("关注人数已达上限 (you follow {max} users, the most allowed)"),
            ),
        }
    }
}

impl From<UploadError> for ApiError {
    fn from(e: UploadError) -> Self {
        match e {
            UploadError::NotAnImage => ApiError::new(
                ErrorCode::NotAnImage,
                "只能上传图片 (only JPEG, PNG, GIF or WebP images, judged by their content)",
            ),
            UploadError::TooLarge { max } => ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("图片过大 (photo larger than {max} bytes)"),
            ),
            UploadError::BadBody(detail) => ApiError::invalid(format!(
                "上传内容错误 (unreadable multipart body: {detail})"
            )),
            UploadError::InvalidName(_) => {
                ApiError::new(ErrorCode::InvalidFileName, "错误的文件名称")
            }
            UploadError::NotYours => ApiError::new(
                ErrorCode::NotYourFile,
                "只能删除自己上传且未发布的图片 (only the uploader may delete a photo, until a note uses it)",
            ),
            UploadError::InUse => ApiError::new(
                ErrorCode::FileInUse,
                "图片已被发布的笔记使用，不能删除 (a published note uses this photo)",
            ),
            UploadError::QuotaExceeded {
                count,
                bytes,
                retry_after,
            } => ApiError::new(
                ErrorCode::UploadQuota,
                format!(
                    "今日上传已达上限 (daily upload quota spent: {count} photos or {bytes} bytes a day)"
                ),
            )
            .with_retry_after(retry_after),
            UploadError::DiskFull => ApiError::new(
                ErrorCode::DiskFull,
                "存储空间不足，请稍后再试 (no room for photos right now, retry later)",
            ),
            UploadError::Redis(r) => r.into(),
            UploadError::Storage(s) => s.into(),
            e => ApiError::internal(e),
        }
    }
}

impl From<NickNameError> for ApiError {
    fn from(e: NickNameError) -> Self {
        ApiError::new(ErrorCode::InvalidNickName, e.to_string())
    }
}

impl From<ProfileError> for ApiError {
    fn from(e: ProfileError) -> Self {
        ApiError::new(ErrorCode::InvalidProfile, e.0)
    }
}

/// A photo that cannot become the user's icon: not a photo name, or not the user's to take.
pub(super) fn refuse_icon(e: UploadError) -> ApiError {
    match e {
        UploadError::InvalidName(_) | UploadError::NotYours => ApiError::new(
            ErrorCode::InvalidIcon,
            "头像只能是自己上传的图片 (icon must be empty or a photo you uploaded: /imgs/blogs/…)",
        ),
        e => e.into(),
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
    fn error_codes_are_unique_snake_case_strings() {
        let mut seen = std::collections::HashSet::new();
        for c in ErrorCode::ALL {
            let s = c.as_str();
            assert!(seen.insert(s), "duplicate code {s}");
            assert!(
                s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{s}"
            );
        }
    }

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
