//! A Bloom filter in a plain Redis bitmap (no RedisBloom module needed).
//!
//! Debian's Redis 7 has no `BF.*` commands, so the filter is a bitmap read and written with
//! `BITFIELD` (one command sets or reads all *k* bits of an item, atomically). Its size comes from
//! the expected number of items *n* and the false-positive rate *p*:
//! `m = ⌈−n·ln p / (ln 2)²⌉` bits and `k = round(m/n · ln 2)` hash functions. Bit positions use
//! double hashing over a 128-bit XXH3 of the item: `h1 + i·h2 mod m`.
//!
//! The parameters are stored next to the bitmap (a slot mate of it); opening a filter with other
//! parameters is an error instead of silently answering from misplaced bits.

use redis::aio::ConnectionLike;

use crate::{Error, ErrorKind, Result};

/// The largest bitmap Redis allows (512 MiB).
const MAX_BITS: u64 = 1 << 32;

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
                format!("{} bits exceed one Redis bitmap (2^32)", self.bits()),
            ));
        }
        Ok(())
    }
}

/// A Bloom filter stored in Redis.
///
/// ```no_run
/// use hmdp_cache::{BloomFilter, BloomOptions};
/// # async fn demo() -> hmdp_cache::Result<()> {
/// let conn = redis::Client::open("redis://127.0.0.1/").unwrap()
///     .get_multiplexed_async_connection().await?;
/// let ids = BloomFilter::open(conn, "bloom:shop", BloomOptions::new(100_000, 0.001)).await?;
/// ids.add(b"42").await?;
/// assert!(ids.might_contain(b"42").await?);   // never a false "no"
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct BloomFilter<C> {
    conn: C,
    key: String,
    config_key: String,
    bits: u64,
    hashes: u32,
}

