//! The entry point: [`LockClient`] and its builder.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use uuid::Uuid;

use crate::keys::LockKeys;
use crate::lock::Lock;
use crate::stats::{LockStats, Stats};
use crate::subscriber::{Hub, PubSubSource};
use crate::{Error, Result};

/// Default watchdog timeout (the lease used when no lease is given), as in
/// Redisson.
///
/// ```
/// assert_eq!(hmdp_lock::DEFAULT_WATCHDOG_TIMEOUT, std::time::Duration::from_secs(30));
/// ```
pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);

/// Default pause between retries when no pub/sub subscriber is available.
///
/// ```
/// assert_eq!(hmdp_lock::DEFAULT_RETRY_INTERVAL, std::time::Duration::from_millis(100));
/// ```
pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_millis(100);

/// Default floor of the time limit on each acquire call of a bounded wait
/// (see [`LockClientBuilder::min_attempt_timeout`]).
///
/// ```
/// assert_eq!(hmdp_lock::DEFAULT_MIN_ATTEMPT_TIMEOUT, std::time::Duration::from_millis(250));
/// ```
pub const DEFAULT_MIN_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(250);

/// Any async redis-rs connection the locks can run their scripts on.
///
/// Implemented automatically for every
/// `redis::aio::ConnectionLike + Clone + Send + Sync + 'static`, which
/// includes [`redis::aio::ConnectionManager`],
/// [`redis::aio::MultiplexedConnection`] and
/// [`redis::cluster_async::ClusterConnection`].
///
/// ```
/// fn assert_usable<C: hmdp_lock::LockConnection>() {}
/// assert_usable::<redis::aio::ConnectionManager>();
/// assert_usable::<redis::aio::MultiplexedConnection>();
/// assert_usable::<redis::cluster_async::ClusterConnection>();
/// ```
pub trait LockConnection: redis::aio::ConnectionLike + Clone + Send + Sync + 'static {}

impl<T> LockConnection for T where T: redis::aio::ConnectionLike + Clone + Send + Sync + 'static {}

/// Which data structure a lock uses in Redis.
///
/// ```
/// use hmdp_lock::{LockKind, LockOptions};
/// let opts = LockOptions::new().kind(LockKind::Simple);
/// assert_eq!(opts.lock_kind(), LockKind::Simple);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LockKind {
    /// A hash with one field per owner whose value counts re-entries
    /// (Redisson `RLock` semantics). Supports
    /// [`LockGuard::reenter`](crate::LockGuard::reenter).
    #[default]
    Reentrant,
    /// A plain string set with `SET key token NX PX lease`; released with a
    /// compare-and-delete. Not reentrant.
    Simple,
}

/// Per-lock options for [`LockClient::lock_with`].
///
/// ```
/// use hmdp_lock::{LockKind, LockOptions};
/// let opts = LockOptions::new().kind(LockKind::Reentrant).fencing(true);
/// assert!(opts.fencing_enabled());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockOptions {
    kind: LockKind,
    fencing: bool,
}

impl LockOptions {
    /// Reentrant lock, no fencing token.
    ///
    /// ```
    /// let opts = hmdp_lock::LockOptions::new();
    /// assert!(!opts.fencing_enabled());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Chooses the lock's data structure.
    ///
    /// ```
    /// let opts = hmdp_lock::LockOptions::new().kind(hmdp_lock::LockKind::Simple);
    /// # let _ = opts;
    /// ```
    pub fn kind(mut self, kind: LockKind) -> Self {
        self.kind = kind;
        self
    }

    /// When on, every fresh acquisition increments a counter stored next to
    /// the lock (in the same script) and hands the value out as
    /// [`LockGuard::fencing_token`](crate::LockGuard::fencing_token).
    ///
    /// ```
    /// let opts = hmdp_lock::LockOptions::new().fencing(true);
    /// # let _ = opts;
    /// ```
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// The configured lock kind.
    ///
    /// ```
    /// assert_eq!(hmdp_lock::LockOptions::new().lock_kind(), hmdp_lock::LockKind::Reentrant);
    /// ```
    pub fn lock_kind(&self) -> LockKind {
        self.kind
    }

    /// Whether fencing tokens are issued.
    ///
    /// ```
    /// assert!(!hmdp_lock::LockOptions::new().fencing_enabled());
    /// ```
    pub fn fencing_enabled(&self) -> bool {
        self.fencing
    }
}

