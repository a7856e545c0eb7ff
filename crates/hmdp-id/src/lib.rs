//! Globally unique 64-bit ids on Redis for async Rust, the successor of
//! hm-dianping's `RedisIdWorker`.
//!
//! `hmdp-id` runs on [redis-rs](https://docs.rs/redis) and tokio. Every
//! process that shares a Redis (or Redis Cluster) and a key prefix gets ids
//! that never collide, that are positive `i64`s (they fit a `BIGINT` primary
//! key), and that grow with time, so rows inserted by id stay roughly in
//! creation order.
//!
//! # Quick start
//!
//! ```no_run
//! use hmdp_id::{IdGenerator, SegmentOptions};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let redis = redis::Client::open("redis://127.0.0.1:6379")?;
//! let conn = redis.get_connection_manager().await?;
//!
//! // One generator per business name, built once and cloned freely.
//! let order_ids = IdGenerator::builder(conn, "order")
//!     .key_prefix("hmdp:")                 // counter keys: hmdp:icr:order:2025:01:31
//!     .segment(SegmentOptions::new())      // or .compatible(), the default
//!     .build()?;
//!
//! let id = order_ids.next_id().await?;
//! let (unix_seconds, sequence) = hmdp_id::decode(id);
//! println!("order {id} was issued at {unix_seconds} as number {sequence} of its day");
//! # Ok(())
//! # }
//! ```
//!
//! # Id layout
//!
//! ```text
//!  63  62                               32 31                                0
//! +---+-----------------------------------+-----------------------------------+
//! | 0 | seconds since 2022-01-01 UTC (31) |  per-day sequence number (32)     |
//! +---+-----------------------------------+-----------------------------------+
//! ```
//!
//! `id = (unix_seconds - EPOCH_SECONDS) << 32 | sequence`, with
//! [`EPOCH_SECONDS`] = 1 640 995 200 (2022-01-01T00:00:00Z). The sequence
//! comes from a Redis counter per business name and UTC day:
//!
//! ```text
//! {key_prefix}icr:{biz}:{yyyy:MM:dd}        e.g.  t123:icr:order:2024:02:29
//! ```
//!
//! [`decode`] splits an id back into `(unix_seconds, sequence)`, [`compose`]
//! builds one and [`day_key`] names the counter of a given second.
//!
//! # Modes
//!
//! **[`Mode::Compatible`]** (default) is the original worker: every id costs
//! one `INCR` of the day key, and an id is exactly what the Java
//! `RedisIdWorker` computes from the same second and counter value. One
//! difference is documented: the original took `LocalDateTime.now()` (local
//! wall-clock time) and converted it to seconds *as if it were UTC*, so on a
//! host outside UTC its timestamp bits and its key date were both shifted by
//! the zone offset (by +8 h on a China Standard Time host). This crate uses
//! real UTC for both. The shift never broke uniqueness, because the original
//! also took the key date from the same shifted time, so its key is always
//! the day of its timestamp bits, which is the property uniqueness rests on
//! (see below). Java and Rust workers may therefore share a key; only the
//! ordering between their ids is off by the zone offset.
//!
//! **[`Mode::Segment`]** reserves a block of `step` numbers (default 1000)
//! with a single `INCRBY key step` on the *same* day key, and then hands ids
//! out of that block from memory. When only a fraction of the block is left
//! (20 % by default, see [`SegmentOptions`]) the next block is fetched in the
//! background, so callers normally never wait for Redis. If a burst empties
//! the block before the spare arrives, every caller that ran dry awaits the
//! same fetch: there is never more than one fetch per generator in flight per
//! day, however many tasks are waiting. Numbers left in a block when the
//! process exits are simply never used.
//!
//! Because both modes draw from the same counter, they can run side by side
//! on one key (say, an old deployment in compatible mode and a new one in
//! segment mode) without ever producing the same id.
//!
//! # Why the ids are unique
//!
//! Two ids are equal only if they have the same timestamp *and* the same
//! sequence. The timestamp determines the day, and the day determines the
//! counter key. Every sequence number of a day key is handed out exactly once
//! by Redis (`INCR` and `INCRBY` are atomic), to exactly one generator. So two
//! ids with the same timestamp draw from the same counter and therefore have
//! different sequences. **Uniqueness comes from the per-day sequence, not from
//! the clock**: it holds across processes even if their clocks disagree,
//! because each id uses the counter of the day its own timestamp lies in.
//!
//! The scope of the guarantee is one counter family, i.e. one key prefix and
//! one business name: generators for `"order"` and `"voucher"` have separate
//! counters and can return the same number (as in the original). Use one
//! business name per table whose primary key the ids fill.
//!
//! This is also why, in segment mode, **a block belongs to its day**. A block
//! reserved from day D's key may only be combined with timestamps of day D.
//! If the clock moves on to day D+1 while numbers are left, the rest of the
//! block is discarded and a new block is taken from D+1's key. Using the old
//! block with a D+1 timestamp could repeat an id: another process (or a
//! compatible-mode generator) issuing ids for the same D+1 second takes its
//! numbers from D+1's counter, which starts again at 1 and knows nothing of
//! the numbers D's counter handed out.
//!
//! # The clock
//!
//! A generator never lets its time go backwards. It remembers the last second
//! it used, and if the clock reads earlier (an NTP step, a VM migration) it
//! keeps using that last second until the clock catches up. It does not sleep,
//! does not return an error and does not panic. Consequences:
//!
//! * ids from one generator (and its clones) are strictly increasing: a call
//!   that starts after another one returned gets a larger id, because a later
//!   second always gives a larger id and within a second the day's counter
//!   only grows (in segment mode even concurrent calls are ordered, as the
//!   second and the number are taken together under one lock);
//! * the clamped second decides both the timestamp bits *and* the day key, so
//!   the pair is always consistent, including around midnight: if the clock
//!   falls back from 00:00:05 to 23:59:58 the generator stays on the new day
//!   and its key;
//! * after a large backward jump the timestamp part shows the last second
//!   used rather than the real time, until the clock catches up. Likewise a
//!   wrong jump *forward* is held until real time passes it.
//!
//! Across generators or processes ids are unique but only roughly ordered:
//! clocks differ, and in segment mode two processes interleave blocks.
//!
//! The clock is injectable ([`IdGeneratorBuilder::clock`], a [`Clock`] trait
//! also implemented by plain closures) and [`ManualClock`] lets tests move
//! time backwards and across midnight deterministically.
//!
//! # Limits
//!
//! * At most [`MAX_SEQUENCE`] = 2^32 − 1 ids per business name per UTC day
//!   (about 49 700 per second all day long). If a counter goes past it,
//!   [`IdGenerator::next_id`] fails with [`ErrorKind::SequenceExhausted`]; an
//!   id is never wrapped or truncated. In segment mode the part of a block
//!   below the limit is still used.
//! * The 31 timestamp bits last about 68 years: up to
//!   [`MAX_UNIX_SECONDS`] (2090-01-19T03:14:07Z). Outside 2022–2090 calls fail
//!   with [`ErrorKind::ClockOutOfRange`].
//! * Counter keys are never expired or deleted by this crate, like in the
//!   original (they double as per-day counts). Do not delete a day's key while
//!   any process can still issue ids for that day, and do not write to it by
//!   hand.
//!
//! # Connections and keys
//!
//! A generator works over any [`IdConnection`]: every
//! `redis::aio::ConnectionLike + Clone + Send + Sync + 'static`, which covers
//! `ConnectionManager` (reconnects by itself, the usual choice),
//! `MultiplexedConnection` and `cluster_async::ClusterConnection`. It only
//! ever sends `INCR key` and `INCRBY key step`, single-key commands, so it is
//! cluster-safe by construction. Use [`IdGeneratorBuilder::key_prefix`] to
//! separate deployments or test runs on a shared server.
//!
//! Segment mode needs a Tokio runtime: block fetches are spawned with
//! `tokio::spawn` so they run in the background.
//!
//! # Layout
//!
//! * `layout` — the pure id arithmetic: [`compose`], [`decode`], [`day_key`]
//!   and the constants.
//! * `clock` — [`Clock`], [`SystemClock`], [`ManualClock`].
//! * `generator` — [`IdGenerator`], its builder, [`Mode`], [`SegmentOptions`],
//!   [`Stats`] and the compatible mode.
//! * `segment` — block bookkeeping and the shared background fetch.
//! * `error` — [`Error`], [`ErrorKind`], [`Result`].

#![warn(missing_docs)]

mod clock;
mod error;
mod generator;
mod layout;
mod segment;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Error, ErrorKind, Result};
pub use generator::{IdConnection, IdGenerator, IdGeneratorBuilder, Mode, SegmentOptions, Stats};
pub use layout::{
    EPOCH_SECONDS, MAX_SEQUENCE, MAX_UNIX_SECONDS, SEQUENCE_BITS, compose, day_key, decode,
};
