//! A Bloom filter in a plain Redis bitmap (no RedisBloom module needed), shared by every
//! instance of a service.
//!
//! Debian's Redis 7 has no `BF.*` commands, so the filter is a bitmap read with `BITFIELD_RO`
//! and written with `BITFIELD`/`SETBIT`. Its size comes from the expected number of items *n*
//! and the false-positive rate *p*: `m = ⌈−n·ln p / (ln 2)²⌉` bits and `k = round(m/n · ln 2)`
//! hash functions. Bit positions use double hashing over a 128-bit XXH3 of the item:
//! `h1 + i·h2 mod m`.
//!
//! ## Many instances, one set of parameters
//!
//! Bits only mean something with the *m* and *k* that set them: an instance checking with
//! other parameters than the writer reads the wrong bits and answers "absent" for items that
//! are there. So the parameters live in Redis, and **Redis is authoritative**:
//!
//! - The *config key* `{key}:config` (a slot mate of `key`) holds `m:k:id`; the bitmap is
//!   `{key}:bits:id`. A handle ([`BloomFilter::open`]) adopts whatever is installed; the
//!   [`BloomOptions`] you pass only size a filter you build.
//! - Every check reads the config in the same transaction (`MULTI`) as the bits. If it is not
//!   the config the handle uses, the handle adopts the new one and checks again, so an
//!   "absent" always comes from the installed filter with its own *m* and *k*.
//! - Every add is a script that sets the bits only if the config is still the handle's (else
//!   the handle adopts and retries), and bumps an add counter `{key}:adds`.
//! - [`BloomFilter::rebuild`] (first build, or bigger parameters) fills a *fresh* bitmap from
//!   a snapshot of the items, then one script installs it — swaps the config and deletes the
//!   old bitmap — only if the filter is still the one the handle knew (or none) and no add
//!   happened since the snapshot began. If items were added meanwhile it adds a new snapshot
//!   and tries again, so an item added to the old bitmap during a rebuild is never lost;
//!   readers never see a half-filled bitmap. If another instance installed first, the
//!   rebuild adopts that filter instead.
//! - The bitmap carries a sentinel bit at position *m*. A missing config or sentinel means the
//!   filter is gone (flushed, evicted): checks answer [`Membership::Missing`], never
//!   "absent", until someone rebuilds it.

use std::{
    future::Future,
    sync::{Arc, LazyLock, RwLock},
};

use redis::{Script, aio::ConnectionLike};

use crate::{Error, ErrorKind, Result};

/// Sets an item's bits if the filter is still the one the caller knows; counts every add.
/// KEYS: config, bitmap, add counter. ARGV: the config the caller knows ('' for none), then
/// the bit positions. Returns 1 when set, 0 when no filter is installed, or the config that is
/// installed instead of the caller's.
static ADD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
redis.call('INCR', KEYS[3])
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current ~= ARGV[1] then return current end
for i = 2, #ARGV do
  redis.call('SETBIT', KEYS[2], ARGV[i], 1)
end
return 1
",
    )
});

/// Installs a filled bitmap: compare-and-swap of the config, then the old bitmap is deleted.
/// KEYS: config, add counter, new bitmap, old bitmap (the new one when there is none). ARGV:
/// the config being replaced ('' for none), the add counter before the snapshot, the new
/// config. Returns 1 when installed, 0 when items were added since the snapshot began, or the
/// config someone else installed.
static INSTALL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[1] then return current end
if (redis.call('GET', KEYS[2]) or '0') ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[1], ARGV[3])
if KEYS[4] ~= KEYS[3] then redis.call('DEL', KEYS[4]) end
return 1
",
    )
});

/// How often an add follows a changed config, and a rebuild takes a new snapshot, before
/// giving up.
const ATTEMPTS: usize = 5;

/// The largest bitmap Redis allows is 2^32 bits (512 MiB); one bit goes to the sentinel.
const MAX_BITS: u64 = (1 << 32) - 1;

/// How big a Bloom filter must be.
///
/// ```
/// use hmdp_cache::BloomOptions;
/// let o = BloomOptions::new(1_000_000, 0.01);
/// assert_eq!(o.bits(), 9_585_059);
/// assert_eq!(o.hashes(), 7);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct BloomOptions {
    /// Items the filter is sized for; beyond that the false-positive rate climbs.
    pub expected_items: u64,
    /// Wanted false-positive rate, in (0, 1).
    pub false_positive_rate: f64,
}

