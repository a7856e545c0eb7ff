//! The optional in-process L1 cache and its cross-instance invalidation.
//!
//! L1 holds decoded entries (the value as this client encodes it) for a short TTL. Every
//! write that replaces a value other instances may hold publishes the key on a channel —
//! [`CacheClient::invalidate`],
//! [`CacheClient::set`], [`CacheClient::set_logical`] and the background rebuild of a
//! logically expired entry — and every instance (itself included) drops the key from its L1
//! when the message arrives. The load that fills a *missing* entry does not publish: no
//! instance can hold a newer copy, only (for at most the L1 TTL) one read before the entry
//! expired in Redis. When a background rebuild finds that another process already refreshed
//! the entry, it drops its own L1 copy, which is where the stale value it saw came from.
//!
//! If the subscription breaks, messages may have been missed, so the whole L1 is cleared on
//! reconnect. The short TTL bounds staleness even then (and a read racing an invalidation can
//! put the old value back for one TTL, unless it is stored with
//! [`InvalidatedCache::insert_read_at`], which checks the invalidation's tombstone).
//!
//! The entries live in `quick_cache` rather than `moka`: every request reads the session cache
//! built on this, and a moka read records itself for the LRU and now and then runs moka's
//! housekeeping inline, about 5 % of a 404's CPU under load (docs/14-benchmarking.md, the 404's profile). The TTL
//! is checked when an entry is read.
//!
//! [`CacheClient::invalidate`]: crate::CacheClient::invalidate
//! [`CacheClient::set`]: crate::CacheClient::set
//! [`CacheClient::set_logical`]: crate::CacheClient::set_logical

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use hmdp_lock::{ChannelSubscription, Gap, PubSubSource};
use redis::aio::ConnectionLike;

use crate::Result;

/// Size and lifetime of the L1.
///
/// ```
/// let o = hmdp_cache::L1Options::new(10_000, std::time::Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct L1Options {
    /// Entries kept at most (least recently used ones are evicted first).
    pub max_entries: u64,
    /// How long an entry is kept at most: the bound on staleness when an invalidation
    /// message is missed.
    pub ttl: Duration,
}

impl L1Options {
    /// At most `max_entries` entries, each kept at most `ttl`.
    ///
    /// ```
    /// let o = hmdp_cache::L1Options::new(1_000, std::time::Duration::from_secs(2));
    /// assert_eq!(o.max_entries, 1_000);
    /// ```
    pub fn new(max_entries: u64, ttl: Duration) -> Self {
        Self { max_entries, ttl }
    }
}

/// An in-process cache whose entries every instance drops when one instance says so over Redis
/// pub/sub: the shop cache's L1, and anything else an application keeps in memory for a short
/// while and must forget everywhere at once (sessions after a logout, say).
///
/// If the subscription breaks, messages may have been missed, so every entry is dropped on
/// reconnect; the TTL bounds staleness even then.
///
/// ```no_run
/// # async fn demo() -> hmdp_cache::Result<()> {
/// use hmdp_cache::{InvalidatedCache, L1Options};
/// let client = redis::Client::open("redis://127.0.0.1:6379")?;
/// let sessions: InvalidatedCache<u64> =
///     InvalidatedCache::start(L1Options::new(100_000, std::time::Duration::from_secs(5)), client.clone(), "app:sessions:drop")
///         .await?;
/// sessions.insert("token-1", 42).await;
/// assert_eq!(sessions.get("token-1").await, Some(42));
/// // After a logout: gone here at once, and on every other instance when the message arrives.
/// sessions.invalidate_everywhere(&mut client.get_multiplexed_async_connection().await?, "token-1").await?;
/// # Ok(()) }
/// ```
pub struct InvalidatedCache<V = Arc<str>> {
    cache: Entries<V>,
    /// When each key was last invalidated (kept for a TTL at most, as many keys as entries): a
    /// value read from the source before then is stale.
    tombstones: Tombstones,
    ttl: Duration,
    channel: String,
    _listener: Arc<ListenerGuard>,
}

impl<V> Clone for InvalidatedCache<V> {
    fn clone(&self) -> Self {
        Self {
            cache: self.cache.clone(),
            tombstones: self.tombstones.clone(),
            ttl: self.ttl,
            channel: self.channel.clone(),
            _listener: self._listener.clone(),
        }
    }
}

impl<V: Clone> std::fmt::Debug for InvalidatedCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InvalidatedCache")
            .field("channel", &self.channel)
            .field("entries", &self.cache.len())
            .finish()
    }
}

pub(crate) type L1 = InvalidatedCache<crate::client::Cached>;

type Entries<V> = Arc<quick_cache::sync::Cache<String, Timed<V>>>;

/// The instant each key was last invalidated, and when everything was.
#[derive(Clone)]
struct Tombstones(Arc<TombstonesInner>);

struct TombstonesInner {
    keys: quick_cache::sync::Cache<String, Instant>,
    /// When every entry was last dropped (the subscription broke: anything may be stale).
    cleared: std::sync::Mutex<Option<Instant>>,
}

impl Tombstones {
    fn new(capacity: usize) -> Self {
        Self(Arc::new(TombstonesInner {
            keys: quick_cache::sync::Cache::new(capacity),
            cleared: std::sync::Mutex::new(None),
        }))
    }

