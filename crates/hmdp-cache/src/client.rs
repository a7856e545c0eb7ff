//! The cache client: reads through Redis (and an optional L1), loads on a miss, and protects
//! the loader from penetration, breakdown and avalanche.

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use hmdp_lock::{LockClient, LockConnection};
use rand::Rng;
use serde::{Serialize, de::DeserializeOwned};
use tokio::sync::Semaphore;

use crate::{
    Error, ErrorKind, Result,
    flight::{Claims, Flights},
    l1::L1,
};

/// The marker stored for "the loader found nothing" (the original stores an empty string too).
const NULL_MARKER: &str = "";

/// How a read rebuilds a missing or stale entry.
///
/// Pick per key family; all three cache "not found" as a null marker and jitter their TTLs.
///
/// ```
/// use std::time::Duration;
/// use hmdp_cache::{ReadOptions, Strategy};
/// // A catalogue page: load on a miss, once across processes.
/// let pages = ReadOptions::new(Strategy::Mutex, Duration::from_secs(1800));
/// // A handful of very hot keys: never miss, tolerate one stale rebuild.
/// let hot = ReadOptions::new(Strategy::LogicalExpiry, Duration::from_secs(60));
/// assert_ne!(pages.strategy(), hot.strategy());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Strategy {
    /// Cache-aside: on a miss, load and store. Concurrent misses in one process share one load;
    /// across processes each may load once.
    CacheAside,
    /// Cache-aside with a rebuild mutex: concurrent misses in one process share one load, and
    /// across processes a distributed lock lets one load while the others wait for it (woken by
    /// pub/sub, not polling) and then read what it stored.
    Mutex,
    /// Logical expiry: the value is stored with its expiry time inside and no Redis TTL, so it
    /// never disappears; a stale value is served at once while exactly one background task
    /// rebuilds it (one per key per process, claimed without waiting, so stale reads spawn
    /// nothing while it runs; across processes a lock held by the lock client's watchdog for
    /// as long as the load takes). Missing entries are loaded as with [`Strategy::Mutex`].
    ///
    /// The stored format differs from the other strategies (`{"expireTime", "data"}`). An
    /// entry in the other format — left behind when the strategy of a key is switched — is
    /// treated as a miss: deleted and reloaded, never an error.
    LogicalExpiry,
}

/// Per-read settings.
///
/// ```
/// use std::time::Duration;
/// use hmdp_cache::{ReadOptions, Strategy};
/// let opts = ReadOptions::new(Strategy::Mutex, Duration::from_secs(1800))
///     .null_ttl(Duration::from_secs(120))
///     .jitter(0.1);
/// assert_eq!(opts.strategy(), Strategy::Mutex);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReadOptions {
    strategy: Strategy,
    ttl: Duration,
    null_ttl: Duration,
    jitter: f64,
    lock_wait: Duration,
    lock_lease: Duration,
}

impl ReadOptions {
    /// `ttl` is the Redis TTL (cache-aside, mutex) or the logical lifetime (logical expiry).
    /// Defaults: null TTL 2 min, jitter ±10 %, lock wait 3 s, lock lease 10 s.
    ///
    /// ```
    /// let o = hmdp_cache::ReadOptions::new(hmdp_cache::Strategy::CacheAside, std::time::Duration::from_secs(60));
    /// ```
    pub fn new(strategy: Strategy, ttl: Duration) -> Self {
        Self {
            strategy,
            ttl,
            null_ttl: Duration::from_secs(120),
            jitter: 0.1,
            lock_wait: Duration::from_secs(3),
            lock_lease: Duration::from_secs(10),
        }
    }

    /// How long "not found" is remembered (penetration protection).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = hmdp_cache::ReadOptions::new(hmdp_cache::Strategy::Mutex, Duration::from_secs(60)).null_ttl(Duration::from_secs(30));
    /// ```
    pub fn null_ttl(mut self, ttl: Duration) -> Self {
        self.null_ttl = ttl;
        self
    }

    /// Spread every TTL by ±`ratio` (0 to 0.5) so entries written together do not expire
    /// together (avalanche protection).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = hmdp_cache::ReadOptions::new(hmdp_cache::Strategy::Mutex, Duration::from_secs(60)).jitter(0.2);
    /// ```
    pub fn jitter(mut self, ratio: f64) -> Self {
        self.jitter = ratio.clamp(0.0, 0.5);
        self
    }

    /// How long a caller waits for another process's rebuild ([`Strategy::Mutex`]) before
    /// loading itself, and that rebuild lock's lease. The background rebuild of
    /// [`Strategy::LogicalExpiry`] does not wait and holds its lock with the lock client's
    /// watchdog instead of a lease, so a slow loader cannot let a second rebuild in.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = hmdp_cache::ReadOptions::new(hmdp_cache::Strategy::Mutex, Duration::from_secs(60))
    ///     .lock(Duration::from_secs(1), Duration::from_secs(5));
    /// ```
    pub fn lock(mut self, wait: Duration, lease: Duration) -> Self {
        self.lock_wait = wait;
        self.lock_lease = lease;
        self
    }

