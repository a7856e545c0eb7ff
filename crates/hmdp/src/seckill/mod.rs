//! The flash sale (秒杀): deciding who gets a voucher, without overselling.
//!
//! ## Async mode (default): decide in Redis, write later
//! One Lua script ([`scripts::GRAB`]) checks that the voucher is loaded, the sale window (on
//! Redis's own clock, one clock for every instance), the stock and the buyer set; then it
//! decrements the stock, records the buyer and appends the order to the shard's stream — all
//! in one atomic step, so an accepted order is always in the stream and a refused one never
//! is. Every key it touches is passed in `KEYS` and carries the shard's hash tag, so it runs on
//! a Redis Cluster. The order worker ([`crate::worker`]) writes the stream into the database.
//!
//! The original course's script crashed when the stock key was missing (`tonumber(nil)`),
//! ignored the sale window, built its keys inside Lua (illegal on a cluster) and lost orders
//! in an in-memory queue. Here a missing voucher is loaded from the database under a lock and
//! the request retried; it is never an error.
//!
//! ## Loading a voucher after Redis lost it
//! The warm-up must not hand out stock twice. It takes the stream's entries first, then one
//! consistent database snapshot of the voucher's stock and orders. An accepted order that is
//! not in the database yet was appended before the voucher's keys vanished (no order can be
//! accepted while they are missing), and the worker never trims an entry before it is written,
//! so it is in the stream entries read: its stock is taken off and its buyer added. The
//! voucher's hash is written last, with a check that nobody loaded it meanwhile.
//!
//! ## Sync mode: the database decides
//! The course's database path, kept as the baseline: check the window and stock, take a
//! per-user distributed lock ([`hmdp_lock`]), then in one transaction refuse a second order of
//! the user, decrement the stock optimistically (`stock > 0`) and insert the order.

pub mod scripts;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use chrono::{Local, NaiveDateTime, TimeZone};
use hmdp_id::IdGenerator;
use hmdp_lock::LockClient;

use crate::{
    config::{SeckillMode, SeckillSettings},
    domain::{UserId, VoucherId},
    kv::{Keys, RedisConn},
    storage::{
        Db, StorageError,
        orders::{self, NewOrder, SyncOutcome, VoucherOrder},
    },
};

/// Errors of the flash-sale service (refusals are not errors: see [`Refusal`]).
#[derive(Debug, thiserror::Error)]
pub enum SeckillError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("lock: {0}")]
    Lock(#[from] hmdp_lock::Error),
    #[error("order id: {0}")]
    Id(#[from] hmdp_id::Error),
    #[error("the voucher could not be loaded into Redis")]
    NotLoaded,
}

/// Why an order was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    SoldOut,
    Duplicate,
    NotStarted,
    Ended,
    UnknownVoucher,
}

/// Counters of this instance, for the dashboard and metrics.
#[derive(Debug, Default)]
pub struct SeckillStats {
    pub accepted: AtomicU64,
    pub sold_out: AtomicU64,
    pub duplicate: AtomicU64,
    pub not_started: AtomicU64,
    pub ended: AtomicU64,
    pub unknown: AtomicU64,
    pub warm_ups: AtomicU64,
}

/// What the owner of an order can learn about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderStatus {
    /// Accepted, not yet in the database.
    Pending { voucher_id: i64 },
    /// In the database.
    Created(VoucherOrder),
    /// No such order of this user.
    Unknown,
}

/// The flash-sale service. Cheap to clone.
#[derive(Clone)]
pub struct Seckill {
    db: Db,
    redis: RedisConn,
    keys: Keys,
    locks: LockClient<RedisConn>,
    ids: IdGenerator<RedisConn>,
    settings: SeckillSettings,
    stats: Arc<SeckillStats>,
}

/// How long an unknown voucher id is remembered as unknown.
const MISSING_TTL: Duration = Duration::from_secs(60);
/// How long the owner and voucher of an accepted order are kept for the status query.
const PENDING_TTL: Duration = Duration::from_secs(24 * 60 * 60);

impl Seckill {
    pub fn new(
        db: Db,
        redis: RedisConn,
        keys: Keys,
        locks: LockClient<RedisConn>,
        ids: IdGenerator<RedisConn>,
        settings: SeckillSettings,
    ) -> Self {
        Self {
            db,
            redis,
            keys,
            locks,
            ids,
            settings,
            stats: Arc::default(),
        }
    }

    pub fn stats(&self) -> &SeckillStats {
        &self.stats
    }

    pub fn mode(&self) -> SeckillMode {
        self.settings.mode
    }

