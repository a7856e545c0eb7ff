//! The public generator type, its builder and options.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::SystemTime;

use crate::clock::{Clock, SystemClock, unix_seconds};
use crate::error::{Error, Result};
use crate::layout::{check_time, compose, day_key};
use crate::segment::SegmentState;

/// The connections a generator can run on: any cheap-to-clone async
/// redis-rs connection.
///
/// This is a blanket alias, so `ConnectionManager` (reconnects on its own,
/// the recommended choice), `MultiplexedConnection` and the cluster
/// `ClusterConnection` all qualify. Every command the crate sends touches a
/// single key, so it is cluster-safe by construction.
///
/// ```
/// fn assert_usable<C: hmdp_id::IdConnection>() {}
/// assert_usable::<redis::aio::ConnectionManager>();
/// assert_usable::<redis::aio::MultiplexedConnection>();
/// assert_usable::<redis::cluster_async::ClusterConnection>();
/// ```
pub trait IdConnection: redis::aio::ConnectionLike + Clone + Send + Sync + 'static {}

impl<T> IdConnection for T where T: redis::aio::ConnectionLike + Clone + Send + Sync + 'static {}

/// How a generator obtains sequence numbers.
///
/// ```
/// use hmdp_id::{Mode, SegmentOptions};
/// assert_eq!(Mode::default(), Mode::Compatible);
/// let fast = Mode::Segment(SegmentOptions::new().step(5_000));
/// assert!(matches!(fast, Mode::Segment(o) if o.step_size() == 5_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// The original `RedisIdWorker`: one `INCR` of the day key per id.
    #[default]
    Compatible,
    /// Reserve blocks of sequence numbers with `INCRBY day-key step` and hand
    /// them out from memory, prefetching the next block in the background.
    Segment(SegmentOptions),
}

/// Tuning for [`Mode::Segment`].
///
/// * `step` — how many sequence numbers one `INCRBY` reserves (default
///   1000). Bigger steps mean fewer round trips but more numbers thrown
///   away when a process stops or a day ends; neither affects uniqueness.
/// * `prefetch_at` — when the fraction of the current block still unused
///   drops to this value, the next block is fetched in the background
///   (default 0.2, i.e. with 20 % left). `0.0` waits until the block is
///   empty; `1.0` keeps a spare block at all times.
///
/// ```
/// let opts = hmdp_id::SegmentOptions::new().step(2_000).prefetch_at(0.1);
/// assert_eq!(opts.step_size(), 2_000);
/// assert_eq!(opts.prefetch_fraction(), 0.1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct SegmentOptions {
    step: u32,
    prefetch_at: f64,
}

impl Default for SegmentOptions {
    fn default() -> Self {
        SegmentOptions {
            step: 1000,
            prefetch_at: 0.2,
        }
    }
}

impl SegmentOptions {
    /// The defaults: step 1000, prefetch with 20 % of the block left.
    ///
    /// ```
    /// assert_eq!(hmdp_id::SegmentOptions::new(), hmdp_id::SegmentOptions::default());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// How many sequence numbers to reserve per round trip. Must be at least
    /// 1 (checked by [`IdGeneratorBuilder::build`]).
    ///
    /// ```
    /// let opts = hmdp_id::SegmentOptions::new().step(10_000);
    /// assert_eq!(opts.step_size(), 10_000);
    /// ```
    pub fn step(mut self, step: u32) -> Self {
        self.step = step;
        self
    }

    /// Start fetching the next block when at most this fraction of the
    /// current block is left. Must lie in `0.0..=1.0` (checked by
    /// [`IdGeneratorBuilder::build`]).
    ///
    /// ```
    /// let opts = hmdp_id::SegmentOptions::new().prefetch_at(0.5);
    /// assert_eq!(opts.prefetch_fraction(), 0.5);
    /// ```
    pub fn prefetch_at(mut self, fraction: f64) -> Self {
        self.prefetch_at = fraction;
        self
    }

    /// The configured step.
    ///
    /// ```
    /// assert_eq!(hmdp_id::SegmentOptions::new().step_size(), 1000);
    /// ```
    pub fn step_size(&self) -> u32 {
        self.step
    }

    /// The configured prefetch threshold.
    ///
    /// ```
    /// assert_eq!(hmdp_id::SegmentOptions::new().prefetch_fraction(), 0.2);
    /// ```
    pub fn prefetch_fraction(&self) -> f64 {
        self.prefetch_at
    }

    fn validate(&self) -> Result<()> {
        if self.step == 0 {
            return Err(Error::config("segment step must be at least 1"));
        }
        if !(0.0..=1.0).contains(&self.prefetch_at) {
            return Err(Error::config(format!(
                "prefetch fraction must lie in 0.0..=1.0, got {}",
                self.prefetch_at
            )));
        }
        Ok(())
    }
}