    /// The strategy.
    ///
    /// ```
    /// # let o = hmdp_cache::ReadOptions::new(hmdp_cache::Strategy::Mutex, std::time::Duration::from_secs(1));
    /// assert_eq!(o.strategy(), hmdp_cache::Strategy::Mutex);
    /// ```
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }
}

/// What to do when Redis is away during a read.
///
/// ```
/// use std::time::Duration;
/// use hmdp_cache::RedisDown;
/// // Serve some reads from the database, never more than 8 loads at once.
/// let policy = RedisDown::FallbackToLoader {
///     max_concurrent: 8,
///     max_wait: Duration::from_millis(100),
/// };
/// assert_ne!(policy, RedisDown::Fail);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisDown {
    /// Fail at once with [`ErrorKind::RedisUnavailable`].
    Fail,
    /// Call the loader directly, at most `max_concurrent` at a time; callers beyond that wait up
    /// to `max_wait` for a slot, then fail with [`ErrorKind::Overloaded`]. Concurrent reads of
    /// one key share one load (single-flight), as they do with Redis up. The database sees a
    /// bounded trickle instead of the whole read load.
    FallbackToLoader {
        /// Loader calls running at once at most (at least 1).
        max_concurrent: usize,
        /// How long a load waits for a free slot before failing with
        /// [`ErrorKind::Overloaded`].
        max_wait: Duration,
    },
}

/// Counters of a [`CacheClient`] (monotonic since creation), e.g. for metrics or for counting
/// database queries in tests.
///
/// ```no_run
/// use std::sync::atomic::Ordering;
/// # fn f(cache: &hmdp_cache::CacheClient<redis::aio::ConnectionManager>) {
/// let s = cache.stats();
/// let reads = s.l1_hits.load(Ordering::Relaxed)
///     + s.hits.load(Ordering::Relaxed)
///     + s.null_hits.load(Ordering::Relaxed)
///     + s.misses.load(Ordering::Relaxed);
/// println!("{reads} reads, {} database loads", s.loads.load(Ordering::Relaxed));
/// # }
/// ```
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct CacheStats {
    /// Reads answered by the in-process L1 (not counted in `hits` or `null_hits`).
    pub l1_hits: AtomicU64,
    /// Reads answered by a cached value (from Redis, or the L1).
    pub hits: AtomicU64,
    /// Reads answered by a cached "not found" (the null marker).
    pub null_hits: AtomicU64,
    /// Reads that found nothing usable in the cache (missing, or undecodable).
    pub misses: AtomicU64,
    /// Misses that the filter of [`CacheClient::get_or_load_filtered`] turned away.
    pub filtered: AtomicU64,
    /// Loader calls (database queries, for hmdp).
    pub loads: AtomicU64,
    /// Background rebuilds of logically expired entries.
    pub rebuilds: AtomicU64,
    /// Loader calls made because Redis was away (concurrent reads of one key share one).
    pub fallbacks: AtomicU64,
}

/// The stored form of a logically expiring entry (the original's `RedisData`).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Logical<T> {
    /// Unix time in milliseconds after which the value is stale.
    expire_time: u64,
    data: Option<T>,
}

struct Inner<C: LockConnection> {
    conn: C,
    prefix: String,
    locks: Option<LockClient<C>>,
    l1: Option<L1>,
    /// Single-flight of loads after a miss.
    flights: Flights,
    /// Single-flight of loads while Redis is away.
    fallback_flights: Flights,
    /// Keys with a background rebuild running in this process.
    rebuilding: Claims,
    fallback: RedisDown,
    fallback_slots: Option<Semaphore>,
    stats: CacheStats,
}

/// A typed cache over Redis. Cheap to clone.
///
/// ```no_run
/// use std::time::Duration;
/// use hmdp_cache::{CacheClient, ReadOptions, Strategy};
///
/// #[derive(serde::Serialize, serde::Deserialize, Clone)]
/// struct Shop { id: i64, name: String }
///
/// # async fn demo() -> hmdp_cache::Result<()> {
/// let redis = redis::Client::open("redis://127.0.0.1/").unwrap();
/// let conn = redis.get_connection_manager().await?;
/// let locks = hmdp_lock::LockClient::builder(conn.clone()).subscriber(redis.clone()).build().unwrap();
/// let cache = CacheClient::builder(conn).key_prefix("app:").locks(locks).build();
///
/// let opts = ReadOptions::new(Strategy::Mutex, Duration::from_secs(1800));
/// let shop: Option<Shop> = cache
///     .get_or_load("cache:shop:1", &opts, || async {
///         // the database query; Ok(None) when there is no such shop
///         Ok::<_, std::io::Error>(Some(Shop { id: 1, name: "面馆".into() }))
///     })
///     .await?;
/// # Ok(()) }
/// ```
pub struct CacheClient<C: LockConnection> {
    inner: Arc<Inner<C>>,
}