pub(crate) struct ClientInner<C> {
    pub(crate) conn: C,
    pub(crate) hub: Option<Hub>,
    pub(crate) prefix: String,
    pub(crate) client_id: Uuid,
    pub(crate) counter: AtomicU64,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) retry_interval: Duration,
    pub(crate) min_attempt_timeout: Duration,
    /// Shared with every hold, so a watchdog can count a loss.
    pub(crate) stats: Arc<Stats>,
}

impl<C> ClientInner<C> {
    /// `<client uuid>:<counter>`: unique per acquisition attempt, independent
    /// of the thread a task happens to run on.
    pub(crate) fn next_token(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{}:{n}", self.client_id)
    }
}

/// Hands out locks that share one command connection, one pub/sub
/// subscriber connection, a key prefix and a client id.
///
/// Cheap to clone (an `Arc` inside). Build one per process (or per test) with
/// [`LockClient::builder`].
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let redis = redis::Client::open("redis://127.0.0.1:6379")?;
/// let conn = redis.get_connection_manager().await?;
/// let locks = hmdp_lock::LockClient::builder(conn)
///     .subscriber(redis)
///     .key_prefix("hmdp:")
///     .build()?;
/// let guard = locks.lock("order:1")?.lock().await?;
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
pub struct LockClient<C = redis::aio::ConnectionManager> {
    pub(crate) inner: Arc<ClientInner<C>>,
}

impl<C> Clone for LockClient<C> {
    fn clone(&self) -> Self {
        LockClient {
            inner: self.inner.clone(),
        }
    }
}

impl<C> std::fmt::Debug for LockClient<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("client_id", &self.inner.client_id)
            .field("prefix", &self.inner.prefix)
            .field("subscriber", &self.inner.hub.is_some())
            .field("watchdog_timeout", &self.inner.watchdog_timeout)
            .finish_non_exhaustive()
    }
}

impl<C: LockConnection> LockClient<C> {
    /// Starts building a client that runs its scripts on `conn`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let redis = redis::Client::open("redis://127.0.0.1:6379")?;
    /// let conn = redis.get_multiplexed_async_connection().await?;
    /// let locks = hmdp_lock::LockClient::builder(conn).subscriber(redis).build()?;
    /// # let _ = locks;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(conn: C) -> LockClientBuilder<C> {
        LockClientBuilder {
            conn,
            subscriber: None,
            prefix: String::new(),
            client_id: None,
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            retry_interval: DEFAULT_RETRY_INTERVAL,
            min_attempt_timeout: DEFAULT_MIN_ATTEMPT_TIMEOUT,
        }
    }

    /// A reentrant lock named `name` (Redis key `{prefix}lock:{name}`).
    ///
    /// ```no_run
    /// # async fn demo(locks: hmdp_lock::LockClient) -> hmdp_lock::Result<()> {
    /// let lock = locks.lock("shop:1")?;
    /// let guard = lock.lock().await?;
    /// assert!(guard.unlock().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self, name: &str) -> Result<Lock<C>> {
        self.lock_with(name, LockOptions::new())
    }

    /// A lock named `name` with explicit options (kind, fencing).
    ///
    /// ```no_run
    /// # async fn demo(locks: hmdp_lock::LockClient) -> hmdp_lock::Result<()> {
    /// use hmdp_lock::{LockKind, LockOptions};
    /// let lock = locks.lock_with("stock:9", LockOptions::new().kind(LockKind::Simple).fencing(true))?;
    /// let guard = lock.lock().await?;
    /// println!("token {:?}", guard.fencing_token());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_with(&self, name: &str, options: LockOptions) -> Result<Lock<C>> {
        let keys = LockKeys::new(&self.inner.prefix, name)?;
        Ok(Lock::new(self.clone(), keys, options))
    }

    /// The random id (UUID v4) that prefixes every owner token of this client.
    ///
    /// ```no_run
    /// # fn f(locks: hmdp_lock::LockClient) {
    /// println!("{}", locks.client_id());
    /// # }
    /// ```
    pub fn client_id(&self) -> Uuid {
        self.inner.client_id
    }

    /// The key prefix given to the builder.
    ///
    /// ```no_run
    /// # fn f(locks: hmdp_lock::LockClient) {
    /// assert!(locks.key_prefix().ends_with(':') || locks.key_prefix().is_empty());
    /// # }
    /// ```
    pub fn key_prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The lease used (and renewed) when no lease is given.
    ///
    /// ```no_run
    /// # fn f(locks: hmdp_lock::LockClient) {
    /// println!("{:?}", locks.watchdog_timeout());
    /// # }
    /// ```
    pub fn watchdog_timeout(&self) -> std::time::Duration {
        self.inner.watchdog_timeout
    }

    /// A snapshot of this client's lock counters: acquisitions granted at
    /// once or after waiting, waits that ran out of budget, errors, lost
    /// locks and a wait-time histogram. The counters are shared by every
    /// clone of the client and cost a few relaxed atomic adds per
    /// acquisition; see [`LockStats`] for exactly what is counted.
    ///
    /// Exposed in Prometheus text format, for example:
    ///
    /// ```no_run
    /// # fn f(locks: hmdp_lock::LockClient) {
    /// use std::fmt::Write;
    /// let s = locks.stats();
    /// let mut out = String::new();
    /// writeln!(out, "lock_acquired_total {}", s.acquired).unwrap();
    /// writeln!(out, "lock_contended_total {}", s.contended).unwrap();
    /// writeln!(out, "lock_timeouts_total {}", s.timeouts).unwrap();
    /// writeln!(out, "lock_errors_total {}", s.errors).unwrap();
    /// writeln!(out, "lock_lost_total {}", s.lost).unwrap();
    /// for (bound, n) in hmdp_lock::WAIT_BUCKETS.iter().zip(s.wait_buckets) {
    ///     writeln!(out, "lock_wait_seconds_bucket{{le=\"{}\"}} {n}", bound.as_secs_f64()).unwrap();
    /// }
    /// writeln!(out, "lock_wait_seconds_bucket{{le=\"+Inf\"}} {}", s.waits()).unwrap();
    /// writeln!(out, "lock_wait_seconds_sum {}", s.wait_time_us as f64 / 1e6).unwrap();
    /// writeln!(out, "lock_wait_seconds_count {}", s.waits()).unwrap();
    /// # }
    /// ```
    pub fn stats(&self) -> LockStats {
        self.inner.stats.snapshot()
    }
}

