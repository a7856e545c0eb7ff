//! # hmdp-cache
//!
//! A Redis cache client for serde values that a traffic spike cannot knock over. It packages
//! the four classic cache defences — taught by hm-dianping with copy-pasted Java — into one
//! tested client:
//!
//! | threat | what happens | defence here |
//! |---|---|---|
//! | **penetration** | requests for ids that do not exist always miss and hit the database | "not found" is cached as a null marker for a short TTL ([`ReadOptions::null_ttl`]); a [`BloomFilter`] in front answers "certainly not" without touching Redis keys or the database |
//! | **breakdown** | a hot key expires and thousands of requests load it at once | single-flight per process, plus a distributed lock ([`hmdp_lock`]) with a double-check so one process loads while the others wait, woken by pub/sub ([`Strategy::Mutex`]); or logical expiry: never expire in Redis, serve the stale value and rebuild once in the background ([`Strategy::LogicalExpiry`]) |
//! | **avalanche** | many keys written together expire together | every TTL is spread by a random ±jitter ([`ReadOptions::jitter`], [`jittered`]) |
//! | **Redis down** | every read becomes a database read | configurable: fail fast, or fall back to the loader behind a concurrency limit ([`RedisDown`]) |
//!
//! An optional in-process L1 ([`L1Options`]) answers the hottest keys without a network round
//! trip and is invalidated on every instance through pub/sub when a key changes; the same
//! mechanism is public as [`InvalidatedCache`] for any value an application keeps in memory.
//! A reader that only passes a value on can take it as JSON text
//! ([`CacheClient::get_or_load_json_filtered`]): the L1 keeps entries in this client's own
//! encoding, so such a read decodes and encodes nothing.
//!
//! ## Using it
//!
//! ```no_run
//! use std::time::Duration;
//! use hmdp_cache::{CacheClient, ReadOptions, Strategy};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let redis = redis::Client::open("redis://127.0.0.1/")?;
//! let conn = redis.get_connection_manager().await?;
//! let locks = hmdp_lock::LockClient::builder(conn.clone()).subscriber(redis.clone()).build()?;
//! let cache = CacheClient::builder(conn).key_prefix("app:").locks(locks).build();
//!
//! let opts = ReadOptions::new(Strategy::Mutex, Duration::from_secs(30 * 60))
//!     .null_ttl(Duration::from_secs(120));
//! let name: Option<String> = cache
//!     .get_or_load("cache:shop:1", &opts, || async {
//!         Ok::<_, std::io::Error>(Some("面馆".to_owned())) // your database query
//!     })
//!     .await?;
//! // After updating the database:
//! cache.invalidate("cache:shop:1").await?;
//! # Ok(()) }
//! ```
//!
//! ## Storage format
//!
//! Values are JSON strings. "Not found" is the empty string, as in the original project. A
//! logically expiring entry is `{"expireTime": <unix ms>, "data": <value>}` with no Redis TTL.
//! A stored value that does not decode as the reader expects (written under another strategy
//! or by another version of the value type) is a miss: it is logged, deleted and reloaded, so
//! switching a key's strategy never turns cached entries into errors.
//! Each read touches one key, so the client works unchanged on a Redis Cluster; lock keys use
//! hash tags (see [`hmdp_lock`]).

#![warn(missing_docs)]

mod bloom;
mod client;
mod error;
mod flight;
mod l1;

pub use bloom::{BloomFilter, BloomOptions, Membership};
pub use client::{
    CacheClient, CacheClientBuilder, CacheStats, ReadOptions, RedisDown, Strategy, jittered,
};
pub use error::{Error, ErrorKind, Result};
pub use l1::{InvalidatedCache, L1Options};

/// A key in the same Redis Cluster slot as `key`: `{key}:suffix`, or `key:suffix` if `key`
/// already has a hash tag.
pub(crate) fn slot_mate(key: &str, suffix: &str) -> String {
    let tagged = key
        .find('{')
        .and_then(|open| key[open + 1..].find('}').map(|close| close > 0))
        .unwrap_or(false);
    if tagged {
        format!("{key}:{suffix}")
    } else {
        format!("{{{key}}}:{suffix}")
    }
}