    /// Tries to buy `voucher` for `user`: the new order's id, or why not.
    pub async fn grab(
        &self,
        user: UserId,
        voucher: VoucherId,
    ) -> Result<Result<i64, Refusal>, SeckillError> {
        let outcome = match self.settings.mode {
            SeckillMode::Async => self.grab_async(user, voucher).await?,
            SeckillMode::Sync => self.grab_sync(user, voucher).await?,
        };
        let counter = match outcome {
            Ok(_) => &self.stats.accepted,
            Err(Refusal::SoldOut) => &self.stats.sold_out,
            Err(Refusal::Duplicate) => &self.stats.duplicate,
            Err(Refusal::NotStarted) => &self.stats.not_started,
            Err(Refusal::Ended) => &self.stats.ended,
            Err(Refusal::UnknownVoucher) => &self.stats.unknown,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(outcome)
    }

    async fn grab_async(
        &self,
        user: UserId,
        voucher: VoucherId,
    ) -> Result<Result<i64, Refusal>, SeckillError> {
        let shard = Keys::seckill_shard(voucher.get(), self.settings.shards);
        let order_id = self.ids.next_id().await?;
        let mut redis = self.redis.clone();
        for _ in 0..3 {
            let code: i64 = scripts::GRAB
                .key(self.keys.seckill_voucher(shard, voucher.get()))
                .key(self.keys.seckill_buyers(shard, voucher.get()))
                .key(self.keys.seckill_stream(shard))
                .arg(voucher.get())
                .arg(user.get())
                .arg(order_id)
                .invoke_async(&mut redis)
                .await?;
            match code {
                0 => {
                    // Best effort: only the status query reads it, and the worker's write
                    // makes it unnecessary.
                    let _: redis::RedisResult<()> = redis::cmd("SET")
                        .arg(self.keys.seckill_pending(order_id))
                        .arg(format!("{}:{}", user.get(), voucher.get()))
                        .arg("PX")
                        .arg(PENDING_TTL.as_millis() as u64)
                        .query_async(&mut redis)
                        .await;
                    return Ok(Ok(order_id));
                }
                1 => return Ok(Err(Refusal::SoldOut)),
                2 => return Ok(Err(Refusal::Duplicate)),
                3 => return Ok(Err(Refusal::NotStarted)),
                4 => return Ok(Err(Refusal::Ended)),
                -2 => return Ok(Err(Refusal::UnknownVoucher)),
                _ => self.warm(voucher).await?,
            }
        }
        Err(SeckillError::NotLoaded)
    }

    /// Loads a voucher into Redis from the database (see the module docs for why this cannot
    /// hand out stock twice). Safe to call concurrently: a lock makes one caller do the work,
    /// and the final write happens only if the voucher is still missing.
    pub async fn warm(&self, voucher: VoucherId) -> Result<(), SeckillError> {
        let shard = Keys::seckill_shard(voucher.get(), self.settings.shards);
        let hash = self.keys.seckill_voucher(shard, voucher.get());
        let mut redis = self.redis.clone();
        let lock = self.locks.lock(&format!("seckill:warm:{voucher}"))?;
        let guard = lock
            .try_lock(Duration::from_secs(5), Some(Duration::from_secs(15)))
            .await?;
        let loaded: bool = redis::cmd("HEXISTS")
            .arg(&hash)
            .arg("stock")
            .query_async(&mut redis)
            .await?;
        if !loaded {
            self.stats.warm_ups.fetch_add(1, Ordering::Relaxed);
            self.load_from_database(voucher, shard).await?;
        }
        if let Some(g) = guard {
            let _ = g.unlock().await;
        }
        Ok(())
    }

    async fn load_from_database(&self, voucher: VoucherId, shard: u32) -> Result<(), SeckillError> {
        let mut redis = self.redis.clone();
        let hash = self.keys.seckill_voucher(shard, voucher.get());
        let buyers_key = self.keys.seckill_buyers(shard, voucher.get());
        // 1. The stream first (see the module docs), 2. then the database snapshot.
        let queued = self.queued_orders(shard, voucher.get()).await?;
        let Some(snapshot) = orders::sale_snapshot(&self.db, voucher).await? else {
            let _: i64 = scripts::MARK_MISSING
                .key(&hash)
                .arg(MISSING_TTL.as_millis() as u64)
                .invoke_async(&mut redis)
                .await?;
            return Ok(());
        };
        let persisted: std::collections::HashSet<i64> =
            snapshot.orders.iter().map(|(id, _)| *id).collect();
        let unwritten: Vec<(i64, i64)> = queued
            .into_iter()
            .filter(|(id, _)| !persisted.contains(id))
            .collect();
        let stock = snapshot.voucher.stock - unwritten.len() as i64;
        let buyers: Vec<i64> = snapshot
            .orders
            .iter()
            .map(|(_, u)| *u)
            .chain(unwritten.iter().map(|(_, u)| *u))
            .collect();
        for chunk in buyers.chunks(1000) {
            let _: i64 = redis::cmd("SADD")
                .arg(&buyers_key)
                .arg(chunk)
                .query_async(&mut redis)
                .await?;
        }
        let loaded: i64 = scripts::LOAD
            .key(&hash)
            .arg(stock.max(0))
            .arg(local_millis(snapshot.voucher.begin_time))
            .arg(local_millis(snapshot.voucher.end_time))
            .invoke_async(&mut redis)
            .await?;
        tracing::info!(
            voucher = voucher.get(),
            stock,
            buyers = buyers.len(),
            queued_unwritten = unwritten.len(),
            loaded = loaded == 1,
            "flash-sale voucher loaded into Redis from the database"
        );
        Ok(())
    }

    /// `(order id, user id)` of the shard's queued orders of one voucher (written or not).
    async fn queued_orders(
        &self,
        shard: u32,
        voucher: i64,
    ) -> Result<Vec<(i64, i64)>, SeckillError> {
        let stream = self.keys.seckill_stream(shard);
        let mut redis = self.redis.clone();
        let mut out = Vec::new();
        let mut start = "-".to_owned();
        loop {
            let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                .arg(&stream)
                .arg(&start)
                .arg("+")
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut redis)
                .await?;
            let n = reply.ids.len();
            for entry in &reply.ids {
                let field = |k: &str| entry.get::<i64>(k);
                if let (Some(id), Some(u), Some(v)) =
                    (field("id"), field("userId"), field("voucherId"))
                    && v == voucher
                {
                    out.push((id, u));
                }
            }
            match reply.ids.last() {
                Some(last) if n == 1000 => start = format!("({}", last.id),
                _ => break,
            }
        }
        Ok(out)
    }