/// Configures a [`LockClient`].
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// let redis = redis::Client::open("redis://127.0.0.1:6379")?;
/// let conn = redis.get_connection_manager().await?;
/// let locks = hmdp_lock::LockClient::builder(conn)
///     .subscriber(redis)
///     .key_prefix("t123:")
///     .watchdog_timeout(Duration::from_secs(10))
///     .build()?;
/// # let _ = locks;
/// # Ok(())
/// # }
/// ```
#[must_use]
pub struct LockClientBuilder<C> {
    conn: C,
    subscriber: Option<Arc<dyn PubSubSource>>,
    prefix: String,
    client_id: Option<Uuid>,
    watchdog_timeout: Duration,
    retry_interval: Duration,
    min_attempt_timeout: Duration,
}

impl<C: LockConnection> LockClientBuilder<C> {
    /// Where the single shared pub/sub connection on which waiters hear unlock
    /// notifications is opened: a `redis::Client`, or any [`PubSubSource`] (one that
    /// finds the current primary each time, to follow a Sentinel failover). Without it, waiters retry
    /// every [`retry_interval`](Self::retry_interval) (or when the holder's
    /// lease runs out, if sooner).
    ///
    /// In Redis Cluster, point it at any node: `PUBLISH` is broadcast to
    /// every node of the cluster, so one subscriber connection hears all
    /// unlock messages.
    ///
    /// ```no_run
    /// # async fn demo(conn: redis::aio::MultiplexedConnection) -> Result<(), Box<dyn std::error::Error>> {
    /// let b = hmdp_lock::LockClient::builder(conn).subscriber(redis::Client::open("redis://127.0.0.1/")?);
    /// # let _ = b;
    /// # Ok(())
    /// # }
    /// ```
    pub fn subscriber(mut self, client: impl PubSubSource) -> Self {
        self.subscriber = Some(Arc::new(client));
        self
    }