/// Counters describing what a generator has done so far.
///
/// Useful for metrics, and to check that segment mode really saves round
/// trips.
///
/// ```no_run
/// # async fn demo(ids: hmdp_id::IdGenerator) -> hmdp_id::Result<()> {
/// ids.next_id().await?;
/// let stats = ids.stats();
/// println!("{} ids in {} round trips", stats.ids_issued, stats.round_trips);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Stats {
    /// Ids returned to callers.
    pub ids_issued: u64,
    /// `INCR`/`INCRBY` commands sent (including failed ones).
    pub round_trips: u64,
    /// Segment mode: reserved blocks dropped unused or partly used because
    /// the day changed (or, rarely, because a spare block was already
    /// queued).
    pub blocks_discarded: u64,
    /// How many times the clock read earlier than the last second used and
    /// the generator kept the last second instead.
    pub clock_clamps: u64,
    /// Segment mode: how many times a caller found no number left and had
    /// to wait for a block fetch. Apart from the first block (and the first
    /// block of each day) this stays at zero when prefetching keeps up; if it
    /// grows, raise the step or the prefetch fraction.
    pub fetch_waits: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) ids_issued: AtomicU64,
    pub(crate) round_trips: AtomicU64,
    pub(crate) blocks_discarded: AtomicU64,
    pub(crate) clock_clamps: AtomicU64,
    pub(crate) fetch_waits: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Issues 64-bit ids that are unique across processes sharing one Redis.
///
/// Cloning is cheap (one `Arc`) and clones share everything: the clamped
/// clock, the current block and the counters. Create one generator per
/// business name at startup and keep it in your application state.
///
/// See the [crate documentation](crate) for the id layout and guarantees.
///
/// ```no_run
/// use hmdp_id::{IdGenerator, SegmentOptions};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let redis = redis::Client::open("redis://127.0.0.1:6379")?;
/// let conn = redis.get_connection_manager().await?;
/// let order_ids = IdGenerator::builder(conn, "order")
///     .key_prefix("hmdp:")
///     .segment(SegmentOptions::new())
///     .build()?;
/// let id = order_ids.next_id().await?;
/// assert!(id > 0);
/// # Ok(())
/// # }
/// ```
pub struct IdGenerator<C = redis::aio::ConnectionManager> {
    inner: Arc<Inner<C>>,
}

