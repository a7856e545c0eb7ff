//! The crate's error type.

use std::fmt;

/// Shorthand for `Result<T, hmdp_lock::Error>`.
///
/// ```
/// fn check() -> hmdp_lock::Result<()> {
///     Ok(())
/// }
/// assert!(check().is_ok());
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, in broad categories.
///
/// Match on it through [`Error::kind`]; new variants may be added in minor
/// releases, so keep a wildcard arm.
///
/// ```
/// use hmdp_lock::ErrorKind;
/// fn describe(kind: ErrorKind) -> &'static str {
///     match kind {
///         ErrorKind::Redis => "talk to Redis failed",
///         ErrorKind::InvalidArgument => "bad input",
///         _ => "something else",
///     }
/// }
/// assert_eq!(describe(ErrorKind::InvalidArgument), "bad input");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A Redis command or script failed (I/O, server error, timeout…).
    /// The underlying [`redis::RedisError`] is available via
    /// [`Error::redis_error`].
    Redis,
    /// An argument was rejected before anything was sent (empty lock name,
    /// zero lease, empty lock set, …).
    InvalidArgument,
    /// [`LockGuard::reenter`](crate::LockGuard::reenter) was called on a
    /// guard of a non-reentrant ([`LockKind::Simple`](crate::LockKind::Simple)) lock.
    NotReentrant,
    /// A script returned a reply of an unexpected shape (for example, the key
    /// holds a different type because a simple and a reentrant lock share a
    /// name).
    UnexpectedReply,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Redis => "redis error",
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::NotReentrant => "lock is not reentrant",
            ErrorKind::UnexpectedReply => "unexpected reply",
        })
    }
}

/// The error type of every fallible operation in this crate.
///
/// It is deliberately opaque: inspect it with [`kind`](Error::kind) and the
/// `is_*` helpers rather than by destructuring.
///
/// ```
/// # async fn demo(lock: hmdp_lock::Lock) {
/// match lock.lock().await {
///     Ok(guard) => drop(guard),
///     Err(e) if e.is_redis() => eprintln!("redis unavailable: {e}"),
///     Err(e) => eprintln!("other failure: {e}"),
/// }
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{kind}: {detail}")]
pub struct Error {
    kind: ErrorKind,
    detail: String,
    #[source]
    source: Option<redis::RedisError>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Error {
            kind,
            detail: detail.into(),
            source: None,
        }
    }

    pub(crate) fn invalid(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, detail)
    }

    pub(crate) fn reply(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::UnexpectedReply, detail)
    }

    /// A Redis call we gave up waiting for: kind [`ErrorKind::Redis`] with
    /// an I/O `TimedOut` source, so [`is_timeout`](Self::is_timeout) is true
    /// just as for redis-rs's own response timeouts.
    pub(crate) fn timed_out(detail: &str) -> Self {
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, detail.to_owned());
        let mut e = Error::from(redis::RedisError::from(io));
        e.detail = detail.to_owned();
        e
    }

    /// The broad category of this error.
    ///
    /// ```
    /// # fn f(e: hmdp_lock::Error) {
    /// if e.kind() == hmdp_lock::ErrorKind::Redis { /* retry later */ }
    /// # }
    /// ```
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// True if Redis itself failed (connection, server error, timeout).
    ///
    /// ```
    /// # fn f(e: hmdp_lock::Error) { let _ = e.is_redis(); }
    /// ```
    pub fn is_redis(&self) -> bool {
        self.kind == ErrorKind::Redis
    }

    /// True if an argument was rejected before contacting Redis.
    ///
    /// ```
    /// # fn f(e: hmdp_lock::Error) { let _ = e.is_invalid_argument(); }
    /// ```
    pub fn is_invalid_argument(&self) -> bool {
        self.kind == ErrorKind::InvalidArgument
    }

    /// True if re-entry was attempted on a non-reentrant lock.
    ///
    /// ```
    /// # fn f(e: hmdp_lock::Error) { let _ = e.is_not_reentrant(); }
    /// ```
    pub fn is_not_reentrant(&self) -> bool {
        self.kind == ErrorKind::NotReentrant
    }

    /// True if Redis replied with something the scripts never return.
    ///
    /// ```
    /// # fn f(e: hmdp_lock::Error) { let _ = e.is_unexpected_reply(); }
    /// ```
    pub fn is_unexpected_reply(&self) -> bool {
        self.kind == ErrorKind::UnexpectedReply
    }

    /// True if the underlying Redis error was a timeout — including an
    /// acquire call of [`Lock::try_lock`](crate::Lock::try_lock) that did
    /// not answer within the wait budget.
    ///
    /// ```
    /// # fn f(e: hmdp_lock::Error) { let _ = e.is_timeout(); }
    /// ```
    pub fn is_timeout(&self) -> bool {
        self.source.as_ref().is_some_and(|e| e.is_timeout())
    }

    /// True if the underlying Redis error was a dropped or refused connection.
    ///
    /// ```
    /// # fn f(e: hmdp_lock::Error) { let _ = e.is_connection_error(); }
    /// ```
    pub fn is_connection_error(&self) -> bool {
        self.source.as_ref().is_some_and(|e| {
            e.is_connection_dropped() || e.is_connection_refusal() || e.is_io_error()
        })
    }

    /// The underlying Redis error, if this error came from Redis.
    ///
    /// ```
    /// # fn f(e: hmdp_lock::Error) {
    /// if let Some(re) = e.redis_error() { eprintln!("code: {:?}", re.code()); }
    /// # }
    /// ```
    pub fn redis_error(&self) -> Option<&redis::RedisError> {
        self.source.as_ref()
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        let kind = if e.kind() == redis::ErrorKind::UnexpectedReturnType {
            ErrorKind::UnexpectedReply
        } else {
            ErrorKind::Redis
        };
        Error {
            kind,
            detail: e.to_string(),
            source: Some(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_match_kind() {
        let e = Error::invalid("empty name");
        assert!(e.is_invalid_argument());
        assert!(!e.is_redis());
        assert!(e.redis_error().is_none());
        assert_eq!(e.to_string(), "invalid argument: empty name");
    }

    #[test]
    fn timed_out_is_a_redis_timeout() {
        let e = Error::timed_out("acquire call outlived the wait budget");
        assert!(e.is_redis());
        assert!(e.is_timeout());
        assert_eq!(
            e.to_string(),
            "redis error: acquire call outlived the wait budget"
        );
    }
}