impl<C> std::fmt::Debug for BloomFilter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BloomFilter")
            .field("key", &self.key)
            .field("bits", &self.bits)
            .field("hashes", &self.hashes)
            .finish()
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> BloomFilter<C> {
    /// Opens (or creates) the filter at `key` (the full Redis key). Fails with
    /// [`ErrorKind::ConfigMismatch`] if a filter with other parameters is already there; call
    /// [`BloomFilter::reset`] on a filter opened with [`BloomFilter::open_or_reset`] to rebuild.
    ///
    /// ```no_run
    /// # async fn demo(conn: redis::aio::MultiplexedConnection) -> hmdp_cache::Result<()> {
    /// let f = hmdp_cache::BloomFilter::open(conn, "bloom:x", hmdp_cache::BloomOptions::new(10, 0.01)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn open(conn: C, key: &str, options: BloomOptions) -> Result<Self> {
        let (filter, matched) = Self::open_inner(conn, key, options).await?;
        if !matched {
            return Err(Error::new(
                ErrorKind::ConfigMismatch,
                format!("the Bloom filter at {key} was created with other parameters"),
            ));
        }
        Ok(filter)
    }

    /// Like [`BloomFilter::open`], but a filter with other parameters is deleted and recreated
    /// empty. Returns the filter and whether it is new or was reset (so it needs filling).
    ///
    /// ```no_run
    /// # async fn demo(conn: redis::aio::MultiplexedConnection) -> hmdp_cache::Result<()> {
    /// let (f, fill) = hmdp_cache::BloomFilter::open_or_reset(conn, "bloom:x", hmdp_cache::BloomOptions::new(10, 0.01)).await?;
    /// if fill { f.add_many([b"1".as_slice(), b"2"]).await?; }
    /// # Ok(()) }
    /// ```
    pub async fn open_or_reset(conn: C, key: &str, options: BloomOptions) -> Result<(Self, bool)> {
        let (filter, matched) = Self::open_inner(conn, key, options).await?;
        if matched {
            let exists: bool = redis::cmd("EXISTS")
                .arg(&filter.key)
                .query_async(&mut filter.conn.clone())
                .await?;
            return Ok((filter, !exists));
        }
        filter.reset().await?;
        Ok((filter, true))
    }

    async fn open_inner(conn: C, key: &str, options: BloomOptions) -> Result<(Self, bool)> {
        options.validate()?;
        let filter = Self {
            conn,
            key: key.to_owned(),
            config_key: crate::slot_mate(key, "config"),
            bits: options.bits(),
            hashes: options.hashes(),
        };
        let config = format!("{}:{}", filter.bits, filter.hashes);
        let stored: Option<String> = redis::cmd("SET")
            .arg(&filter.config_key)
            .arg(&config)
            .arg("NX")
            .arg("GET")
            .query_async(&mut filter.conn.clone())
            .await?;
        let matched = stored.is_none_or(|s| s == config);
        Ok((filter, matched))
    }

    /// Empties the filter and records this filter's parameters.
    ///
    /// ```no_run
    /// # async fn demo(f: hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) -> hmdp_cache::Result<()> {
    /// f.reset().await?;
    /// # Ok(()) }
    /// ```
    pub async fn reset(&self) -> Result<()> {
        let _: () = redis::pipe()
            .atomic()
            .del(&self.key)
            .set(&self.config_key, format!("{}:{}", self.bits, self.hashes))
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Adds an item.
    ///
    /// ```no_run
    /// # async fn demo(f: hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) -> hmdp_cache::Result<()> {
    /// f.add(b"shop:7").await?;
    /// # Ok(()) }
    /// ```
    pub async fn add(&self, item: &[u8]) -> Result<()> {
        let _: redis::Value = self
            .set_cmd(std::iter::once(item))
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Adds many items, a few thousand bit writes per command, pipelined.
    ///
    /// ```no_run
    /// # async fn demo(f: hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) -> hmdp_cache::Result<()> {
    /// let ids: Vec<String> = (1..=1000).map(|i| i.to_string()).collect();
    /// f.add_many(ids.iter().map(|s| s.as_bytes())).await?;
    /// # Ok(()) }
    /// ```
    pub async fn add_many<'a>(&self, items: impl IntoIterator<Item = &'a [u8]>) -> Result<()> {
        let items: Vec<&[u8]> = items.into_iter().collect();
        let per_cmd = (4096 / self.hashes as usize).max(1);
        let mut pipe = redis::pipe();
        for chunk in items.chunks(per_cmd) {
            pipe.add_command(self.set_cmd(chunk.iter().copied()))
                .ignore();
        }
        if !items.is_empty() {
            let _: () = pipe.query_async(&mut self.conn.clone()).await?;
        }
        Ok(())
    }

    /// False means "certainly never added"; true means "probably added".
    ///
    /// ```no_run
    /// # async fn demo(f: hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) -> hmdp_cache::Result<()> {
    /// if !f.might_contain(b"shop:404").await? { /* skip the database */ }
    /// # Ok(()) }
    /// ```
    pub async fn might_contain(&self, item: &[u8]) -> Result<bool> {
        let mut cmd = redis::cmd("BITFIELD_RO");
        cmd.arg(&self.key);
        for pos in self.positions(item) {
            cmd.arg("GET").arg("u1").arg(pos);
        }
        let bits: Vec<u8> = cmd.query_async(&mut self.conn.clone()).await?;
        Ok(bits.iter().all(|&b| b == 1))
    }

    /// The Redis key of the bitmap.
    ///
    /// ```no_run
    /// # fn f(b: &hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) { println!("{}", b.key()); }
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Bits and hash functions in use.
    ///
    /// ```no_run
    /// # fn f(b: &hmdp_cache::BloomFilter<redis::aio::MultiplexedConnection>) { let (m, k) = b.size(); }
    /// ```
    pub fn size(&self) -> (u64, u32) {
        (self.bits, self.hashes)
    }

    fn set_cmd<'a>(&self, items: impl Iterator<Item = &'a [u8]>) -> redis::Cmd {
        let mut cmd = redis::cmd("BITFIELD");
        cmd.arg(&self.key);
        for item in items {
            for pos in self.positions(item) {
                cmd.arg("SET").arg("u1").arg(pos).arg(1);
            }
        }
        cmd
    }

    fn positions(&self, item: &[u8]) -> impl Iterator<Item = u64> + use<C> {
        positions(item, self.bits, self.hashes)
    }
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
    fn positions_are_stable_in_range_and_item_specific() {
        let a: Vec<u64> = positions(b"42", 1000, 7).collect();
        assert_eq!(a, positions(b"42", 1000, 7).collect::<Vec<_>>());
        assert!(a.iter().all(|&p| p < 1000));
        assert_ne!(a, positions(b"43", 1000, 7).collect::<Vec<_>>());
    }
}