impl<C: LockConnection> Clone for CacheClient<C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<C: LockConnection> std::fmt::Debug for CacheClient<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheClient")
            .field("prefix", &self.inner.prefix)
            .field("locks", &self.inner.locks.is_some())
            .field("l1", &self.inner.l1.is_some())
            .finish()
    }
}

/// Builds a [`CacheClient`]: a connection, then optionally a key prefix, a lock client for
/// cross-process rebuilds, an L1 and a Redis-down policy.
///
/// ```no_run
/// use std::time::Duration;
/// use hmdp_cache::{CacheClient, L1Options, RedisDown};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let redis = redis::Client::open("redis://127.0.0.1/")?;
/// let conn = redis.get_connection_manager().await?;
/// let locks = hmdp_lock::LockClient::builder(conn.clone()).subscriber(redis.clone()).build()?;
/// let cache = CacheClient::builder(conn)
///     .key_prefix("app:")
///     .locks(locks)
///     .l1(L1Options::new(10_000, Duration::from_secs(1)), redis, "app:cache:l1")
///     .await?
///     .on_redis_down(RedisDown::FallbackToLoader {
///         max_concurrent: 8,
///         max_wait: Duration::from_millis(100),
///     })
///     .build();
/// # Ok(()) }
/// ```
pub struct CacheClientBuilder<C: LockConnection> {
    conn: C,
    prefix: String,
    locks: Option<LockClient<C>>,
    l1: Option<L1>,
    fallback: RedisDown,
}

impl<C: LockConnection> CacheClient<C> {
    /// Starts building a client on `conn`.
    ///
    /// ```no_run
    /// # async fn demo(conn: redis::aio::ConnectionManager) {
    /// let cache = hmdp_cache::CacheClient::builder(conn).key_prefix("app:").build();
    /// # }
    /// ```
    pub fn builder(conn: C) -> CacheClientBuilder<C> {
        CacheClientBuilder {
            conn,
            prefix: String::new(),
            locks: None,
            l1: None,
            fallback: RedisDown::Fail,
        }
    }

    /// The client's counters.
    ///
    /// ```no_run
    /// # fn f(c: &hmdp_cache::CacheClient<redis::aio::ConnectionManager>) {
    /// use std::sync::atomic::Ordering;
    /// println!("loads so far: {}", c.stats().loads.load(Ordering::Relaxed));
    /// # }
    /// ```
    pub fn stats(&self) -> &CacheStats {
        &self.inner.stats
    }

    /// The full Redis key for `key` (with the prefix).
    ///
    /// ```no_run
    /// # fn f(c: &hmdp_cache::CacheClient<redis::aio::ConnectionManager>) {
    /// assert!(c.redis_key("cache:shop:1").ends_with("cache:shop:1"));
    /// # }
    /// ```
    pub fn redis_key(&self, key: &str) -> String {
        format!("{}{key}", self.inner.prefix)
    }