    /// Loads a freshly created voucher into Redis (a failure is logged: the first request
    /// loads it instead).
    pub async fn load_new_voucher(
        &self,
        voucher: VoucherId,
        stock: i64,
        begin: NaiveDateTime,
        end: NaiveDateTime,
    ) {
        if self.settings.mode == SeckillMode::Sync {
            return;
        }
        let shard = Keys::seckill_shard(voucher.get(), self.settings.shards);
        let result: redis::RedisResult<i64> = scripts::LOAD
            .key(self.keys.seckill_voucher(shard, voucher.get()))
            .arg(stock)
            .arg(local_millis(begin))
            .arg(local_millis(end))
            .invoke_async(&mut self.redis.clone())
            .await;
        if let Err(e) = result {
            tracing::warn!(voucher = voucher.get(), error = %e, "could not load the new voucher into Redis; it loads on first use");
        }
    }

    async fn grab_sync(
        &self,
        user: UserId,
        voucher: VoucherId,
    ) -> Result<Result<i64, Refusal>, SeckillError> {
        let Some(v) = orders::seckill_voucher(&self.db, voucher).await? else {
            return Ok(Err(Refusal::UnknownVoucher));
        };
        let now = Local::now().naive_local();
        if now < v.begin_time {
            return Ok(Err(Refusal::NotStarted));
        }
        if now > v.end_time {
            return Ok(Err(Refusal::Ended));
        }
        if v.stock < 1 {
            return Ok(Err(Refusal::SoldOut));
        }
        // One attempt per user at a time, as the original's Redisson tryLock(): a concurrent
        // second request of the same user is a duplicate by definition.
        let lock = self.locks.lock(&format!("order:{user}"))?;
        let Some(guard) = lock
            .try_lock(Duration::ZERO, Some(Duration::from_secs(10)))
            .await?
        else {
            return Ok(Err(Refusal::Duplicate));
        };
        let order_id = self.ids.next_id().await;
        let outcome = match order_id {
            Ok(id) => orders::create_order_sync(
                &self.db,
                NewOrder {
                    id,
                    user_id: user.get(),
                    voucher_id: voucher.get(),
                },
            )
            .await
            .map(|o| (id, o))
            .map_err(SeckillError::from),
            Err(e) => Err(e.into()),
        };
        let _ = guard.unlock().await;
        Ok(match outcome? {
            (id, SyncOutcome::Created) => Ok(id),
            (_, SyncOutcome::SoldOut) => Err(Refusal::SoldOut),
            (_, SyncOutcome::Duplicate) => Err(Refusal::Duplicate),
        })
    }

    /// An order's status as its owner may see it.
    pub async fn order_status(
        &self,
        user: UserId,
        order_id: i64,
    ) -> Result<OrderStatus, SeckillError> {
        if let Some(order) = orders::order(&self.db, order_id).await? {
            return Ok(if order.user_id == user.get() {
                OrderStatus::Created(order)
            } else {
                OrderStatus::Unknown
            });
        }
        let pending: Option<String> = redis::cmd("GET")
            .arg(self.keys.seckill_pending(order_id))
            .query_async(&mut self.redis.clone())
            .await?;
        let parsed = pending.as_deref().and_then(|p| {
            let (u, v) = p.split_once(':')?;
            Some((u.parse::<i64>().ok()?, v.parse::<i64>().ok()?))
        });
        Ok(match parsed {
            Some((u, voucher_id)) if u == user.get() => OrderStatus::Pending { voucher_id },
            _ => OrderStatus::Unknown,
        })
    }
}