    fn bury(&self, key: &str) {
        self.0.keys.insert(key.to_owned(), Instant::now());
    }

    fn bury_all(&self) {
        *self.0.cleared.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// Whether `key` was invalidated at or after `read_at`.
    fn since(&self, key: &str, read_at: Instant) -> bool {
        let cleared = *self.0.cleared.lock().unwrap_or_else(|p| p.into_inner());
        cleared.is_some_and(|at| at >= read_at)
            || self.0.keys.get(key).is_some_and(|at| at >= read_at)
    }
}

/// A value and the instant it expires.
#[derive(Clone)]
struct Timed<V> {
    value: V,
    until: Instant,
}

struct ListenerGuard(tokio::task::JoinHandle<()>);

impl Drop for ListenerGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<V: Clone + Send + Sync + 'static> InvalidatedCache<V> {
    /// A cache of `options`' size and TTL that drops the keys published on `channel`
    /// (subscribed through `subscriber` before this returns, so no later message is missed;
    /// after a lost subscription, `subscriber` is asked for a new connection, which lets a
    /// [`PubSubSource`] that tracks a moving primary follow it).
    pub async fn start(
        options: L1Options,
        subscriber: impl PubSubSource,
        channel: impl Into<String>,
    ) -> Result<Self> {
        let channel = channel.into();
        let capacity = usize::try_from(options.max_entries).unwrap_or(usize::MAX);
        let cache: Entries<V> = Arc::new(quick_cache::sync::Cache::new(capacity));
        let tombstones = Tombstones::new(capacity);
        // Subscribe before returning, so no invalidation published after start is missed.
        let sub = ChannelSubscription::open(subscriber, channel.clone()).await?;
        let handle = tokio::spawn(listen(sub, cache.clone(), tombstones.clone()));
        Ok(Self {
            cache,
            tombstones,
            ttl: options.ttl,
            channel,
            _listener: Arc::new(ListenerGuard(handle)),
        })
    }

    /// The entry of `key`, if this instance holds it.
    pub async fn get(&self, key: &str) -> Option<V> {
        let entry = self.cache.get(key)?;
        let now = Instant::now();
        if entry.until > now {
            return Some(entry.value);
        }
        self.cache.remove_if(key, |e| e.until <= now);
        None
    }

    /// Keeps `value` under `key` for at most the TTL.
    pub async fn insert(&self, key: &str, value: V) {
        let until = Instant::now() + self.ttl;
        self.cache.insert(key.to_owned(), Timed { value, until });
    }

    /// Keeps `value`, read from the source at `read_at`, under `key` until `read_at` plus the
    /// TTL, unless `key` was invalidated (here, or by a message from another instance) at or
    /// after `read_at`: a read that raced an invalidation cannot put the old value back.
    ///
    /// The tombstones that decide this are kept for as many keys as the cache holds entries;
    /// more invalidations than that within one TTL can push one out early and let its race
    /// through, for one TTL at most.
    pub async fn insert_read_at(&self, key: &str, value: V, read_at: Instant) {
        let until = read_at + self.ttl;
        if until <= Instant::now() {
            return;
        }
        self.cache.insert(key.to_owned(), Timed { value, until });
        // Checked after the insert: an invalidation that lands between the check and the insert
        // has left its tombstone before dropping the key (see `drop_key`), so one of the two
        // removes the value.
        if self.tombstones.since(key, read_at) {
            self.cache.remove(key);
        }
    }

    /// Drops `key` from this instance only.
    pub async fn invalidate_local(&self, key: &str) {
        drop_key(&self.cache, &self.tombstones, key);
    }

    /// Drops `key` here and tells every instance (through `conn`) to drop it too.
    pub async fn invalidate_everywhere<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        key: &str,
    ) -> Result<()> {
        drop_key(&self.cache, &self.tombstones, key);
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&self.channel)
            .arg(key)
            .query_async(conn)
            .await?;
        Ok(())
    }
}

/// Drops `key`, its tombstone first.
fn drop_key<V: Clone>(cache: &Entries<V>, tombstones: &Tombstones, key: &str) {
    tombstones.bury(key);
    cache.remove(key);
}

/// Drops every entry, the tombstone first.
fn drop_all<V: Clone>(cache: &Entries<V>, tombstones: &Tombstones) {
    tombstones.bury_all();
    cache.clear();
}

/// Drops the keys published on the subscription's channel, and everything at each gap (a
/// message may have been missed in it).
async fn listen<V: Clone + Send + Sync + 'static>(
    mut sub: ChannelSubscription,
    cache: Entries<V>,
    tombstones: Tombstones,
) {
    loop {
        match sub.next().await {
            Ok(msg) => {
                if let Ok(key) = msg.get_payload::<String>() {
                    drop_key(&cache, &tombstones, &key);
                }
            }
            Err(gap) => {
                drop_all(&cache, &tombstones);
                let channel = sub.channel();
                match gap {
                    Gap::Moved => {
                        tracing::info!(%channel, "the Redis primary moved; cache cleared, the invalidation subscription follows it")
                    }
                    Gap::Lost => {
                        tracing::warn!(%channel, "invalidation subscription lost; cache cleared, reconnecting")
                    }
                }
                sub.reopen(gap).await;
                // What was published before the new subscription is unknown.
                drop_all(&cache, &tombstones);
            }
        }
    }
}
