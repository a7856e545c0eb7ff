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
//! so it is in the stream entries read: its stock is taken off and its buyer added. Orders
//! the worker gave up on (the shard's dead-letter stream) count the same way: their stock stays
//! taken and their buyer recorded, so a warm-up neither hands their stock out again nor lets
//! their buyer buy twice (an operator settles them). Each buyer is counted once, as the
//! database's unique key lets only one order per buyer through. The voucher's hash is written
//! last, with a check that nobody loaded it meanwhile.
//!
//! The same warm-up repairs a voucher whose hash is incomplete (a field missing) or whose buyer
//! set vanished while the hash stayed: the hash counts the orders it accepted (`sold`), and the
//! script treats "sold something, buyer set gone" as not loaded, so a buyer whose record was
//! lost cannot buy again. The warm-up then drops the hash and loads it from scratch, under its
//! lock; while the hash is missing no order is accepted. Redis should still run with
//! `maxmemory-policy noeviction`: an evicted order stream loses orders, which nothing can
//! repair ([`Seckill::check_shards`] warns at start when the policy is another).
//!
//! ## The shard count is part of the data
//! A voucher's keys and its queued orders live in shard `voucher id mod HMDP_SECKILL_SHARDS`.
//! Changing the count moves vouchers to other shards and strands the orders queued in the old
//! ones (and two instances with different counts would each sell the full stock). So the
//! count is recorded in Redis (`seckill:shards`) the first time, and an instance with another
//! count refuses to take orders ([`Seckill::check_shards`]); the error says how to change it
//! safely (drain first).
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
    time::{Duration, Instant},
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
    /// Redis lost the voucher again after every warm-up within the retry budget: transient,
    /// answered 503 (try again), never an order decided.
    #[error("the voucher could not be loaded into Redis")]
    NotLoaded,
    #[error(transparent)]
    Shards(#[from] ShardCountMismatch),
}

/// This instance's shard count differs from the one recorded in Redis.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "Redis (key {key}) holds flash-sale orders in {recorded} shard(s), but HMDP_SECKILL_SHARDS is \
     {configured}: with another count, orders queued in the old shards would be stranded and \
     stock could be sold twice, so this instance refuses to take or write orders. Start it with \
     HMDP_SECKILL_SHARDS={recorded}. To change the count: stop taking orders, let the workers \
     drain every order stream (hmdp_order_stream_pending and hmdp_order_stream_lag at 0), settle \
     the dead letters (seckill:{{s<k>}}:orders:dead), then delete the keys {prefix}seckill:* and \
     start every instance with the new count"
)]
pub struct ShardCountMismatch {
    pub key: String,
    pub prefix: String,
    pub recorded: u32,
    pub configured: u32,
}

/// The key recording the shard count (no hash tag: it is read on its own).
pub fn shard_count_key(keys: &Keys) -> String {
    format!("{}seckill:shards", keys.prefix())
}

/// Records `shards` as the deployment's shard count if none is recorded yet, and fails if
/// another count is. Also warns when Redis may evict keys (see the module docs).
pub async fn check_shard_count(
    redis: &RedisConn,
    keys: &Keys,
    shards: u32,
) -> Result<(), SeckillError> {
    let mut redis = redis.clone();
    let key = shard_count_key(keys);
    let recorded: Option<u32> = scripts::RECORD_SHARDS
        .key(&key)
        .arg(shards)
        .invoke_async(&mut redis)
        .await?;
    match recorded {
        Some(r) if r == shards => {}
        Some(recorded) => {
            let e = ShardCountMismatch {
                key,
                prefix: keys.prefix().to_owned(),
                recorded,
                configured: shards,
            };
            tracing::error!(error = %e, "flash sale refused to start");
            return Err(e.into());
        }
        None => {
            // Not a number: written by hand. Refuse rather than guess.
            return Err(ShardCountMismatch {
                key,
                prefix: keys.prefix().to_owned(),
                recorded: 0,
                configured: shards,
            }
            .into());
        }
    }
    warn_if_evicting(&mut redis).await;
    Ok(())
}