/// A live view of one sale, for the dashboard.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SaleStats {
    pub voucher_id: i64,
    /// Stock left as Redis sees it (what buyers race for); `None` when not loaded.
    pub redis_stock: Option<i64>,
    /// Stock left in the database (lags behind while orders are queued).
    pub db_stock: i64,
    /// Buyers accepted so far (the Redis buyer set).
    pub accepted: i64,
    /// Orders written to the database.
    pub persisted: i64,
    /// Entries in the shard's order stream (written ones are trimmed away over time).
    pub stream_length: i64,
    /// Entries delivered to a worker and not yet acknowledged.
    pub pending: i64,
    /// Entries not yet delivered to any worker (Redis 7's consumer-group lag).
    pub lag: Option<i64>,
    #[serde(with = "crate::storage::datetime_format")]
    pub begin_time: NaiveDateTime,
    #[serde(with = "crate::storage::datetime_format")]
    pub end_time: NaiveDateTime,
    /// The server's clock in milliseconds, so a page can count down without trusting its own.
    pub now_millis: i64,
}

impl Seckill {
    /// The live state of a sale; `None` for an unknown voucher.
    pub async fn sale_stats(&self, voucher: VoucherId) -> Result<Option<SaleStats>, SeckillError> {
        let Some(v) = orders::seckill_voucher(&self.db, voucher).await? else {
            return Ok(None);
        };
        let persisted = orders::count_orders_of_voucher(&self.db, voucher).await?;
        let shard = Keys::seckill_shard(voucher.get(), self.settings.shards);
        let stream = self.keys.seckill_stream(shard);
        let mut redis = self.redis.clone();
        let (redis_stock, accepted, stream_length): (Option<i64>, i64, i64) = redis::pipe()
            .cmd("HGET")
            .arg(self.keys.seckill_voucher(shard, voucher.get()))
            .arg("stock")
            .cmd("SCARD")
            .arg(self.keys.seckill_buyers(shard, voucher.get()))
            .cmd("XLEN")
            .arg(&stream)
            .query_async(&mut redis)
            .await?;
        let groups: redis::RedisResult<redis::Value> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&stream)
            .query_async(&mut redis)
            .await;
        let (pending, lag) = group_counters(groups.ok());
        Ok(Some(SaleStats {
            voucher_id: voucher.get(),
            redis_stock,
            db_stock: v.stock,
            accepted: if self.settings.mode == SeckillMode::Sync {
                persisted
            } else {
                accepted
            },
            persisted,
            stream_length,
            pending,
            lag,
            begin_time: v.begin_time,
            end_time: v.end_time,
            now_millis: Local::now().timestamp_millis(),
        }))
    }
}

/// `pending` and `lag` of the order group from an `XINFO GROUPS` reply.
fn group_counters(reply: Option<redis::Value>) -> (i64, Option<i64>) {
    let Some(redis::Value::Array(groups)) = reply else {
        return (0, None);
    };
    for g in groups {
        let fields: Vec<(String, redis::Value)> = match g {
            redis::Value::Array(items) => items
                .chunks(2)
                .filter_map(|kv| match kv {
                    [k, v] => redis::from_redis_value_ref::<String>(k)
                        .ok()
                        .map(|k| (k, v.clone())),
                    _ => None,
                })
                .collect(),
            redis::Value::Map(items) => items
                .into_iter()
                .filter_map(|(k, v)| {
                    redis::from_redis_value_ref::<String>(&k)
                        .ok()
                        .map(|k| (k, v))
                })
                .collect(),
            _ => continue,
        };
        let get = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| redis::from_redis_value_ref::<i64>(v).ok())
        };
        let is_ours = fields.iter().any(|(k, v)| {
            k == "name"
                && redis::from_redis_value_ref::<String>(v).ok().as_deref()
                    == Some(crate::worker::GROUP)
        });
        if is_ours {
            return (get("pending").unwrap_or(0), get("lag"));
        }
    }
    (0, None)
}

/// Milliseconds since the epoch of a server-local date-time (the original stores local time).
pub fn local_millis(t: NaiveDateTime) -> i64 {
    match Local.from_local_datetime(&t) {
        chrono::LocalResult::Single(t) => t.timestamp_millis(),
        chrono::LocalResult::Ambiguous(a, _) => a.timestamp_millis(),
        // A time skipped by a DST change: read it as UTC rather than fail.
        chrono::LocalResult::None => t.and_utc().timestamp_millis(),
    }
}