    /// Reads `key`; on a miss runs `loader` (at most once per key at a time in this process,
    /// and with [`Strategy::Mutex`] / [`Strategy::LogicalExpiry`] once across processes) and
    /// stores its answer — the value, or the null marker for `Ok(None)`.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(cache: hmdp_cache::CacheClient<redis::aio::ConnectionManager>) -> hmdp_cache::Result<()> {
    /// let opts = hmdp_cache::ReadOptions::new(hmdp_cache::Strategy::CacheAside, Duration::from_secs(60));
    /// let n: Option<u32> = cache.get_or_load("answer", &opts, || async { Ok::<_, std::io::Error>(Some(42)) }).await?;
    /// # Ok(()) }
    /// ```
    pub async fn get_or_load<T, F, Fut, E>(
        &self,
        key: &str,
        opts: &ReadOptions,
        loader: F,
    ) -> Result<Option<T>>
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = std::result::Result<Option<T>, E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        self.get_or_load_filtered(key, opts, || async { true }, loader)
            .await
    }

    /// Like [`CacheClient::get_or_load`], with a gate consulted only on a miss: when `filter`
    /// answers `false` (e.g. a Bloom filter saying "this id never existed"), the read returns
    /// `None` without loading and without storing a null marker. Hits never pay for the filter.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(cache: hmdp_cache::CacheClient<redis::aio::ConnectionManager>,
    /// #               bloom: hmdp_cache::BloomFilter<redis::aio::ConnectionManager>) -> hmdp_cache::Result<()> {
    /// let opts = hmdp_cache::ReadOptions::new(hmdp_cache::Strategy::Mutex, Duration::from_secs(60));
    /// let shop: Option<String> = cache
    ///     .get_or_load_filtered(
    ///         "cache:shop:7",
    ///         &opts,
    ///         move || async move { bloom.might_contain(b"7").await.unwrap_or(true) },
    ///         || async { Ok::<_, std::io::Error>(Some("shop 7".to_owned())) },
    ///     )
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn get_or_load_filtered<T, G, GFut, F, Fut, E>(
        &self,
        key: &str,
        opts: &ReadOptions,
        filter: G,
        loader: F,
    ) -> Result<Option<T>>
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
        G: FnOnce() -> GFut,
        GFut: Future<Output = bool>,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = std::result::Result<Option<T>, E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        match self
            .get_or_load_json_filtered(key, opts, filter, loader)
            .await?
        {
            Some(json) => Ok(Some(serde_json::from_str(&json)?)),
            None => Ok(None),
        }
    }

    /// Like [`CacheClient::get_or_load_filtered`], but answers the value as JSON text, exactly
    /// as `serde_json::to_string` writes `T`. For readers that only pass the value on (an HTTP
    /// answer): a read the L1 answers decodes and encodes nothing. An entry read from Redis is
    /// decoded and encoded again before it is kept or returned, so text in another format (an
    /// older version's, another program's) never reaches the caller as it is.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Shop { id: i64, name: String }
    /// # async fn demo(cache: hmdp_cache::CacheClient<redis::aio::ConnectionManager>) -> hmdp_cache::Result<()> {
    /// let opts = hmdp_cache::ReadOptions::new(hmdp_cache::Strategy::Mutex, Duration::from_secs(60));
    /// let json = cache
    ///     .get_or_load_json_filtered(
    ///         "cache:shop:7",
    ///         &opts,
    ///         || async { true },
    ///         || async { Ok::<_, std::io::Error>(Some(Shop { id: 7, name: "面馆".into() })) },
    ///     )
    ///     .await?;
    /// assert_eq!(json.as_deref(), Some(r#"{"id":7,"name":"面馆"}"#));
    /// # Ok(()) }
    /// ```
    pub async fn get_or_load_json_filtered<T, G, GFut, F, Fut, E>(
        &self,
        key: &str,
        opts: &ReadOptions,
        filter: G,
        loader: F,
    ) -> Result<Option<Arc<str>>>
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
        G: FnOnce() -> GFut,
        GFut: Future<Output = bool>,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = std::result::Result<Option<T>, E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        let full = self.redis_key(key);
        if let Some(l1) = &self.inner.l1
            && let Some(found) = l1.get(&full).await
        {
            self.inner.stats.l1_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(self.found(found, full, opts, || wrap_loader(loader)));
        }
        // Boxed: the state of everything past the L1 (Redis, the loader, the lock) would
        // otherwise be part of this future, which its caller allocates and copies for every
        // read: 1.9 KB for a shop.
        Box::pin(self.read_through(full, opts, filter, wrap_loader(loader))).await
    }

    /// A read past the L1: Redis, then on a miss the filter and the (single-flight) load.
    async fn read_through<T, G, GFut>(
        &self,
        full: String,
        opts: &ReadOptions,
        filter: G,
        loader: BoxLoader<T>,
    ) -> Result<Option<Arc<str>>>
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
        G: FnOnce() -> GFut,
        GFut: Future<Output = bool>,
    {
        let found = match self.read_stored::<T>(&full, opts.strategy).await {
            Ok(found) => found,
            Err(e) if e.is_redis_unavailable() => return self.fallback(&full, loader, e).await,
            Err(e) => return Err(e),
        };
        if let Some(found) = found {
            return Ok(self.found(found, full, opts, || loader));
        }
        self.inner.stats.misses.fetch_add(1, Ordering::Relaxed);
        if !filter().await {
            self.inner.stats.filtered.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        let me = self.clone();
        let opts2 = opts.clone();
        let full2 = full.clone();
        self.inner
            .flights
            .run(&full, move || async move {
                me.rebuild::<T>(&full2, &opts2, loader).await
            })
            .await
    }

    /// Stores `value` at `key` for `ttl` spread by ±`jitter`, and drops `key` from every
    /// instance's L1.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(cache: hmdp_cache::CacheClient<redis::aio::ConnectionManager>) -> hmdp_cache::Result<()> {
    /// cache.set("greeting", &"你好", Duration::from_secs(60), 0.1).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set<T: Serialize>(
        &self,
        key: &str,
        value: &T,
        ttl: Duration,
        jitter: f64,
    ) -> Result<()> {
        let json = serde_json::to_string(value)?;
        self.write(
            &self.redis_key(key),
            &json,
            Some(jittered(ttl, jitter)),
            Publish::Yes,
        )
        .await
    }

    /// Stores `value` at `key` as a logically expiring entry (no Redis TTL) that turns stale
    /// after `ttl` spread by ±`jitter` (so keys warmed up together do not all turn stale, and
    /// rebuild, together): how hot keys are warmed up before traffic arrives.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(cache: hmdp_cache::CacheClient<redis::aio::ConnectionManager>) -> hmdp_cache::Result<()> {
    /// cache.set_logical("cache:shop:1", &"hot shop", Duration::from_secs(20), 0.1).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_logical<T: Serialize>(
        &self,
        key: &str,
        value: &T,
        ttl: Duration,
        jitter: f64,
    ) -> Result<()> {
        let json = serde_json::to_string(&Logical {
            expire_time: logical_expiry(ttl, jitter),
            data: Some(value),
        })?;
        self.write(&self.redis_key(key), &json, None, Publish::Yes)
            .await
    }

    /// Deletes `key` from Redis and from every instance's L1 (cache-aside: call it after the
    /// database write, never before).
    ///
    /// ```no_run
    /// # async fn demo(cache: hmdp_cache::CacheClient<redis::aio::ConnectionManager>) -> hmdp_cache::Result<()> {
    /// // UPDATE tb_shop ... ; then:
    /// cache.invalidate("cache:shop:1").await?;
    /// # Ok(()) }
    /// ```
    pub async fn invalidate(&self, key: &str) -> Result<()> {
        let full = self.redis_key(key);
        let _: () = redis::cmd("DEL")
            .arg(&full)
            .query_async(&mut self.inner.conn.clone())
            .await?;
        if let Some(l1) = &self.inner.l1 {
            l1.invalidate_everywhere(&mut self.inner.conn.clone(), &full)
                .await?;
        }
        Ok(())
    }

    fn count_hit(&self, null: bool) {
        let c = if null {
            &self.inner.stats.null_hits
        } else {
            &self.inner.stats.hits
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// A cached entry's answer; a stale one starts its background rebuild (with the loader
    /// `loader` makes: boxed only then).
    fn found<T>(
        &self,
        found: Cached,
        full: String,
        opts: &ReadOptions,
        loader: impl FnOnce() -> BoxLoader<T>,
    ) -> Option<Arc<str>>
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        if found.is_stale() {
            self.spawn_rebuild::<T>(full, opts.clone(), loader());
        }
        self.count_hit(found.json.is_none());
        found.json
    }

    /// The entry at `full` in Redis, in canonical form (then kept in the L1). An entry that does
    /// not decode in `strategy`'s format (the strategy was switched, or another version wrote
    /// it) is dropped and reported missing: a miss, not an error.
    async fn read_stored<T>(&self, full: &str, strategy: Strategy) -> Result<Option<Cached>>
    where
        T: Serialize + DeserializeOwned,
    {
        let Some(raw) = self.read_redis(full).await? else {
            return Ok(None);
        };
        match Cached::decode::<T>(&raw, strategy) {
            Ok(found) => {
                if let Some(l1) = &self.inner.l1 {
                    l1.insert(full, found.clone()).await;
                }
                Ok(Some(found))
            }
            Err(e) => {
                tracing::warn!(key = %full, error = %e, "cached value does not decode; treating it as a miss");
                self.discard(full).await;
                Ok(None)
            }
        }
    }

    /// Stores `value`. With [`Publish::Yes`] every instance (this one included) drops the key
    /// from its L1; otherwise only this instance's L1 gets the new value.
    async fn write(
        &self,
        full: &str,
        value: &str,
        ttl: Option<Duration>,
        publish: Publish,
    ) -> Result<()> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(full).arg(value);
        if let Some(ttl) = ttl {
            cmd.arg("PX").arg(ttl.as_millis().max(1) as u64);
        }
        let _: () = cmd.query_async(&mut self.inner.conn.clone()).await?;
        if let Some(l1) = &self.inner.l1 {
            match publish {
                Publish::Yes => {
                    l1.invalidate_everywhere(&mut self.inner.conn.clone(), full)
                        .await?
                }
                Publish::No(cached) => l1.insert(full, cached).await,
            }
        }
        Ok(())
    }

    /// Forgets an entry that cannot be decoded: from this instance's L1 and from Redis. A
    /// failed delete is only logged; the load that follows overwrites the entry anyway.
    async fn discard(&self, full: &str) {
        if let Some(l1) = &self.inner.l1 {
            l1.invalidate_local(full).await;
        }
        let deleted: redis::RedisResult<()> = redis::cmd("DEL")
            .arg(full)
            .query_async(&mut self.inner.conn.clone())
            .await;
        if let Err(e) = deleted {
            tracing::debug!(key = full, error = %e, "could not delete an undecodable entry");
        }
    }

    /// Loads and stores a missing entry; the lock (if any) makes it once across processes.
    async fn rebuild<T>(
        &self,
        full: &str,
        opts: &ReadOptions,
        loader: BoxLoader<T>,
    ) -> Result<Option<Arc<str>>>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        let use_lock = opts.strategy != Strategy::CacheAside;
        let guard = match (&self.inner.locks, use_lock) {
            (Some(locks), true) => {
                let lock = locks.lock(full)?;
                let guard = lock.try_lock(opts.lock_wait, Some(opts.lock_lease)).await?;
                // Double check: whoever held the lock may have stored the entry meanwhile (in
                // our format: an entry another strategy wrote is replaced, not returned).
                if let Some(v) = self.read_redis(full).await?
                    && let Ok(found) = Cached::decode::<T>(&v, opts.strategy)
                {
                    if let Some(g) = guard {
                        let _ = g.unlock().await;
                    }
                    return Ok(found.json);
                }
                if guard.is_none() {
                    tracing::warn!(key = full, "rebuild lock wait ran out; loading without it");
                }
                guard
            }
            _ => None,
        };
        let result = self.load_and_store(full, opts, loader, false).await;
        if let Some(g) = guard {
            let _ = g.unlock().await;
        }
        result
    }

    /// Loads, stores the answer, and returns it as canonical JSON. `replaces` says whether the
    /// entry may be in other instances' L1 (a stale one being rebuilt): if so they are told to
    /// drop it, else this instance's L1 gets the new entry.
    async fn load_and_store<T>(
        &self,
        full: &str,
        opts: &ReadOptions,
        loader: BoxLoader<T>,
        replaces: bool,
    ) -> Result<Option<Arc<str>>>
    where
        T: Serialize + Send + 'static,
    {
        self.inner.stats.loads.fetch_add(1, Ordering::Relaxed);
        let value = loader().await?;
        let json: Option<Arc<str>> = match &value {
            Some(v) => Some(Arc::from(serde_json::to_string(v)?)),
            None => None,
        };
        let (stored, ttl, expire_ms) = match (&value, &json, opts.strategy) {
            (None, ..) | (_, None, _) => (
                NULL_MARKER.to_owned(),
                Some(jittered(opts.null_ttl, opts.jitter)),
                None,
            ),
            (Some(v), _, Strategy::LogicalExpiry) => {
                let expire_time = logical_expiry(opts.ttl, opts.jitter);
                let stored = serde_json::to_string(&Logical {
                    expire_time,
                    data: Some(v),
                })?;
                (stored, None, Some(expire_time))
            }
            (Some(_), Some(json), _) => (
                json.to_string(),
                Some(jittered(opts.ttl, opts.jitter)),
                None,
            ),
        };
        let publish = if replaces {
            Publish::Yes
        } else {
            Publish::No(Cached {
                json: json.clone(),
                expire_ms,
            })
        };
        self.write(full, &stored, ttl, publish).await?;
        Ok(json)
    }

    async fn read_redis(&self, full: &str) -> Result<Option<Arc<str>>> {
        let v: Option<String> = redis::cmd("GET")
            .arg(full)
            .query_async(&mut self.inner.conn.clone())
            .await?;
        Ok(v.map(Arc::from))
    }

    /// Starts a background rebuild of a logically expired entry unless this process already
    /// runs one for the key. The check is synchronous, so a burst of stale reads spawns one
    /// task, not one task per read parked on the rebuild.
    fn spawn_rebuild<T>(&self, full: String, opts: ReadOptions, loader: BoxLoader<T>)
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let Some(claim) = self.inner.rebuilding.claim(&full) else {
            return;
        };
        let me = self.clone();
        tokio::spawn(async move {
            let _claim = claim;
            if let Err(e) = me.background_rebuild::<T>(&full, &opts, loader).await {
                tracing::warn!(key = %full, error = %e, "background cache rebuild failed; serving stale");
            }
        });
    }

    /// One background rebuild, once across processes: the lock is taken without waiting (if
    /// another process holds it, that process is rebuilding). It is held with the lock
    /// client's watchdog rather than a fixed lease, so a loader slower than any lease cannot
    /// let a second rebuild in; if this process dies, the lock lapses after one watchdog
    /// timeout.
    async fn background_rebuild<T>(
        &self,
        full: &str,
        opts: &ReadOptions,
        loader: BoxLoader<T>,
    ) -> Result<()>
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let guard = match &self.inner.locks {
            Some(locks) => match locks.lock(full)?.try_lock(Duration::ZERO, None).await? {
                Some(g) => Some(g),
                None => return Ok(()),
            },
            None => None,
        };
        let result = self.rebuild_if_stale::<T>(full, opts, loader).await;
        if let Some(g) = guard {
            let _ = g.unlock().await;
        }
        result
    }

    async fn rebuild_if_stale<T>(
        &self,
        full: &str,
        opts: &ReadOptions,
        loader: BoxLoader<T>,
    ) -> Result<()>
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        // Someone may have refreshed it between our read and the lock.
        let fresh = match self.read_redis(full).await? {
            Some(raw) => Cached::decode::<T>(&raw, opts.strategy).is_ok_and(|c| !c.is_stale()),
            None => false,
        };
        if fresh {
            // What we read was a stale copy in our L1; Redis already has the new value.
            if let Some(l1) = &self.inner.l1 {
                l1.invalidate_local(full).await;
            }
            return Ok(());
        }
        self.inner.stats.rebuilds.fetch_add(1, Ordering::Relaxed);
        // Other instances may hold the stale entry in their L1: tell them to drop it.
        self.load_and_store(full, opts, loader, true)
            .await
            .map(drop)
    }

    /// Answers a read from the loader while Redis is away. Concurrent reads of one key share
    /// one load (single-flight), and at most `max_concurrent` loads run at once.
    async fn fallback<T>(
        &self,
        full: &str,
        loader: BoxLoader<T>,
        cause: Error,
    ) -> Result<Option<Arc<str>>>
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let RedisDown::FallbackToLoader { max_wait, .. } = self.inner.fallback else {
            return Err(cause);
        };
        let me = self.clone();
        self.inner
            .fallback_flights
            .run(full, move || async move {
                let slots = me
                    .inner
                    .fallback_slots
                    .as_ref()
                    .ok_or_else(|| Error::new(ErrorKind::Overloaded, "no fallback slots"))?;
                let permit = tokio::time::timeout(max_wait, slots.acquire())
                    .await
                    .map_err(|_| {
                        Error::new(
                            ErrorKind::Overloaded,
                            "redis is unavailable and the database fallback is at its limit",
                        )
                    })?
                    .map_err(|_| Error::new(ErrorKind::Overloaded, "fallback closed"))?;
                me.inner.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
                me.inner.stats.loads.fetch_add(1, Ordering::Relaxed);
                let value = loader().await?;
                drop(permit);
                // The waiters get the value as JSON, like a cached entry.
                Ok(match value {
                    Some(v) => Some(Arc::from(serde_json::to_string(&v)?)),
                    None => None,
                })
            })
            .await
    }
}

