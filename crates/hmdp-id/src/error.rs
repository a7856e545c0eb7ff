//! The crate's error type.

use std::fmt;

/// Shorthand for `Result<T, hmdp_id::Error>`.
///
/// ```
/// fn parse_biz(s: &str) -> hmdp_id::Result<&str> {
///     Ok(s)
/// }
/// assert!(parse_biz("order").is_ok());
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, in broad categories.
///
/// Match on it through [`Error::kind`]. New variants may be added in minor
/// releases, so keep a wildcard arm.
///
/// ```
/// use hmdp_id::ErrorKind;
/// fn retryable(kind: ErrorKind) -> bool {
///     match kind {
///         ErrorKind::Redis => true,
///         ErrorKind::SequenceExhausted | ErrorKind::ClockOutOfRange => false,
///         _ => false,
///     }
/// }
/// assert!(retryable(ErrorKind::Redis));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A Redis command failed (connection, server error, timeout, the day
    /// key holding a non-integer…). The underlying [`redis::RedisError`] is
    /// available through [`Error::redis_error`].
    Redis,
    /// The per-day counter went past [`MAX_SEQUENCE`](crate::MAX_SEQUENCE)
    /// (`2^32 - 1`): this business key has issued all the ids it can for the
    /// day. No id is returned; retrying the same day keeps failing.
    SequenceExhausted,
    /// The (clamped) clock lies outside the range the 31 timestamp bits can
    /// represent: before 2022-01-01 or after 2090-01-19 UTC.
    ClockOutOfRange,
    /// The builder or options were given an unusable value (empty biz name,
    /// zero step, …). Nothing was sent to Redis.
    InvalidConfig,
    /// Redis answered with a value no counter can hold, e.g. a counter that
    /// is zero or negative after incrementing because someone wrote to the
    /// key by hand.
    UnexpectedReply,
    /// The background block fetch of segment mode stopped without an
    /// answer (its task panicked or the runtime shut down). Retrying starts a
    /// new fetch.
    BackgroundTask,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Redis => "redis error",
            ErrorKind::SequenceExhausted => "sequence exhausted",
            ErrorKind::ClockOutOfRange => "clock out of range",
            ErrorKind::InvalidConfig => "invalid configuration",
            ErrorKind::UnexpectedReply => "unexpected reply",
            ErrorKind::BackgroundTask => "background task failed",
        })
    }
}

/// The error type of every fallible operation in this crate.
///
/// It is opaque on purpose: inspect it with [`kind`](Error::kind) and the
/// `is_*` helpers. It is `Clone` because in segment mode one failed block
/// fetch is reported to every caller that was waiting for it.
///
/// ```no_run
/// # async fn demo(ids: hmdp_id::IdGenerator) {
/// match ids.next_id().await {
///     Ok(id) => println!("order {id}"),
///     Err(e) if e.is_redis() => eprintln!("redis unavailable, try again: {e}"),
///     Err(e) => eprintln!("cannot issue ids: {e}"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, thiserror::Error)]
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

    pub(crate) fn config(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidConfig, detail)
    }

    pub(crate) fn clock(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::ClockOutOfRange, detail)
    }

    pub(crate) fn exhausted(sequence: u64) -> Self {
        Self::new(
            ErrorKind::SequenceExhausted,
            format!(
                "sequence {sequence} does not fit in 32 bits; \
                 the day's {} ids for this key are used up",
                crate::MAX_SEQUENCE
            ),
        )
    }

    pub(crate) fn reply(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::UnexpectedReply, detail)
    }

    pub(crate) fn redis(context: impl Into<String>, err: redis::RedisError) -> Self {
        Error {
            kind: ErrorKind::Redis,
            detail: format!("{}: {err}", context.into()),
            source: Some(err),
        }
    }

    /// The broad category of this error.
    ///
    /// ```
    /// let e = hmdp_id::compose(0, 1).unwrap_err();
    /// assert_eq!(e.kind(), hmdp_id::ErrorKind::ClockOutOfRange);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// True if talking to Redis failed; usually worth a retry.
    ///
    /// ```
    /// let e = hmdp_id::compose(0, 1).unwrap_err();
    /// assert!(!e.is_redis());
    /// ```
    pub fn is_redis(&self) -> bool {
        self.kind == ErrorKind::Redis
    }

    /// True if the day's sequence numbers for this key are used up.
    ///
    /// ```
    /// let e = hmdp_id::compose(hmdp_id::EPOCH_SECONDS, 1 << 32).unwrap_err();
    /// assert!(e.is_sequence_exhausted());
    /// ```
    pub fn is_sequence_exhausted(&self) -> bool {
        self.kind == ErrorKind::SequenceExhausted
    }

    /// True if the clock is outside the representable 2022–2090 range.
    ///
    /// ```
    /// let e = hmdp_id::compose(hmdp_id::MAX_UNIX_SECONDS + 1, 1).unwrap_err();
    /// assert!(e.is_clock_out_of_range());
    /// ```
    pub fn is_clock_out_of_range(&self) -> bool {
        self.kind == ErrorKind::ClockOutOfRange
    }

    /// True if a builder or option value was rejected.
    ///
    /// ```
    /// # fn f(conn: redis::aio::MultiplexedConnection) {
    /// let e = hmdp_id::IdGenerator::builder(conn, "").build().unwrap_err();
    /// assert!(e.is_invalid_config());
    /// # }
    /// ```
    pub fn is_invalid_config(&self) -> bool {
        self.kind == ErrorKind::InvalidConfig
    }

    /// The Redis error behind an [`ErrorKind::Redis`] error, for finer
    /// checks such as [`redis::RedisError::is_timeout`].
    ///
    /// ```
    /// # fn f(e: hmdp_id::Error) {
    /// if e.redis_error().is_some_and(|r| r.is_timeout()) {
    ///     // back off
    /// }
    /// # }
    /// ```
    pub fn redis_error(&self) -> Option<&redis::RedisError> {
        self.source.as_ref()
    }
}