impl<C> Clone for IdGenerator<C> {
    fn clone(&self) -> Self {
        IdGenerator {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C> fmt::Debug for IdGenerator<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdGenerator")
            .field("key_prefix", &self.inner.key_prefix)
            .field("biz", &self.inner.biz)
            .field("mode", &self.inner.mode)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner<C> {
    pub(crate) conn: C,
    pub(crate) key_prefix: String,
    pub(crate) biz: String,
    pub(crate) mode: Mode,
    clock: Arc<dyn Clock>,
    /// The largest Unix second this generator has used (`i64::MIN` before the
    /// first id). Only in-range seconds are ever stored, so one bad clock
    /// reading cannot poison later calls.
    pub(crate) last_second: AtomicI64,
    /// Segment mode state. A `std::sync::Mutex`, not a Tokio one: it is held
    /// only for a few arithmetic steps and never across an `.await`.
    pub(crate) segment: std::sync::Mutex<SegmentState>,
    pub(crate) counters: Counters,
}

impl<C: IdConnection> IdGenerator<C> {
    /// Starts building a generator for the business name `biz` (the
    /// original used `"order"`), sending its commands over `conn`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let redis = redis::Client::open("redis://127.0.0.1:6379")?;
    /// let conn = redis.get_multiplexed_async_connection().await?;
    /// let ids = hmdp_id::IdGenerator::builder(conn, "order").build()?;
    /// # let _ = ids;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(conn: C, biz: impl Into<String>) -> IdGeneratorBuilder<C> {
        IdGeneratorBuilder {
            conn,
            biz: biz.into(),
            key_prefix: String::new(),
            mode: Mode::Compatible,
            clock: Arc::new(SystemClock),
        }
    }

    /// Issues the next id.
    ///
    /// * Compatible mode: one `INCR` round trip.
    /// * Segment mode: usually no round trip at all; a caller only waits
    ///   when the reserved block ran out before the prefetched one arrived,
    ///   and then all waiting callers share that one fetch.
    ///
    /// The id is positive. A call that starts after another call on the same
    /// generator (or a clone) has returned gets a larger id, even if the
    /// clock went backwards in between. Concurrent calls get distinct ids in
    /// no particular order.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) if the command failed,
    /// [`ErrorKind::SequenceExhausted`](crate::ErrorKind::SequenceExhausted)
    /// if the day's counter passed `2^32 - 1`,
    /// [`ErrorKind::ClockOutOfRange`](crate::ErrorKind::ClockOutOfRange)
    /// outside 2022–2090.
    ///
    /// ```no_run
    /// # async fn demo(ids: hmdp_id::IdGenerator) -> hmdp_id::Result<()> {
    /// let a = ids.next_id().await?;
    /// let b = ids.next_id().await?;
    /// assert!(b > a);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn next_id(&self) -> Result<i64> {
        let id = match self.inner.mode {
            Mode::Compatible => self.inner.next_compatible().await?,
            Mode::Segment(opts) => self.inner.next_segment(opts).await?,
        };
        bump(&self.inner.counters.ids_issued);
        Ok(id)
    }

    /// The business name given to [`builder`](IdGenerator::builder).
    ///
    /// ```no_run
    /// # fn f(ids: hmdp_id::IdGenerator) {
    /// assert_eq!(ids.biz(), "order");
    /// # }
    /// ```
    pub fn biz(&self) -> &str {
        &self.inner.biz
    }

    /// The key prefix given to the builder (empty by default).
    ///
    /// ```no_run
    /// # fn f(ids: hmdp_id::IdGenerator) {
    /// println!("keys start with {:?}", ids.key_prefix());
    /// # }
    /// ```
    pub fn key_prefix(&self) -> &str {
        &self.inner.key_prefix
    }

    /// The mode the generator runs in.
    ///
    /// ```no_run
    /// # fn f(ids: hmdp_id::IdGenerator) {
    /// if let hmdp_id::Mode::Segment(opts) = ids.mode() {
    ///     println!("blocks of {}", opts.step_size());
    /// }
    /// # }
    /// ```
    pub fn mode(&self) -> Mode {
        self.inner.mode
    }

    /// The counter key this generator uses for the UTC day containing
    /// `time`, e.g. `hmdp:icr:order:2024:02:29`.
    ///
    /// ```no_run
    /// # fn f(ids: hmdp_id::IdGenerator) {
    /// let today = ids.key_at(std::time::SystemTime::now());
    /// assert!(today.contains(":icr:order:"));
    /// # }
    /// ```
    pub fn key_at(&self, time: SystemTime) -> String {
        day_key(&self.inner.key_prefix, &self.inner.biz, unix_seconds(time))
    }

    /// A snapshot of the generator's counters.
    ///
    /// ```no_run
    /// # fn f(ids: hmdp_id::IdGenerator) {
    /// let s = ids.stats();
    /// println!("{} ids, {} round trips, clock clamped {} times",
    ///          s.ids_issued, s.round_trips, s.clock_clamps);
    /// # }
    /// ```
    pub fn stats(&self) -> Stats {
        let c = &self.inner.counters;
        Stats {
            ids_issued: c.ids_issued.load(Ordering::Relaxed),
            round_trips: c.round_trips.load(Ordering::Relaxed),
            blocks_discarded: c.blocks_discarded.load(Ordering::Relaxed),
            clock_clamps: c.clock_clamps.load(Ordering::Relaxed),
            fetch_waits: c.fetch_waits.load(Ordering::Relaxed),
        }
    }
}

impl<C: IdConnection> Inner<C> {
    /// Reads the clock and clamps it to the last second used, so the value
    /// never goes backwards. The clamped second decides both the timestamp
    /// bits and the day key.
    pub(crate) fn clamped_now(&self) -> Result<i64> {
        let now = unix_seconds(self.clock.now());
        let prev = self.last_second.load(Ordering::SeqCst);
        let candidate = now.max(prev);
        check_time(candidate)?;
        let prev = self.last_second.fetch_max(candidate, Ordering::SeqCst);
        if prev > now {
            bump(&self.counters.clock_clamps);
            tracing::trace!(
                clock = now,
                using = prev,
                biz = %self.biz,
                "clock behind the last second used; keeping the last second"
            );
        }
        Ok(candidate.max(prev))
    }