impl BloomOptions {
    /// Options for `expected_items` items at `false_positive_rate`.
    ///
    /// ```
    /// let o = hmdp_cache::BloomOptions::new(10_000, 0.001);
    /// assert!(o.bits() > 10_000);
    /// ```
    pub fn new(expected_items: u64, false_positive_rate: f64) -> Self {
        Self {
            expected_items,
            false_positive_rate,
        }
    }

    /// The number of bits, `m`.
    ///
    /// ```
    /// assert_eq!(hmdp_cache::BloomOptions::new(1000, 0.01).bits(), 9586);
    /// ```
    pub fn bits(&self) -> u64 {
        let n = self.expected_items.max(1) as f64;
        let p = self.false_positive_rate;
        (-n * p.ln() / (std::f64::consts::LN_2.powi(2))).ceil() as u64
    }

    /// The number of hash functions, `k` (1 to 30).
    ///
    /// ```
    /// assert_eq!(hmdp_cache::BloomOptions::new(1000, 0.01).hashes(), 7);
    /// ```
    pub fn hashes(&self) -> u32 {
        let n = self.expected_items.max(1) as f64;
        ((self.bits() as f64 / n) * std::f64::consts::LN_2)
            .round()
            .clamp(1.0, 30.0) as u32
    }

    fn validate(&self) -> Result<()> {
        if !(self.false_positive_rate > 0.0 && self.false_positive_rate < 1.0) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "false_positive_rate must be in (0, 1)",
            ));
        }
        if self.expected_items == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "expected_items must be at least 1",
            ));
        }
        if self.bits() > MAX_BITS {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("{} bits exceed one Redis bitmap (2^32 - 1)", self.bits()),
            ));
        }
        Ok(())
    }
}

/// What a [`BloomFilter`] says about an item.
///
/// ```
/// use hmdp_cache::Membership;
/// let m = Membership::Missing;
/// // Only `Absent` rules an item out.
/// assert!(m != Membership::Absent);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Membership {
    /// Certainly never added: the installed filter has a zero among the item's bits.
    Absent,
    /// Probably added (or a false positive, at the filter's rate).
    MaybePresent,
    /// No filter is installed in Redis (never built, flushed, evicted): nothing can be ruled
    /// out until [`BloomFilter::rebuild`] installs one.
    Missing,
}

/// The installed filter as a handle knows it.
#[derive(Debug, Clone, Default, PartialEq)]
struct State {
    /// The config value in Redis (`None`: nothing installed).
    raw: Option<String>,
    /// Its parameters, if it parses.
    params: Option<Params>,
}

#[derive(Debug, Clone, PartialEq)]
struct Params {
    bits: u64,
    hashes: u32,
    bitmap: String,
}

impl State {
    fn parse(key: &str, raw: Option<String>) -> Self {
        let params = raw.as_deref().and_then(|r| parse_config(key, r));
        if raw.is_some() && params.is_none() {
            tracing::warn!(key, config = ?raw, "unreadable Bloom filter config; treating the filter as missing");
        }
        Self { raw, params }
    }
}

/// `m:k:id` → the parameters and the bitmap `{key}:bits:id`. The `m:k` of earlier versions
/// names the bitmap at `key` itself; it has no sentinel, so it reads as missing and is rebuilt.
fn parse_config(key: &str, raw: &str) -> Option<Params> {
    let mut parts = raw.splitn(3, ':');
    let bits: u64 = parts.next()?.parse().ok()?;
    let hashes: u32 = parts.next()?.parse().ok()?;
    if !(1..=MAX_BITS).contains(&bits) || !(1..=30).contains(&hashes) {
        return None;
    }
    let bitmap = match parts.next() {
        Some(id) if !id.is_empty() => crate::slot_mate(key, &format!("bits:{id}")),
        Some(_) => return None,
        None => key.to_owned(),
    };
    Some(Params {
        bits,
        hashes,
        bitmap,
    })
}

