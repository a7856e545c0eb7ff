//! How the service says no: every stable error code (its string, its HTTP status and the
//! operations that answer it, in one table), and [`Answered`], which each error type implements
//! beside its own definition to say which code and message it is answered with.
//!
//! The table lives here, below every feature, so that an error type can name its code where it
//! is defined (imports only go down); `http` turns an [`Answer`] into the envelope and the
//! OpenAPI document reads the operations from the table.

use std::{borrow::Cow, time::Duration};

use axum::http::StatusCode;

/// Which operations answer a code, as the OpenAPI document names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operations {
    /// Any operation: a failure no handler can rule out (bad input, Redis away, a bug).
    Any,
    /// Every operation that needs a login.
    Session,
    /// Every operation that needs the admin token.
    Admin,
    /// Every operation that reads a body.
    Body,
    /// These operations only, each `"<METHOD> <path>"` (`"POST /voucher-order/seckill/{id}"`).
    Only(&'static [&'static str]),
}

macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident => ($code:literal, $status:ident, $ops:expr),)*) => {
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

            /// The operations that can answer this code.
            pub(crate) fn operations(self) -> Operations {
                #[allow(unused_imports)]
                use Operations::*;
                match self { $(ErrorCode::$variant => $ops,)* }
            }

            /// Every code, for documentation and tests.
            pub(crate) const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];
        }
    };
}

/// The operations of an order that is already written.
const ORDER_MOVES: &[&str] = &[
    "GET /voucher-order/{id}",
    "POST /voucher-order/{id}/pay",
    "POST /voucher-order/{id}/cancel",
    "POST /voucher-order/{id}/use",
    "POST /voucher-order/{id}/refund",
];
const GRAB: &[&str] = &["POST /voucher-order/seckill/{id}"];
const LOGIN: &[&str] = &["POST /user/login"];
const PAY_NOTICE: &[&str] = &["POST /pay/notify"];
const UPLOAD: &[&str] = &["POST /upload/blog"];
const PHOTO_DELETE: &[&str] = &["GET /upload/blog/delete"];
const PROFILE: &[&str] = &["PUT /user/info"];
const FOLLOW: &[&str] = &["PUT /follow/{id}/{isFollow}"];
const COMMENT: &[&str] = &["POST /blog/{id}/comments"];
const COMMENT_DELETE: &[&str] = &["DELETE /blog/comments/{id}"];

