//! The crate's error type: opaque, cloneable (one failed load answers every waiting caller),
//! classified by [`ErrorKind`].

use std::{fmt, sync::Arc};

/// What kind of failure an [`Error`] is.
///
/// ```
/// use hmdp_cache::{Error, ErrorKind};
/// // How a service might answer each kind.
/// fn status(e: &Error) -> u16 {
///     match e.kind() {
///         ErrorKind::RedisUnavailable | ErrorKind::Overloaded => 503,
///         _ => 500,
///     }
/// }
/// assert_eq!(status(&Error::loader("database down")), 500);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Redis could not be reached or did not answer in time.
    RedisUnavailable,
    /// Redis answered with an error (a bug, a wrong type at the key, …).
    Redis,
    /// The distributed lock failed (other than by Redis being away).
    Lock,
    /// A cached value could not be encoded or decoded.
    Serde,
    /// The loader (your database call) failed.
    Loader,
    /// Redis is away and the fallback to the loader is at its concurrency limit.
    Overloaded,
    /// An invalid argument or configuration (e.g. a Bloom filter too large for one bitmap).
    InvalidArgument,
    /// A Bloom filter in Redis kept being replaced by other instances during one operation,
    /// more often than the operation retries.
    ConfigMismatch,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::RedisUnavailable => "redis unavailable",
            ErrorKind::Redis => "redis error",
            ErrorKind::Lock => "lock error",
            ErrorKind::Serde => "serialization error",
            ErrorKind::Loader => "loader failed",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::ConfigMismatch => "config mismatch",
        })
    }
}

/// An error of the cache client.
///
/// ```
/// use hmdp_cache::{Error, ErrorKind};
/// let e = Error::loader("database down");
/// assert_eq!(e.kind(), ErrorKind::Loader);
/// assert!(!e.is_redis_unavailable());
/// ```
#[derive(Clone)]
pub struct Error {
    kind: ErrorKind,
    detail: Arc<dyn std::error::Error + Send + Sync>,
}

/// Result alias of the crate.
///
/// ```
/// fn check(n: u32) -> hmdp_cache::Result<u32> {
///     if n == 0 { return Err(hmdp_cache::Error::loader("zero")); }
///     Ok(n)
/// }
/// assert!(check(0).is_err());
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn new(
        kind: ErrorKind,
        detail: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self {
            kind,
            detail: Arc::from(detail.into()),
        }
    }

    /// Wraps a loader failure.
    ///
    /// ```
    /// let e = hmdp_cache::Error::loader("no connection");
    /// assert!(e.to_string().contains("no connection"));
    /// ```
    pub fn loader(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::new(ErrorKind::Loader, e)
    }

    /// The kind of failure.
    ///
    /// ```
    /// # let e = hmdp_cache::Error::loader("x");
    /// if e.kind() == hmdp_cache::ErrorKind::Loader { /* database trouble */ }
    /// ```
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// True when Redis is away (connection refused, dropped, timed out): retry later.
    ///
    /// ```
    /// # let e = hmdp_cache::Error::loader("x");
    /// assert!(!e.is_redis_unavailable());
    /// ```
    pub fn is_redis_unavailable(&self) -> bool {
        self.kind == ErrorKind::RedisUnavailable
    }

    /// True when the loader failed; [`Error::loader_error`] gives its error.
    ///
    /// ```
    /// # let e = hmdp_cache::Error::loader("x");
    /// assert!(e.is_loader());
    /// ```
    pub fn is_loader(&self) -> bool {
        self.kind == ErrorKind::Loader
    }

    /// True when the Redis-down fallback refused the call to protect the database.
    ///
    /// ```
    /// # let e = hmdp_cache::Error::loader("x");
    /// assert!(!e.is_overloaded());
    /// ```
    pub fn is_overloaded(&self) -> bool {
        self.kind == ErrorKind::Overloaded
    }

    /// The loader's own error, for downcasting to your type.
    ///
    /// ```
    /// # let e = hmdp_cache::Error::loader(std::io::Error::other("disk"));
    /// let io = e.loader_error().and_then(|e| e.downcast_ref::<std::io::Error>());
    /// assert!(io.is_some());
    /// ```
    pub fn loader_error(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        (self.kind == ErrorKind::Loader).then_some(&*self.detail)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({}: {:?})", self.kind, self.detail)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.detail)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.detail)
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        let kind = if hmdp_lock::is_unavailable(&e) {
            ErrorKind::RedisUnavailable
        } else {
            ErrorKind::Redis
        };
        Self::new(kind, e)
    }
}

impl From<hmdp_lock::Error> for Error {
    fn from(e: hmdp_lock::Error) -> Self {
        let unavailable = e.is_connection_error()
            || e.redis_error().is_some_and(hmdp_lock::is_unavailable)
            || e.is_timeout();
        let kind = if unavailable {
            ErrorKind::RedisUnavailable
        } else {
            ErrorKind::Lock
        };
        Self::new(kind, e)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Self::new(ErrorKind::Serde, e)
    }
}