/// Whether a write tells every instance to drop the key from its L1.
enum Publish {
    /// Yes: the write replaces a value other instances may hold.
    Yes,
    /// No: the key was missing, so no L1 holds it (beyond its short TTL); this instance's L1
    /// gets the new entry.
    No(Cached),
}

type BoxLoader<T> = Box<
    dyn FnOnce() -> futures_util::future::BoxFuture<'static, Result<Option<T>>> + Send + 'static,
>;

fn wrap_loader<T, F, Fut, E>(loader: F) -> BoxLoader<T>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = std::result::Result<Option<T>, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    Box::new(move || Box::pin(async move { loader().await.map_err(Error::loader) }))
}

impl<C: LockConnection> CacheClientBuilder<C> {
    /// Prefix for every key this client touches (lock keys get the lock client's own prefix).
    ///
    /// ```no_run
    /// # fn f(b: hmdp_cache::CacheClientBuilder<redis::aio::ConnectionManager>) {
    /// let b = b.key_prefix("hmdp:");
    /// # }
    /// ```
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The lock client used for cross-process rebuild mutexes. Without one, rebuilds are
    /// single-flight per process only.
    ///
    /// ```no_run
    /// # fn f(b: hmdp_cache::CacheClientBuilder<redis::aio::ConnectionManager>, l: hmdp_lock::LockClient) {
    /// let b = b.locks(l);
    /// # }
    /// ```
    pub fn locks(mut self, locks: LockClient<C>) -> Self {
        self.locks = Some(locks);
        self
    }