/// A Bloom filter stored in Redis, shared by every handle on the same key. Cheap to clone;
/// clones share what they know about the installed filter.
///
/// Redis is authoritative for the parameters: `{key}:config` names *m*, *k* and the bitmap,
/// every handle adopts it, every check reads it in one transaction with the bits (so an
/// "absent" never comes from bits checked with the wrong *m*/*k*), and every add is a script
/// that writes only under the config it was computed for. [`BloomFilter::rebuild`] fills a
/// fresh bitmap and swaps it in atomically, taking a new snapshot if items were added
/// meanwhile. A lost filter reads as [`Membership::Missing`], never as "absent".
///
/// ```no_run
/// use hmdp_cache::{BloomFilter, BloomOptions};
/// # async fn demo() -> hmdp_cache::Result<()> {
/// let conn = redis::Client::open("redis://127.0.0.1/").unwrap()
///     .get_multiplexed_async_connection().await?;
/// let ids = BloomFilter::open(conn, "bloom:shop").await?;
/// if ids.size().is_none() {
///     // Nothing installed yet: build it from the database (a closure, as a rebuild may need
///     // a second snapshot if items are added meanwhile).
///     ids.rebuild(BloomOptions::new(100_000, 0.001), || async {
///         Ok::<_, std::io::Error>(vec!["1".to_owned(), "2".to_owned()])
///     })
///     .await?;
/// }
/// ids.add(b"42").await?;
/// assert!(ids.might_contain(b"42").await?);   // never a false "no"
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct BloomFilter<C> {
    conn: C,
    key: String,
    config_key: String,
    adds_key: String,
    state: Arc<RwLock<State>>,
}