error_codes! {
    /// The phone number does not follow the phone rule ("手机号格式错误").
    InvalidPhone => ("invalid_phone", OK, Only(&["POST /user/code", "POST /user/login"])),
    /// The login code is not six digits.
    InvalidCode => ("invalid_code", OK, Only(LOGIN)),
    /// The login code is wrong ("验证码错误").
    WrongCode => ("wrong_code", OK, Only(LOGIN)),
    /// There is no code for this phone: never sent, expired or already used.
    CodeExpired => ("code_expired", OK, Only(LOGIN)),
    /// Too many wrong tries (from this address, or for this phone): ask for a new code.
    CodeVoid => ("code_void", OK, Only(LOGIN)),
    /// Password login is not offered (the original never implemented it).
    PasswordLoginUnsupported => ("password_login_unsupported", OK, Only(LOGIN)),
    /// A shop update without an id ("店铺id不能为空").
    ShopIdRequired => ("shop_id_required", OK, Only(&["PUT /shop"])),
    /// No such shop ("店铺不存在！").
    ShopNotFound => ("shop_not_found", OK,
        Only(&["GET /shop/{id}", "PUT /shop", "POST /voucher", "POST /voucher/seckill"])),
    /// The voucher is sold out ("库存不足").
    SoldOut => ("sold_out", OK, Only(GRAB)),
    /// The user already bought this voucher ("不能重复下单").
    DuplicateOrder => ("duplicate_order", OK, Only(GRAB)),
    /// The sale has not begun ("秒杀尚未开始").
    SeckillNotStarted => ("seckill_not_started", OK, Only(GRAB)),
    /// The sale is over ("秒杀已经结束").
    SeckillEnded => ("seckill_ended", OK, Only(GRAB)),
    /// No such flash-sale voucher on sale.
    VoucherNotFound => ("voucher_not_found", OK,
        Only(&["POST /voucher-order/seckill/{id}", "GET /voucher/seckill/{id}/stats"])),
    /// No such order of this user.
    OrderNotFound => ("order_not_found", OK, Only(ORDER_MOVES)),
    /// The order was accepted but is not written yet: ask again in a moment (`Retry-After`).
    OrderPending => ("order_pending", OK, Only(ORDER_MOVES)),
    /// Paying an order that is not unpaid (`data` has its `status` and `statusName`).
    OrderNotPayable => ("order_not_payable", OK, Only(&["POST /voucher-order/{id}/pay"])),
    /// Paying an order whose pay deadline has passed (it is being closed).
    PayExpired => ("pay_expired", OK, Only(&["POST /voucher-order/{id}/pay"])),
    /// Cancelling an order that is neither unpaid nor cancelled (`data`: its status).
    OrderNotCancellable => ("order_not_cancellable", OK,
        Only(&["POST /voucher-order/{id}/cancel"])),
    /// Using an order that is neither paid nor used (`data`: its status).
    OrderNotUsable => ("order_not_usable", OK, Only(&["POST /voucher-order/{id}/use"])),
    /// Refunding an order that is neither paid nor refunding (`data`: its status).
    OrderNotRefundable => ("order_not_refundable", OK,
        Only(&["POST /voucher-order/{id}/refund"])),
    /// A payment notice without a valid `x-pay-signature`.
    BadSignature => ("bad_signature", UNAUTHORIZED, Only(PAY_NOTICE)),
    /// A payment notice for an order that does not exist.
    UnknownOrder => ("unknown_order", NOT_FOUND, Only(PAY_NOTICE)),
    /// A payment notice whose `tradeNo` is not the order's payment.
    UnknownTrade => ("unknown_trade", CONFLICT, Only(PAY_NOTICE)),
    /// A payment notice whose `amount` is not the payment's (`data.expected`).
    WrongAmount => ("wrong_amount", CONFLICT, Only(PAY_NOTICE)),
    /// A payment notice that does not fit the payment (a refund nobody asked for; `data.payment`).
    UnexpectedNotice => ("unexpected_notice", CONFLICT, Only(PAY_NOTICE)),
    /// No such note ("笔记不存在").
    BlogNotFound => ("blog_not_found", OK, Only(&[
        "GET /blog/{id}", "DELETE /blog/{id}", "PUT /blog/like/{id}", "GET /blog/likes/{id}",
        "GET /blog/{id}/comments", "POST /blog/{id}/comments",
    ])),
    /// A note that breaks a rule: empty or too long title or content, too many photos, an
    /// unknown shop.
    InvalidBlog => ("invalid_blog", OK, Only(&["POST /blog"])),
    /// Deleting a note someone else wrote.
    NotYourBlog => ("not_your_blog", OK, Only(&["DELETE /blog/{id}"])),
    /// No such comment.
    CommentNotFound => ("comment_not_found", OK, Only(COMMENT_DELETE)),
    /// A comment that breaks a rule: empty or too long content, a `parentId` or `answerId`
    /// that names no comment of the note (or names comments of two threads).
    InvalidComment => ("invalid_comment", OK, Only(COMMENT)),
    /// Deleting a comment someone else wrote, on a note someone else wrote.
    NotYourComment => ("not_your_comment", OK, Only(COMMENT_DELETE)),
    /// No such user.
    UserNotFound => ("user_not_found", OK, Only(&[
        "GET /user/{id}", "GET /user/info/{id}", "PUT /user/info", "PUT /follow/{id}/{isFollow}",
    ])),
    /// Following oneself.
    FollowSelf => ("follow_self", OK, Only(FOLLOW)),
    /// Following more users than `HMDP_FOLLOW_MAX` allows.
    FollowLimit => ("follow_limit", OK, Only(FOLLOW)),
    /// An upload that is not an image (judged by its content).
    NotAnImage => ("not_an_image", OK, Only(UPLOAD)),
    /// A photo name that is not one this service hands out ("错误的文件名称").
    InvalidFileName => ("invalid_file_name", OK, Only(PHOTO_DELETE)),
    /// Deleting a photo someone else uploaded.
    NotYourFile => ("not_your_file", OK, Only(PHOTO_DELETE)),
    /// Deleting one's photo that a published note uses.
    FileInUse => ("file_in_use", OK, Only(PHOTO_DELETE)),
    /// An upload that is not `multipart/form-data`.
    UnsupportedMediaType => ("unsupported_media_type", UNSUPPORTED_MEDIA_TYPE, Only(UPLOAD)),
    /// Malformed input: bad JSON, a missing field, a wrong type, a bad path or query value.
    InvalidRequest => ("invalid_request", BAD_REQUEST, Any),
    /// A profile's nickname that is empty, longer than 32 characters or has control characters.
    InvalidNickName => ("invalid_nickname", BAD_REQUEST, Only(PROFILE)),
    /// A profile's icon that is not empty nor a photo the user uploaded and still has.
    InvalidIcon => ("invalid_icon", BAD_REQUEST, Only(PROFILE)),
    /// A profile's city or introduction too long for its column or with control characters, or
    /// a birthday that is not a date `YYYY-MM-DD` between 1900-01-01 and today.
    InvalidProfile => ("invalid_profile", BAD_REQUEST, Only(PROFILE)),
    /// No or expired login on a route that needs one.
    Unauthorized => ("unauthorized", UNAUTHORIZED, Session),
    /// A catalogue-changing route without the right `x-admin-token`.
    AdminRequired => ("admin_required", FORBIDDEN, Admin),
    /// No such route.
    NotFound => ("not_found", NOT_FOUND, Any),
    /// The route exists but not with this method.
    MethodNotAllowed => ("method_not_allowed", METHOD_NOT_ALLOWED, Any),
    /// The request body is larger than the configured limit.
    PayloadTooLarge => ("payload_too_large", PAYLOAD_TOO_LARGE, Body),
    /// The request line and headers are larger than the configured limit; the connection is
    /// closed.
    HeadersTooLarge => ("headers_too_large", REQUEST_HEADER_FIELDS_TOO_LARGE, Any),
    /// Too many requests of this kind (e.g. login codes for one phone).
    RateLimited => ("rate_limited", TOO_MANY_REQUESTS, Any),
    /// The user's photos or bytes of the day are spent (`HMDP_UPLOAD_USER_DAILY_*`); until
    /// midnight (`Retry-After`).
    UploadQuota => ("upload_quota", TOO_MANY_REQUESTS, Only(UPLOAD)),
    /// The user's comments of the day are spent (`HMDP_COMMENT_USER_DAILY_COUNT`); until
    /// midnight (`Retry-After`).
    CommentQuota => ("comment_quota", TOO_MANY_REQUESTS, Only(COMMENT)),
    /// The upload folder's free space is below `HMDP_UPLOAD_MIN_FREE_BYTES`: uploads wait.
    DiskFull => ("disk_full", INSUFFICIENT_STORAGE, Only(UPLOAD)),
    /// This client address used its wrong login-code tries of the day across all phones
    /// (`HMDP_CODE_IP_WRONG_DAILY_LIMIT`).
    TooManyWrongCodes => ("too_many_wrong_codes", TOO_MANY_REQUESTS, Only(LOGIN)),
    /// The service sent its login codes for this hour (`HMDP_SMS_HOURLY_LIMIT`).
    SmsBudgetSpent => ("sms_budget_spent", SERVICE_UNAVAILABLE, Only(&["POST /user/code"])),
    /// Redis or the database cannot be reached right now; retry later.
    Unavailable => ("unavailable", SERVICE_UNAVAILABLE, Any),
    /// The order was accepted (`data` names it) but the Redis replicas did not confirm it in
    /// time (`HMDP_REDIS_WAIT_REPLICAS`): query it before buying again.
    NotReplicated => ("not_replicated", SERVICE_UNAVAILABLE, Only(GRAB)),
    /// The request took longer than the configured timeout.
    Timeout => ("timeout", SERVICE_UNAVAILABLE, Any),
    /// A bug or unexpected failure; details are in the server log.
    Internal => ("internal", INTERNAL_SERVER_ERROR, Any),
}