    /// An in-process L1 in front of Redis, kept coherent across instances by invalidation
    /// messages on `channel` (see [`crate::L1Options`]), heard through a subscription opened
    /// by `subscriber` (a `redis::Client`, or any [`hmdp_lock::PubSubSource`]).
    ///
    /// ```no_run
    /// # async fn f(b: hmdp_cache::CacheClientBuilder<redis::aio::ConnectionManager>) -> hmdp_cache::Result<()> {
    /// let sub = redis::Client::open("redis://127.0.0.1/").unwrap();
    /// let b = b.l1(hmdp_cache::L1Options::new(10_000, std::time::Duration::from_secs(5)), sub, "app:cache:l1").await?;
    /// # Ok(()) }
    /// ```
    pub async fn l1(
        mut self,
        options: crate::L1Options,
        subscriber: impl hmdp_lock::PubSubSource,
        channel: &str,
    ) -> Result<Self> {
        self.l1 = Some(L1::start(options, subscriber, channel.to_owned()).await?);
        Ok(self)
    }

    /// What to do when Redis is away during a read (default: fail).
    ///
    /// ```no_run
    /// # fn f(b: hmdp_cache::CacheClientBuilder<redis::aio::ConnectionManager>) {
    /// let b = b.on_redis_down(hmdp_cache::RedisDown::FallbackToLoader {
    ///     max_concurrent: 8, max_wait: std::time::Duration::from_millis(100) });
    /// # }
    /// ```
    pub fn on_redis_down(mut self, policy: RedisDown) -> Self {
        self.fallback = policy;
        self
    }