impl<C> std::fmt::Debug for BloomFilter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.read().map(|s| s.clone()).unwrap_or_default();
        f.debug_struct("BloomFilter")
            .field("key", &self.key)
            .field("config", &state.raw)
            .finish()
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> BloomFilter<C> {
    /// Opens the filter at `key` (the full Redis key), adopting the parameters installed in
    /// Redis. When none is installed the handle answers [`Membership::Missing`] until
    /// [`BloomFilter::rebuild`] (here or on another instance) installs one.
    ///
    /// ```no_run
    /// # async fn demo(conn: redis::aio::MultiplexedConnection) -> hmdp_cache::Result<()> {
    /// let f = hmdp_cache::BloomFilter::open(conn, "bloom:x").await?;
    /// println!("installed: {:?}", f.size());
    /// # Ok(()) }
    /// ```
    pub async fn open(conn: C, key: &str) -> Result<Self> {
        let filter = Self {
            conn,
            key: key.to_owned(),
            config_key: crate::slot_mate(key, "config"),
            adds_key: crate::slot_mate(key, "adds"),
            state: Arc::default(),
        };
        filter.refresh().await?;
        Ok(filter)
    }

    /// Re-reads the installed parameters from Redis. Checks and adds do this by themselves
    /// when the filter changed; call it to see a rebuild by another instance in
    /// [`BloomFilter::size`] before the next check.
    ///
    /// ```no_run
    /// # async fn demo(f: hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) -> hmdp_cache::Result<()> {
    /// f.refresh().await?;
    /// # Ok(()) }
    /// ```
    pub async fn refresh(&self) -> Result<()> {
        let raw: Option<String> = redis::cmd("GET")
            .arg(&self.config_key)
            .query_async(&mut self.conn.clone())
            .await?;
        self.adopt(raw);
        Ok(())
    }

    /// Builds a filter sized by `options` in a fresh bitmap from the items `snapshot` returns
    /// (your database query), and installs it in place of the one this handle knows — or of
    /// none. Returns `true` if it installed its filter; `false` if another instance installed
    /// one first (this handle then uses that one), or if items kept being added during every
    /// attempt (the old filter stays; it is still correct, only fuller).
    ///
    /// `snapshot` must return every item added so far (add an item only once it is in your
    /// database, as a shop is inserted before its id is added). It is called again when items
    /// were added while it ran, so no add is lost.
    ///
    /// ```no_run
    /// # async fn demo(f: hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) -> hmdp_cache::Result<()> {
    /// let installed = f
    ///     .rebuild(hmdp_cache::BloomOptions::new(200_000, 0.001), || async {
    ///         // SELECT id FROM tb_shop
    ///         Ok::<_, std::io::Error>((1..=1000).map(|i| i.to_string()).collect::<Vec<_>>())
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn rebuild<F, Fut, I, E>(
        &self,
        options: BloomOptions,
        mut snapshot: F,
    ) -> Result<bool>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<I, E>>,
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        options.validate()?;
        let replaced = self.state();
        let (bits, hashes) = (options.bits(), options.hashes());
        let id = format!("{:016x}", rand::random::<u64>());
        let config = format!("{bits}:{hashes}:{id}");
        let bitmap = crate::slot_mate(&self.key, &format!("bits:{id}"));
        let old_bitmap = replaced
            .params
            .as_ref()
            .map_or_else(|| bitmap.clone(), |p| p.bitmap.clone());
        let mut conn = self.conn.clone();
        // The sentinel first: the bitmap is allocated, and reads as intact once installed.
        let _: () = redis::cmd("SETBIT")
            .arg(&bitmap)
            .arg(bits)
            .arg(1)
            .query_async(&mut conn)
            .await?;
        let result = async {
            for _ in 0..ATTEMPTS {
                let adds: Option<String> = redis::cmd("GET")
                    .arg(&self.adds_key)
                    .query_async(&mut conn)
                    .await?;
                let items = snapshot().await.map_err(Error::loader)?;
                let items: Vec<I::Item> = items.into_iter().collect();
                fill(&mut conn, &bitmap, bits, hashes, items.iter().map(AsRef::as_ref)).await?;
                let outcome: redis::Value = INSTALL
                    .key(&self.config_key)
                    .key(&self.adds_key)
                    .key(&bitmap)
                    .key(&old_bitmap)
                    .arg(replaced.raw.as_deref().unwrap_or(""))
                    .arg(adds.as_deref().unwrap_or("0"))
                    .arg(&config)
                    .invoke_async(&mut conn)
                    .await?;
                match outcome {
                    redis::Value::Int(1) => {
                        self.adopt(Some(config));
                        return Ok(true);
                    }
                    redis::Value::Int(_) => continue, // items were added: snapshot again
                    other => {
                        self.adopt(Some(config_reply(other)?));
                        return Ok(false);
                    }
                }
            }
            tracing::warn!(key = %self.key, "items kept being added during every Bloom filter rebuild attempt; keeping the old filter");
            Ok(false)
        }
        .await;
        if !matches!(result, Ok(true)) {
            let _: redis::RedisResult<()> =
                redis::cmd("DEL").arg(&bitmap).query_async(&mut conn).await;
        }
        result
    }

    /// Adds an item.
    ///
    /// ```no_run
    /// # async fn demo(f: hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) -> hmdp_cache::Result<()> {
    /// f.add(b"shop:7").await?;
    /// # Ok(()) }
    /// ```
    pub async fn add(&self, item: &[u8]) -> Result<()> {
        self.add_many([item]).await
    }

    /// Adds many items, a few thousand bits per script call. When no filter is installed the
    /// add only counts (so a rebuild running now takes a new snapshot); the items are in the
    /// database the next rebuild reads.
    ///
    /// ```no_run
    /// # async fn demo(f: hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) -> hmdp_cache::Result<()> {
    /// let ids: Vec<String> = (1..=1000).map(|i| i.to_string()).collect();
    /// f.add_many(ids.iter().map(|s| s.as_bytes())).await?;
    /// # Ok(()) }
    /// ```
    pub async fn add_many<'a>(&self, items: impl IntoIterator<Item = &'a [u8]>) -> Result<()> {
        let items: Vec<&[u8]> = items.into_iter().collect();
        if items.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        let mut state = self.state();
        let mut done = 0;
        let mut changes = 0;
        while done < items.len() {
            // Items set before a change of filter need not be set again: they were in the
            // source of the rebuild's snapshot before it began, or the add counter made the
            // rebuild take a new one.
            let (bitmap, chunk, bits) = match &state.params {
                Some(p) => {
                    let per_call = (4096 / p.hashes as usize).max(1);
                    let chunk = &items[done..(done + per_call).min(items.len())];
                    let bits: Vec<u64> = chunk
                        .iter()
                        .flat_map(|i| positions(i, p.bits, p.hashes))
                        .collect();
                    (p.bitmap.as_str(), chunk.len(), bits)
                }
                // Nothing (readable) installed: the call only counts the add.
                None => (self.key.as_str(), items.len(), Vec::new()),
            };
            let outcome: redis::Value = ADD
                .key(&self.config_key)
                .key(bitmap)
                .key(&self.adds_key)
                .arg(state.raw.as_deref().unwrap_or(""))
                .arg(bits)
                .invoke_async(&mut conn)
                .await?;
            match outcome {
                redis::Value::Int(1) if state.params.is_some() => done += chunk,
                // Our unreadable config is still installed: no bits to set.
                redis::Value::Int(1) => return Ok(()),
                redis::Value::Int(_) => {
                    // No filter installed: nothing to set bits in; the next rebuild reads the
                    // items from their source.
                    self.adopt(None);
                    return Ok(());
                }
                other => {
                    changes += 1;
                    if changes >= ATTEMPTS {
                        return Err(Error::new(
                            ErrorKind::ConfigMismatch,
                            format!(
                                "the Bloom filter at {} kept changing during an add",
                                self.key
                            ),
                        ));
                    }
                    state = self.adopt(Some(config_reply(other)?));
                }
            }
        }
        Ok(())
    }

    /// What the installed filter says about `item`; see [`Membership`].
    ///
    /// ```no_run
    /// # async fn demo(f: hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) -> hmdp_cache::Result<()> {
    /// use hmdp_cache::Membership;
    /// match f.check(b"shop:404").await? {
    ///     Membership::Absent => { /* skip the database */ }
    ///     Membership::MaybePresent => { /* look it up */ }
    ///     Membership::Missing => { /* look it up, and rebuild the filter */ }
    ///     _ => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn check(&self, item: &[u8]) -> Result<Membership> {
        self.check_bits(Some(item)).await
    }

    /// False means "certainly never added"; true means "probably added" — or that no filter
    /// is installed ([`Membership::Missing`]), which never rules anything out.
    ///
    /// ```no_run
    /// # async fn demo(f: hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) -> hmdp_cache::Result<()> {
    /// if !f.might_contain(b"shop:404").await? { /* skip the database */ }
    /// # Ok(()) }
    /// ```
    pub async fn might_contain(&self, item: &[u8]) -> Result<bool> {
        Ok(self.check(item).await? != Membership::Absent)
    }

    /// True when no intact filter is installed in Redis (never built, flushed, the bitmap
    /// evicted): time for [`BloomFilter::rebuild`].
    ///
    /// ```no_run
    /// # async fn demo(f: hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) -> hmdp_cache::Result<()> {
    /// if f.is_missing().await? { /* rebuild it from the database */ }
    /// # Ok(()) }
    /// ```
    pub async fn is_missing(&self) -> Result<bool> {
        Ok(self.check_bits(None).await? == Membership::Missing)
    }

    /// The key the filter was opened with.
    ///
    /// ```no_run
    /// # fn f(b: &hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) { println!("{}", b.key()); }
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The Redis key of the installed bitmap, as far as this handle knows.
    ///
    /// ```no_run
    /// # fn f(b: &hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) { println!("{:?}", b.bitmap_key()); }
    /// ```
    pub fn bitmap_key(&self) -> Option<String> {
        self.state().params.map(|p| p.bitmap)
    }

    /// Bits and hash functions of the installed filter, as far as this handle knows (`None`:
    /// nothing installed).
    ///
    /// ```no_run
    /// # fn f(b: &hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) { if let Some((m, k)) = b.size() {} }
    /// ```
    pub fn size(&self) -> Option<(u64, u32)> {
        self.state().params.map(|p| (p.bits, p.hashes))
    }

    /// How many items the installed filter holds at its false-positive rate (`m·ln 2 / k`),
    /// as far as this handle knows: rebuild bigger when you have more.
    ///
    /// ```no_run
    /// # fn f(b: &hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>, items: u64) {
    /// if b.capacity().is_none_or(|c| c < items) { /* rebuild */ }
    /// # }
    /// ```
    pub fn capacity(&self) -> Option<u64> {
        self.size()
            .map(|(m, k)| (m as f64 * std::f64::consts::LN_2 / f64::from(k)) as u64)
    }

    fn state(&self) -> State {
        self.state.read().map(|s| s.clone()).unwrap_or_default()
    }

    /// Makes `raw` the config this handle (and its clones) use.
    fn adopt(&self, raw: Option<String>) -> State {
        let state = State::parse(&self.key, raw);
        if let Ok(mut s) = self.state.write()
            && *s != state
        {
            tracing::debug!(key = %self.key, config = ?state.raw, "adopted the installed Bloom filter");
            *s = state.clone();
        }
        state
    }

    /// One `MULTI`: the config, and the item's bits plus the sentinel in the bitmap that
    /// config names. A different config is adopted and the check repeated.
    async fn check_bits(&self, item: Option<&[u8]>) -> Result<Membership> {
        let mut conn = self.conn.clone();
        let mut state = self.state();
        for _ in 0..ATTEMPTS {
            let mut pipe = redis::pipe();
            pipe.atomic().get(&self.config_key);
            let (raw, bits): (Option<String>, Vec<u8>) = match &state.params {
                Some(p) => {
                    let mut cmd = redis::cmd("BITFIELD_RO");
                    cmd.arg(&p.bitmap);
                    for pos in item
                        .into_iter()
                        .flat_map(|i| positions(i, p.bits, p.hashes))
                        .chain(std::iter::once(p.bits))
                    {
                        cmd.arg("GET").arg("u1").arg(pos);
                    }
                    pipe.add_command(cmd);
                    pipe.query_async(&mut conn).await?
                }
                None => {
                    let (raw,): (Option<String>,) = pipe.query_async(&mut conn).await?;
                    (raw, Vec::new())
                }
            };
            if raw != state.raw {
                state = self.adopt(raw);
                continue;
            }
            return Ok(match bits.split_last() {
                Some((1, bits)) if bits.iter().all(|&b| b == 1) => Membership::MaybePresent,
                Some((1, _)) => Membership::Absent,
                // No config, an unreadable one, or a bitmap without its sentinel.
                _ => Membership::Missing,
            });
        }
        Ok(Membership::Missing)
    }
}