    /// Like [`subscriber`](Self::subscriber), from a URL.
    ///
    /// ```no_run
    /// # fn f(conn: redis::aio::MultiplexedConnection) -> hmdp_lock::Result<()> {
    /// let b = hmdp_lock::LockClient::builder(conn).subscriber_url("redis://127.0.0.1/")?;
    /// # let _ = b;
    /// # Ok(())
    /// # }
    /// ```
    pub fn subscriber_url(self, url: &str) -> Result<Self> {
        Ok(self.subscriber(redis::Client::open(url)?))
    }

    /// Prepended to every key and channel, e.g. `"t123:"` gives
    /// `t123:lock:{name}`. Must not contain an empty hash tag `{}`.
    ///
    /// ```no_run
    /// # fn f(conn: redis::aio::MultiplexedConnection) {
    /// let b = hmdp_lock::LockClient::builder(conn).key_prefix("prod:");
    /// # let _ = b;
    /// # }
    /// ```
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Overrides the random client id (normally a fresh UUID v4).
    ///
    /// ```no_run
    /// # fn f(conn: redis::aio::MultiplexedConnection) {
    /// let b = hmdp_lock::LockClient::builder(conn).client_id(uuid::Uuid::new_v4());
    /// # let _ = b;
    /// # }
    /// ```
    pub fn client_id(mut self, id: Uuid) -> Self {
        self.client_id = Some(id);
        self
    }

    /// Lease used when none is given; the watchdog renews it every third of
    /// this. Default 30 s.
    ///
    /// ```no_run
    /// # fn f(conn: redis::aio::MultiplexedConnection) {
    /// let b = hmdp_lock::LockClient::builder(conn).watchdog_timeout(std::time::Duration::from_secs(5));
    /// # let _ = b;
    /// # }
    /// ```
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = timeout;
        self
    }

    /// Fallback retry pause for waiters when no subscriber is configured or
    /// it is disconnected. Default 100 ms.
    ///
    /// ```no_run
    /// # fn f(conn: redis::aio::MultiplexedConnection) {
    /// let b = hmdp_lock::LockClient::builder(conn).retry_interval(std::time::Duration::from_millis(20));
    /// # let _ = b;
    /// # }
    /// ```
    pub fn retry_interval(mut self, interval: Duration) -> Self {
        self.retry_interval = interval;
        self
    }

    /// The shortest time limit for one acquire call of a bounded wait
    /// ([`Lock::try_lock`](crate::Lock::try_lock)). Each call is limited to
    /// what is left of the wait budget, but never less than this, so that
    /// `try_lock(Duration::ZERO, ..)` or a last retry at the very end of the
    /// budget still gets a fair chance at a healthy Redis. A hung connection
    /// therefore makes `try_lock` return (with a timeout error) at most this
    /// much later than its wait budget. Default 250 ms.
    ///
    /// ```no_run
    /// # fn f(conn: redis::aio::MultiplexedConnection) {
    /// let b = hmdp_lock::LockClient::builder(conn).min_attempt_timeout(std::time::Duration::from_millis(50));
    /// # let _ = b;
    /// # }
    /// ```
    pub fn min_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.min_attempt_timeout = timeout;
        self
    }

    /// Validates the settings and builds the client. Nothing is sent to
    /// Redis yet; the subscriber connection opens on first wait.
    ///
    /// ```no_run
    /// # fn f(conn: redis::aio::MultiplexedConnection) -> hmdp_lock::Result<()> {
    /// let locks = hmdp_lock::LockClient::builder(conn).build()?;
    /// # let _ = locks;
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<LockClient<C>> {
        if self.watchdog_timeout < Duration::from_millis(3) {
            return Err(Error::invalid("watchdog timeout must be at least 3 ms"));
        }
        if self.retry_interval.is_zero() {
            return Err(Error::invalid("retry interval must be positive"));
        }
        if self.min_attempt_timeout < Duration::from_millis(1) {
            return Err(Error::invalid("min attempt timeout must be at least 1 ms"));
        }
        // Validate the prefix once with a dummy name.
        LockKeys::new(&self.prefix, "x")?;
        Ok(LockClient {
            inner: Arc::new(ClientInner {
                conn: self.conn,
                hub: self.subscriber.map(Hub::new),
                prefix: self.prefix,
                client_id: self.client_id.unwrap_or_else(Uuid::new_v4),
                counter: AtomicU64::new(0),
                watchdog_timeout: self.watchdog_timeout,
                retry_interval: self.retry_interval,
                min_attempt_timeout: self.min_attempt_timeout,
                stats: Arc::default(),
            }),
        })
    }
}