    /// Finishes the client.
    ///
    /// ```no_run
    /// # fn f(b: hmdp_cache::CacheClientBuilder<redis::aio::ConnectionManager>) {
    /// let cache = b.build();
    /// # }
    /// ```
    pub fn build(self) -> CacheClient<C> {
        let fallback_slots = match self.fallback {
            RedisDown::FallbackToLoader { max_concurrent, .. } => {
                Some(Semaphore::new(max_concurrent.max(1)))
            }
            RedisDown::Fail => None,
        };
        CacheClient {
            inner: Arc::new(Inner {
                conn: self.conn,
                prefix: self.prefix,
                locks: self.locks,
                l1: self.l1,
                flights: Flights::default(),
                fallback_flights: Flights::default(),
                rebuilding: Claims::default(),
                fallback: self.fallback,
                fallback_slots,
                stats: CacheStats::default(),
            }),
        }
    }
}

/// An entry as the L1 keeps it and reads return it: the value as JSON in this client's own
/// encoding (`None` for the null marker), and a logically expiring entry's expiry time.
#[derive(Clone)]
pub(crate) struct Cached {
    json: Option<Arc<str>>,
    /// Unix time in milliseconds after which a [`Strategy::LogicalExpiry`] entry is stale.
    expire_ms: Option<u64>,
}