/// A script's reply naming the installed config.
fn config_reply(v: redis::Value) -> Result<String> {
    match v {
        redis::Value::BulkString(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
        redis::Value::SimpleString(s) => Ok(s),
        other => Err(Error::new(
            ErrorKind::Redis,
            format!("unexpected reply from a Bloom filter script: {other:?}"),
        )),
    }
}

/// Sets the items' bits in a bitmap nobody reads yet, pipelined.
async fn fill<'a, C: ConnectionLike>(
    conn: &mut C,
    bitmap: &str,
    bits: u64,
    hashes: u32,
    items: impl Iterator<Item = &'a [u8]>,
) -> Result<()> {
    let items: Vec<&[u8]> = items.collect();
    let per_cmd = (4096 / hashes as usize).max(1);
    for batch in items.chunks(per_cmd * 64) {
        let mut pipe = redis::pipe();
        for chunk in batch.chunks(per_cmd) {
            let mut cmd = redis::cmd("BITFIELD");
            cmd.arg(bitmap);
            for item in chunk {
                for pos in positions(item, bits, hashes) {
                    cmd.arg("SET").arg("u1").arg(pos).arg(1);
                }
            }
            pipe.add_command(cmd).ignore();
        }
        let _: () = pipe.query_async(conn).await?;
    }
    Ok(())
}