    async fn next_compatible(&self) -> Result<i64> {
        let second = self.clamped_now()?;
        let key = day_key(&self.key_prefix, &self.biz, second);
        let mut conn = self.conn.clone();
        bump(&self.counters.round_trips);
        let seq: i64 = redis::cmd("INCR")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(|e| Error::redis(format!("INCR {key}"), e))?;
        if seq < 1 {
            return Err(Error::reply(format!(
                "INCR {key} returned {seq}; the counter was changed by hand"
            )));
        }
        compose(second, seq as u64)
    }
}

/// Configures and builds an [`IdGenerator`]. Get one from
/// [`IdGenerator::builder`].
///
/// ```no_run
/// use std::time::Duration;
/// use hmdp_id::{IdGenerator, ManualClock, SegmentOptions};
///
/// # fn f(conn: redis::aio::MultiplexedConnection) -> hmdp_id::Result<()> {
/// let clock = ManualClock::from_unix_seconds(1_700_000_000);
/// let ids = IdGenerator::builder(conn, "order")
///     .key_prefix("t123:")
///     .segment(SegmentOptions::new().step(100))
///     .clock(clock.clone())
///     .build()?;
/// clock.rewind(Duration::from_secs(30)); // ids stay unique and increasing
/// # let _ = ids;
/// # Ok(())
/// # }
/// ```
#[must_use = "call .build() to get a generator"]
pub struct IdGeneratorBuilder<C> {
    conn: C,
    biz: String,
    key_prefix: String,
    mode: Mode,
    clock: Arc<dyn Clock>,
}

impl<C> fmt::Debug for IdGeneratorBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdGeneratorBuilder")
            .field("key_prefix", &self.key_prefix)
            .field("biz", &self.biz)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl<C: IdConnection> IdGeneratorBuilder<C> {
    /// Prepended to every key, e.g. `"t123:"` gives `t123:icr:order:…`.
    /// Use it to separate deployments or test runs sharing one Redis.
    ///
    /// ```no_run
    /// # fn f(conn: redis::aio::MultiplexedConnection) {
    /// let b = hmdp_id::IdGenerator::builder(conn, "order").key_prefix("prod:");
    /// # let _ = b;
    /// # }
    /// ```
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Selects the mode ([`Mode::Compatible`] by default).
    ///
    /// ```no_run
    /// # fn f(conn: redis::aio::MultiplexedConnection) {
    /// use hmdp_id::{Mode, SegmentOptions};
    /// let b = hmdp_id::IdGenerator::builder(conn, "order")
    ///     .mode(Mode::Segment(SegmentOptions::new()));
    /// # let _ = b;
    /// # }
    /// ```
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Shorthand for `.mode(Mode::Compatible)`.
    ///
    /// ```no_run
    /// # fn f(conn: redis::aio::MultiplexedConnection) {
    /// let b = hmdp_id::IdGenerator::builder(conn, "order").compatible();
    /// # let _ = b;
    /// # }
    /// ```
    pub fn compatible(self) -> Self {
        self.mode(Mode::Compatible)
    }

    /// Shorthand for `.mode(Mode::Segment(options))`.
    ///
    /// ```no_run
    /// # fn f(conn: redis::aio::MultiplexedConnection) {
    /// let b = hmdp_id::IdGenerator::builder(conn, "order")
    ///     .segment(hmdp_id::SegmentOptions::new().step(500));
    /// # let _ = b;
    /// # }
    /// ```
    pub fn segment(self, options: SegmentOptions) -> Self {
        self.mode(Mode::Segment(options))
    }

    /// Replaces the wall clock ([`SystemClock`] by default), e.g. with a
    /// [`ManualClock`](crate::ManualClock) in tests.
    ///
    /// ```no_run
    /// # fn f(conn: redis::aio::MultiplexedConnection) {
    /// let b = hmdp_id::IdGenerator::builder(conn, "order")
    ///     .clock(hmdp_id::ManualClock::from_unix_seconds(1_700_000_000));
    /// # let _ = b;
    /// # }
    /// ```
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Validates the settings and builds the generator. Nothing is sent to
    /// Redis yet.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) for an
    /// empty business name or one containing whitespace or control
    /// characters, a zero step, or a prefetch fraction outside `0.0..=1.0`.
    ///
    /// ```no_run
    /// # fn f(conn: redis::aio::MultiplexedConnection) -> hmdp_id::Result<()> {
    /// let ids = hmdp_id::IdGenerator::builder(conn, "order").build()?;
    /// # let _ = ids;
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<IdGenerator<C>> {
        if self.biz.is_empty() {
            return Err(Error::config("business name must not be empty"));
        }
        if self
            .biz
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(Error::config(format!(
                "business name {:?} must not contain whitespace or control characters",
                self.biz
            )));
        }
        if let Mode::Segment(opts) = &self.mode {
            opts.validate()?;
        }
        Ok(IdGenerator {
            inner: Arc::new(Inner {
                conn: self.conn,
                key_prefix: self.key_prefix,
                biz: self.biz,
                mode: self.mode,
                clock: self.clock,
                last_second: AtomicI64::new(i64::MIN),
                segment: std::sync::Mutex::new(SegmentState::default()),
                counters: Counters::default(),
            }),
        })
    }
}
