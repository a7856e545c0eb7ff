//! Distributed locks on Redis for async Rust, modelled on Redisson's `RLock`.
//!
//! `hmdp-lock` runs on [redis-rs](https://docs.rs/redis) and tokio. It
//! offers:
//!
//! * a **reentrant lock** ([`LockKind::Reentrant`], the default) with
//!   Redisson's data layout — a hash at the lock key, one field per owner,
//!   the value counting re-entries;
//! * a **simple lock** ([`LockKind::Simple`]): `SET key token NX PX lease`,
//!   compare-and-delete on release;
//! * **waiting without polling**: waiters sleep until an unlock message
//!   arrives on the lock's channel or the holder's lease would run out;
//! * a **watchdog** that keeps renewing a lock taken without a lease, and
//!   makes a lost lock observable ([`LockGuard::is_lost`], [`LockGuard::lost`]);
//! * optional **fencing tokens** ([`LockOptions::fencing`]);
//! * [`MultiLock`] (all of several locks) and [`RedLock`] (majority of
//!   independent nodes);
//! * cheap **counters** for metrics ([`LockClient::stats`]).
//!
//! # Quick start
//!
//! ```no_run
//! use std::time::Duration;
//! use hmdp_lock::LockClient;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let redis = redis::Client::open("redis://127.0.0.1:6379")?;
//! let conn = redis.get_connection_manager().await?;
//! let locks = LockClient::builder(conn)
//!     .subscriber(redis)          // one shared pub/sub connection for waiters
//!     .key_prefix("hmdp:")        // keys become hmdp:lock:{name}
//!     .build()?;
//!
//! let lock = locks.lock("order:user:1001")?;
//! // Wait at most 200 ms; no lease given, so the watchdog keeps it alive.
//! if let Some(guard) = lock.try_lock(Duration::from_millis(200), None).await? {
//!     // ... critical section ...
//!     guard.unlock().await?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Leases and the watchdog
//!
//! Every acquisition takes an optional lease:
//!
//! * `Some(lease)` — the lock expires after `lease` unless you call
//!   [`LockGuard::extend`]. [`LockGuard::is_lost`] turns true when the lease
//!   has run out.
//! * `None` — the lease is the client's watchdog timeout (30 s by default,
//!   [`LockClientBuilder::watchdog_timeout`]) and a background task renews it
//!   every third of that, checking ownership first. Renewal stops when the
//!   guard is released or dropped. If a renewal finds the lock gone or owned
//!   by someone else, the guard is marked lost. If renewals fail or get no
//!   answer (Redis down or hung), the guard turns lost exactly when the last
//!   *confirmed* lease may have run out — the time that renewal was sent
//!   plus the lease — because from then on another client may hold the
//!   lock; each renewal call is cut off at that moment. Await
//!   [`LockGuard::lost`] next to your work to stop early.
//!
//! A lost guard stays lost.
//!
//! A process that dies while holding a lock leaves it behind for at most one
//! lease.
//!
//! # Ownership and re-entry
//!
//! Async tasks move between threads, so ownership is not tied to a thread.
//! Each acquisition gets its own owner token, `<client uuid>:<counter>`,
//! stored in Redis. The [`LockGuard`] *is* the ownership: only it can
//! release, extend or re-enter. Calling [`Lock::lock`] again from inside the
//! critical section would wait for yourself; instead call
//! [`LockGuard::reenter`] to get a second guard for the same ownership. The
//! lock is free once every guard has been released.
//!
//! [`LockGuard::unlock`] returns `Ok(true)` if we still held the lock and
//! `Ok(false)` if it had expired or been taken over meanwhile — never a
//! panic. Dropping a guard without unlocking releases it in the background
//! (`tokio::spawn`) if a runtime is available; otherwise it expires.
//!
//! # Waiting
//!
//! [`Lock::try_lock`] makes one attempt; if the lock is held, it subscribes
//! to the lock's unlock channel (through one subscriber connection shared by
//! the whole [`LockClient`], managed by a background task), retries, and
//! then sleeps until an unlock message arrives or the holder's remaining
//! lease (returned by the acquire script) runs out, always within the wait
//! budget. Without a subscriber (see [`LockClientBuilder::subscriber`]) or
//! while it reconnects, waiters retry every
//! [`retry_interval`](LockClientBuilder::retry_interval) instead.
//!
//! A bounded wait also bounds each acquire call: it may take what is left of
//! the budget, but at least
//! [`min_attempt_timeout`](LockClientBuilder::min_attempt_timeout) (250 ms
//! by default), so a hung Redis makes `try_lock` fail with a timeout error
//! ([`Error::is_timeout`]) no later than that after its budget, instead of
//! blocking on the connection. A call that got no answer may still have
//! been granted; the token is released again in the background.
//!
//! Each unlock message wakes one waiter of a client (first come, first
//! woken), whose own unlock later wakes the next; a waiter whose timer fires
//! retries on its own. This is not a fair lock: a newcomer may still take
//! the lock before the woken waiter's retry lands.
//!
//! # Fencing tokens
//!
//! A lease-based lock cannot stop a holder that was paused (GC, swapping,
//! a stalled VM) past its lease from writing afterwards. With
//! [`LockOptions::fencing`] each fresh acquisition also increments a counter
//! in the same script and returns it via [`LockGuard::fencing_token`]. The
//! tokens of one lock name strictly increase, so the protected storage can
//! remember the highest token it has seen and reject older ones, e.g.
//! `UPDATE ... SET fence = ? WHERE id = ? AND fence < ?`.
//!
//! The counter key has no TTL on purpose: were it to expire, tokens would
//! start again from 1. It is one small key per lock name that ever used
//! fencing.
//!
//! # Metrics
//!
//! [`LockClient::stats`] returns a [`LockStats`] snapshot of counters shared
//! by every clone of the client: acquisitions granted at once and after a
//! wait, waits that spent their budget, failed acquisitions, lost locks, and
//! a wait-time histogram with the bounds in [`WAIT_BUCKETS`] (cumulative, as
//! Prometheus expects). Reading it is a handful of relaxed atomic loads.
//!
//! # Keys, channels and Redis Cluster
//!
//! For a lock named `order:1` and key prefix `t123:`:
//!
//! | what | Redis name |
//! |---|---|
//! | lock (string or hash) | `t123:lock:{order:1}` |
//! | fencing counter | `t123:lock:{order:1}:fence` |
//! | unlock channel | `t123:lock:{order:1}:ch` |
//!
//! The braces around the lock name are literal: they form the cluster hash
//! tag, so all names of one lock map to one slot, and every script receives
//! them through `KEYS`.
//! Scripts are sent with `EVALSHA` and reloaded on `NOSCRIPT`.
//!
//! Any [`redis::aio::ConnectionLike`] that is `Clone + Send + Sync + 'static`
//! works as the command connection ([`LockConnection`]):
//! `ConnectionManager`, `MultiplexedConnection` and
//! `cluster_async::ClusterConnection`. Unlock messages use plain `PUBLISH`,
//! which Redis Cluster broadcasts to every node, so in a cluster the
//! subscriber may be a plain [`redis::Client`] for any single node. (Sharded
//! `SPUBLISH` would be cheaper for large clusters but needs a subscriber per
//! shard; it is not used.) If that node goes away the subscriber reconnects
//! to the same address; meanwhile waiters fall back to timed retries.
//!
//! Do not use the same lock name with both a simple and a reentrant lock:
//! the key types differ and the scripts fail with a `WRONGTYPE` error.
//!
//! # MultiLock and RedLock
//!
//! [`MultiLock`] acquires several locks in the given order and releases what
//! it took if any cannot be had, retrying within the wait budget.
//!
//! [`RedLock`] implements the Redlock algorithm over independent masters
//! (quorum `n/2 + 1`, validity = lease − elapsed − (1 % of lease + 2 ms)).
//! Redisson has deprecated its RedLock; read the discussion on [`RedLock`]
//! before choosing it — in most cases a single-node lock plus fencing tokens
//! is the better tool.
//!
//! # Caveats
//!
//! * Redis expires keys by wall-clock time; a clock jump on the server can
//!   shorten a lease.
//! * With asynchronous replication, a failover can lose a freshly acquired
//!   lock. Use fencing tokens when a double holder would corrupt data.

#![warn(missing_docs)]

mod channel;
mod client;
mod error;
mod keys;
mod lock;
mod multi;
mod redlock;
mod scripts;
mod stats;
mod subscriber;
#[cfg(feature = "test-util")]
pub mod testing;
mod unavailable;

pub use channel::{ChannelSubscription, Gap};
pub use client::{
    DEFAULT_MIN_ATTEMPT_TIMEOUT, DEFAULT_RETRY_INTERVAL, DEFAULT_WATCHDOG_TIMEOUT, LockClient,
    LockClientBuilder, LockConnection, LockKind, LockOptions,
};
pub use error::{Error, ErrorKind, Result};
pub use lock::{Lock, LockGuard};
pub use multi::{MultiLock, MultiLockGuard};
pub use redlock::{
    DEFAULT_NODE_TIMEOUT, DEFAULT_RETRY_JITTER, RedLock, RedLockGuard, clock_drift,
    redlock_validity,
};
pub use stats::{LockStats, WAIT_BUCKETS};
pub use subscriber::PubSubSource;
pub use unavailable::is_unavailable;