/// Logs a warning when Redis's `maxmemory-policy` lets it evict flash-sale keys.
async fn warn_if_evicting(redis: &mut RedisConn) {
    // `CONFIG` may be disabled (managed Redis): then nothing can be said.
    let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(redis)
        .await;
    if let Ok(reply) = reply
        && let Some(policy) = reply.get(1)
        && policy != "noeviction"
    {
        tracing::warn!(
            policy = %policy,
            "Redis may evict keys (maxmemory-policy is not noeviction): an evicted order stream \
             loses accepted orders; set maxmemory-policy noeviction"
        );
    }
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
    /// Accepted, but the worker could not write it and moved it to the dead-letter stream
    /// (an operator must settle it).
    Failed { voucher_id: i64 },
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
    /// Set once the shard count has been checked against Redis.
    shards_checked: Arc<tokio::sync::OnceCell<()>>,
}

/// How long a grab keeps warming a voucher that Redis keeps losing before it gives up (with a
/// retryable 503). Three attempts are always made; a fixed count alone gave up too early on a
/// machine so busy that the key was lost again between each warm-up and the next try.
const WARM_RETRY_BUDGET: Duration = Duration::from_secs(2);
/// How long an unknown voucher id is remembered as unknown.
const MISSING_TTL: Duration = Duration::from_secs(60);
/// How long the owner and voucher of an accepted (or failed) order are kept for the status
/// query.
pub(crate) const PENDING_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The pending record of an order: `user:voucher`, or `user:voucher:failed` once the worker
/// moved the order to the dead letters.
pub(crate) fn pending_record(user: i64, voucher: i64, failed: bool) -> String {
    if failed {
        format!("{user}:{voucher}:failed")
    } else {
        format!("{user}:{voucher}")
    }
}

