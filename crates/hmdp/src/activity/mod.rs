//! Sign-in (a BITMAP per user and month) and unique visitors (a HyperLogLog per shop and day).
//!
//! Both are Redis-only features of the course: no table holds them. "Today" is the day in
//! `HMDP_TIME_ZONE`, read from a [`Clock`] that tests can pin, so a test never depends on the
//! wall clock's day. Sign-in is in [`sign`]; visitor counting, whose recording sits on the
//! hottest path (`GET /shop/{id}`), buffers visits in memory and writes them in pipelined
//! batches from a background task ([`uv`]), stopped and flushed by [`Activity::shutdown`].

pub(crate) mod sign;
pub(crate) mod uv;

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicI64, Ordering},
};

use chrono::{DateTime, NaiveDate, Utc};
use tokio::{sync::oneshot, task::JoinHandle};

pub(crate) use sign::{SignMonth, YearMonth};
#[cfg(feature = "test-util")]
pub use uv::VisitMode;
pub use uv::Visitor;
pub(crate) use uv::{MAX_UV_DAYS, UvStats};

use crate::{
    config::SocialSettings,
    domain::{Answer, Answered, ErrorCode, Refused},
    kv::{Keys, RedisConn},
};

/// Errors of the activity service.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ActivityError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Visitor counts: this instance's budget of counts per second is spent (see [`uv`]).
    #[error("visitor counts are busy; retry in {retry_after:?}")]
    Busy { retry_after: std::time::Duration },
}

impl Answered for ActivityError {
    fn answer(&self) -> Answer {
        match self {
            ActivityError::Redis(r) => r.answer(),
            ActivityError::Busy { retry_after } => Refused::new(
                ErrorCode::RateLimited,
                "请求过于频繁，请稍后再试 (visitor counts are busy)",
            )
            .retry_after(*retry_after)
            .into(),
        }
    }
}

/// Where "now" comes from: the system clock, unless a test pins it.
///
/// Clones share the pin, so a test pins the clock of the running service through
/// `state.activity.clock()`.
#[derive(Debug, Clone)]
pub struct Clock(Arc<AtomicI64>);

/// The pin value meaning "not pinned: read the system clock".
const UNPINNED: i64 = i64::MIN;

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Self(Arc::new(AtomicI64::new(UNPINNED)))
    }

    /// A clock that stands still at `at` (tests).
    #[cfg(feature = "test-util")]
    pub fn fixed(at: DateTime<Utc>) -> Self {
        Self(Arc::new(AtomicI64::new(at.timestamp_millis())))
    }

    /// The current time: the pinned one if any, else the system's.
    pub fn now(&self) -> DateTime<Utc> {
        match self.0.load(Ordering::Relaxed) {
            UNPINNED => Utc::now(),
            ms => DateTime::from_timestamp_millis(ms).unwrap_or_else(Utc::now),
        }
    }

    /// Pins the clock (of every clone) at `at` (tests).
    #[cfg(any(test, feature = "test-util"))]
    pub fn pin(&self, at: DateTime<Utc>) {
        self.0.store(at.timestamp_millis(), Ordering::Relaxed);
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::system()
    }
}

/// The activity service: daily sign-in and visitor counting. Cheap to clone.
#[derive(Clone)]
pub struct Activity(Arc<Inner>);

struct Inner {
    redis: RedisConn,
    keys: Keys,
    settings: SocialSettings,
    clock: Clock,
    visits: Arc<uv::VisitBuffer>,
    counts: uv::Counts,
    /// Stops the flush task; taken by [`Activity::shutdown`].
    stop: Mutex<Option<oneshot::Sender<()>>>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    /// A [`uv::VisitMode`] (benchmarks).
    #[cfg(feature = "test-util")]
    visit_mode: std::sync::atomic::AtomicU8,
    /// Counts computed per caller, unshared (benchmarks, [`Activity::set_count_sharing`]).
    #[cfg(feature = "test-util")]
    counts_unshared: std::sync::atomic::AtomicBool,
}

impl Activity {
    /// The service, with its visit flusher running every `settings.uv_flush` (must be called
    /// inside a Tokio runtime).
    pub fn new(redis: RedisConn, keys: Keys, settings: SocialSettings, clock: Clock) -> Self {
        let visits = Arc::new(uv::VisitBuffer::new(uv::BUFFER_CAP));
        let (stop, stopped) = oneshot::channel();
        let flusher = tokio::spawn(uv::flush_every(
            visits.clone(),
            redis.clone(),
            keys.clone(),
            settings.uv_flush,
            stopped,
        ));
        Self(Arc::new(Inner {
            redis,
            keys,
            settings,
            clock,
            visits,
            counts: uv::Counts::new(),
            stop: Mutex::new(Some(stop)),
            flusher: Mutex::new(Some(flusher)),
            #[cfg(feature = "test-util")]
            visit_mode: std::sync::atomic::AtomicU8::new(uv::VisitMode::Buffered as u8),
            #[cfg(feature = "test-util")]
            counts_unshared: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// The clock "today" is read from (tests pin it).
    #[cfg(feature = "test-util")]
    pub fn clock(&self) -> &Clock {
        &self.0.clock
    }

    /// Today's date in the configured time zone.
    pub fn today(&self) -> NaiveDate {
        self.0
            .clock
            .now()
            .with_timezone(&self.0.settings.time_zone.0)
            .date_naive()
    }

    /// The visit buffer's counters (`hmdp_uv_*`).
    pub fn uv_stats(&self) -> &UvStats {
        self.0.visits.stats()
    }

    /// Stops the flush task and sends the buffered visits to Redis; later calls do nothing.
    pub async fn shutdown(&self) {
        let stop = self.0.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
        let flusher = self
            .0
            .flusher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(flusher) = flusher
            && let Err(e) = flusher.await
        {
            tracing::warn!(error = %e, "the visit flusher ended abnormally");
        }
    }
}