/// The `k` bit positions of an item in an `m`-bit filter (double hashing over XXH3-128).
fn positions(item: &[u8], bits: u64, hashes: u32) -> impl Iterator<Item = u64> + use<> {
    let h = xxhash_rust::xxh3::xxh3_128(item);
    let h1 = h as u64;
    // An odd step visits distinct positions for any power-of-two-free m as well.
    let h2 = ((h >> 64) as u64) | 1;
    (0..hashes as u64).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizing_follows_the_textbook_formulas() {
        let o = BloomOptions::new(1_000_000, 0.01);
        assert_eq!(o.bits(), 9_585_059);
        assert_eq!(o.hashes(), 7);
        assert_eq!(BloomOptions::new(1, 0.5).hashes(), 1);
    }

    #[test]
    fn invalid_options_are_rejected() {
        assert!(BloomOptions::new(10, 0.0).validate().is_err());
        assert!(BloomOptions::new(10, 1.0).validate().is_err());
        assert!(BloomOptions::new(0, 0.1).validate().is_err());
        assert!(BloomOptions::new(u64::MAX / 4, 0.0001).validate().is_err());
        assert!(BloomOptions::new(10, 0.1).validate().is_ok());
    }

    #[test]
    fn configs_parse_with_their_bitmap_key() {
        let p = parse_config("bloom:shop", "9586:7:00ff").unwrap();
        assert_eq!((p.bits, p.hashes), (9586, 7));
        assert_eq!(p.bitmap, "{bloom:shop}:bits:00ff");
        // The earlier `m:k` names the bitmap at the key itself.
        assert_eq!(
            parse_config("bloom:shop", "9586:7").unwrap().bitmap,
            "bloom:shop"
        );
        for bad in ["", "x:7:a", "9586:0:a", "0:7:a", "9586:7:", "9586:99:a"] {
            assert!(parse_config("bloom:shop", bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn positions_are_stable_in_range_and_item_specific() {
        let a: Vec<u64> = positions(b"42", 1000, 7).collect();
        assert_eq!(a, positions(b"42", 1000, 7).collect::<Vec<_>>());
        assert!(a.iter().all(|&p| p < 1000));
        assert_ne!(a, positions(b"43", 1000, 7).collect::<Vec<_>>());
    }
}