/// A refusal as the client sees it: its code, a message for people, and what else it can tell.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) code: ErrorCode,
    pub(crate) message: Cow<'static, str>,
    /// `data` of the failure envelope (e.g. the order a duplicate grab already has).
    pub(crate) data: Option<serde_json::Value>,
    /// When to ask again (the `Retry-After` header).
    pub(crate) retry_after: Option<Duration>,
}

impl Refused {
    pub(crate) fn new(code: ErrorCode, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
            retry_after: None,
        }
    }

    /// With `data` in the envelope.
    pub(crate) fn with_data(mut self, data: serde_json::Value) -> Self {
        self.data = Some(data);
        self
    }

    /// With a `Retry-After`.
    pub(crate) fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }
}

/// What an error is answered with.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A refusal: the client is told why, in the error type's own words.
    Refused(Refused),
    /// Redis or the database cannot be reached (`"redis"`, `"database"`): 503 `unavailable`.
    Unavailable(&'static str),
    /// Anything else: 500 `internal`; the cause goes to the log, never to the client.
    Internal,
}

impl From<Refused> for Answer {
    fn from(r: Refused) -> Self {
        Answer::Refused(r)
    }
}

/// An error type that knows what it is answered with: implemented beside each error type, so
/// a new refusal touches its error type and, for a new code, the table above.
pub(crate) trait Answered: std::error::Error + Send + Sync + 'static {
    fn answer(&self) -> Answer;
}

/// Redis errors from anywhere: away (connection, timeout, failover) or a bug.
impl Answered for redis::RedisError {
    fn answer(&self) -> Answer {
        if hmdp_lock::is_unavailable(self) {
            Answer::Unavailable("redis")
        } else {
            Answer::Internal
        }
    }
}

/// An order's id as `data` of an answer: as a number and, for JavaScript, as a string.
pub(crate) fn order_data(id: i64) -> serde_json::Value {
    serde_json::json!({"id": id, "idStr": id.to_string()})
}

/// Whole seconds for a message, rounded up, at least 1.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    (d.as_millis().div_ceil(1000) as u64).max(1)
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
    fn every_operation_named_is_a_method_and_a_path() {
        for c in ErrorCode::ALL {
            if let Operations::Only(ops) = c.operations() {
                assert!(!ops.is_empty(), "{}", c.as_str());
                for op in ops {
                    let (method, path) = op.split_once(' ').expect("METHOD /path");
                    assert!(
                        ["GET", "POST", "PUT", "DELETE"].contains(&method) && path.starts_with('/'),
                        "{}: {op}",
                        c.as_str()
                    );
                }
            }
        }
    }
}