impl Cached {
    /// Decodes a stored entry in the format `strategy` writes (plain JSON, or a [`Logical`]
    /// wrapper) and encodes its value again. An entry in the other format (written before the
    /// strategy was switched) is an error, which readers treat as a miss.
    fn decode<T: Serialize + DeserializeOwned>(raw: &str, strategy: Strategy) -> Result<Self> {
        if raw == NULL_MARKER {
            return Ok(Self {
                json: None,
                expire_ms: None,
            });
        }
        let (value, expire_ms) = if strategy == Strategy::LogicalExpiry {
            let entry: Logical<T> = serde_json::from_str(raw)?;
            (entry.data, Some(entry.expire_time))
        } else {
            (Some(serde_json::from_str::<T>(raw)?), None)
        };
        let json = match value {
            Some(v) => Some(Arc::from(serde_json::to_string(&v)?)),
            None => None,
        };
        Ok(Self { json, expire_ms })
    }

    /// A logically expiring entry past its expiry time.
    fn is_stale(&self) -> bool {
        self.expire_ms.is_some_and(|t| t <= now_ms())
    }
}

/// The expiry time (unix ms) of a logical entry written now with lifetime `ttl` ± `jitter`.
fn logical_expiry(ttl: Duration, jitter: f64) -> u64 {
    now_ms().saturating_add(u64::try_from(jittered(ttl, jitter).as_millis()).unwrap_or(u64::MAX))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `ttl` spread uniformly by ±`ratio`.
///
/// ```
/// use std::time::Duration;
/// let t = hmdp_cache::jittered(Duration::from_secs(100), 0.1);
/// assert!(t >= Duration::from_secs(90) && t <= Duration::from_secs(110));
/// ```
pub fn jittered(ttl: Duration, ratio: f64) -> Duration {
    if ratio <= 0.0 || ttl.is_zero() {
        return ttl;
    }
    let f = rand::rng().random_range(1.0 - ratio..=1.0 + ratio);
    ttl.mul_f64(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_spreads_ttls_within_bounds() {
        let base = Duration::from_secs(1000);
        let ttls: Vec<Duration> = (0..1000).map(|_| jittered(base, 0.1)).collect();
        assert!(
            ttls.iter()
                .all(|t| *t >= Duration::from_secs(900) && *t <= Duration::from_secs(1100))
        );
        let distinct: std::collections::HashSet<u128> =
            ttls.iter().map(|t| t.as_millis()).collect();
        assert!(
            distinct.len() > 900,
            "ttls are spread, not equal: {}",
            distinct.len()
        );
        assert_eq!(jittered(base, 0.0), base);
    }
}