/// `(user, voucher, failed)` of a pending record.
fn parse_pending_record(s: &str) -> Option<(i64, i64, bool)> {
    let mut parts = s.split(':');
    let user = parts.next()?.parse().ok()?;
    let voucher = parts.next()?.parse().ok()?;
    let failed = match parts.next() {
        None => false,
        Some("failed") => true,
        Some(_) => return None,
    };
    parts.next().is_none().then_some((user, voucher, failed))
}

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
            shards_checked: Arc::default(),
        }
    }

    /// Records this instance's shard count in Redis, or checks it against the recorded one;
    /// call it at start (in `async` mode) and refuse to start on an error. Also warns when
    /// Redis may evict keys. The first order checks it too, should this not have been called.
    pub async fn check_shards(&self) -> Result<(), SeckillError> {
        self.shards_checked
            .get_or_try_init(|| check_shard_count(&self.redis, &self.keys, self.settings.shards))
            .await?;
        Ok(())
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
        self.check_shards().await?;
        let shard = Keys::seckill_shard(voucher.get(), self.settings.shards);
        let order_id = self.ids.next_id().await?;
        let mut redis = self.redis.clone();
        let started = Instant::now();
        for attempt in 1.. {
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
                        .arg(pending_record(user.get(), voucher.get(), false))
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
                _ if attempt >= 3 && started.elapsed() >= WARM_RETRY_BUDGET => break,
                _ => self.warm(voucher).await?,
            }
        }
        Err(SeckillError::NotLoaded)
    }

    /// Loads a voucher into Redis from the database (see the module docs for why this cannot
    /// hand out stock twice), or repairs an unusable one. Safe to call concurrently: a lock
    /// makes one caller do the work, and the final write happens only if the voucher is still
    /// missing.
    pub async fn warm(&self, voucher: VoucherId) -> Result<(), SeckillError> {
        let shard = Keys::seckill_shard(voucher.get(), self.settings.shards);
        let lock = self.locks.lock(&format!("seckill:warm:{voucher}"))?;
        let Some(guard) = lock
            .try_lock(Duration::from_secs(5), Some(Duration::from_secs(15)))
            .await?
        else {
            // Someone else has been warming it for a while; the caller retries the grab.
            tracing::warn!(
                voucher = voucher.get(),
                "flash-sale warm-up lock busy; not loading"
            );
            return Ok(());
        };
        let result = self.warm_locked(voucher, shard).await;
        // Whatever happened: a failed load must not keep others waiting for the lease.
        let _ = guard.unlock().await;
        result
    }

    async fn warm_locked(&self, voucher: VoucherId, shard: u32) -> Result<(), SeckillError> {
        let state: i64 = scripts::CHECK_LOADED
            .key(self.keys.seckill_voucher(shard, voucher.get()))
            .key(self.keys.seckill_buyers(shard, voucher.get()))
            .invoke_async(&mut self.redis.clone())
            .await?;
        if state == -1 {
            tracing::warn!(
                voucher = voucher.get(),
                "flash-sale voucher incomplete in Redis (a field or its buyer set lost); reloading it"
            );
        }
        if state != 1 {
            self.stats.warm_ups.fetch_add(1, Ordering::Relaxed);
            self.load_from_database(voucher, shard).await?;
        }
        Ok(())
    }

    async fn load_from_database(&self, voucher: VoucherId, shard: u32) -> Result<(), SeckillError> {
        let mut redis = self.redis.clone();
        let hash = self.keys.seckill_voucher(shard, voucher.get());
        let buyers_key = self.keys.seckill_buyers(shard, voucher.get());
        // 1. The streams first (see the module docs), 2. then the database snapshot.
        let queued = self
            .orders_in_stream(&self.keys.seckill_stream(shard), voucher.get())
            .await?;
        let dead = self
            .orders_in_stream(&self.keys.seckill_dead_letters(shard), voucher.get())
            .await?;
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
        let mut buyers: std::collections::HashSet<i64> =
            snapshot.orders.iter().map(|(_, u)| *u).collect();
        // Orders not in the database: each new buyer takes one from stock (a second order of
        // a buyer can never be written: the unique key refuses it).
        let mut unwritten = 0i64;
        for (id, user) in queued.iter().chain(dead.iter()) {
            if !persisted.contains(id) && buyers.insert(*user) {
                unwritten += 1;
            }
        }
        let stock = snapshot.voucher.stock - unwritten;
        let buyers: Vec<i64> = buyers.into_iter().collect();
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
            .arg(buyers.len())
            .invoke_async(&mut redis)
            .await?;
        tracing::info!(
            voucher = voucher.get(),
            stock,
            buyers = buyers.len(),
            queued_unwritten = unwritten,
            dead_letters = dead.len(),
            loaded = loaded == 1,
            "flash-sale voucher loaded into Redis from the database"
        );
        Ok(())
    }

    /// `(order id, user id)` of the orders of one voucher in a stream (the shard's order
    /// stream, written or not, or its dead letters).
    async fn orders_in_stream(
        &self,
        stream: &str,
        voucher: i64,
    ) -> Result<Vec<(i64, i64)>, SeckillError> {
        let mut redis = self.redis.clone();
        let mut out = Vec::new();
        let mut start = "-".to_owned();
        loop {
            let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                .arg(stream)
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
            .arg(0)
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
    ///
    /// The pending record is read *before* the database: the worker deletes it only after its
    /// commit, so an order missing from both reads was never accepted (reading the database
    /// first could miss a commit and then find the record deleted).
    pub async fn order_status(
        &self,
        user: UserId,
        order_id: i64,
    ) -> Result<OrderStatus, SeckillError> {
        let pending: Option<String> = redis::cmd("GET")
            .arg(self.keys.seckill_pending(order_id))
            .query_async(&mut self.redis.clone())
            .await?;
        if let Some(order) = orders::order(&self.db, order_id).await?
            && order.user_id == user.get()
        {
            return Ok(OrderStatus::Created(order));
        }
        Ok(match pending.as_deref().and_then(parse_pending_record) {
            Some((u, voucher_id, false)) if u == user.get() => OrderStatus::Pending { voucher_id },
            Some((u, voucher_id, true)) if u == user.get() => OrderStatus::Failed { voucher_id },
            _ => OrderStatus::Unknown,
        })
    }
}

/// A live view of one sale, for the dashboard.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
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
    #[schema(value_type = crate::storage::datetime_format::Schema)]
    pub begin_time: NaiveDateTime,
    #[serde(with = "crate::storage::datetime_format")]
    #[schema(value_type = crate::storage::datetime_format::Schema)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_records_round_trip() {
        assert_eq!(
            parse_pending_record(&pending_record(7, 9, false)),
            Some((7, 9, false))
        );
        assert_eq!(
            parse_pending_record(&pending_record(7, 9, true)),
            Some((7, 9, true))
        );
        assert_eq!(parse_pending_record("7:9:other"), None);
        assert_eq!(parse_pending_record("7"), None);
        assert_eq!(parse_pending_record("7:9:failed:x"), None);
    }
}
