//! The flash sale (秒杀): deciding who gets a voucher, without overselling.
//!
//! In `async` mode one Lua script decides in Redis and appends the order to the order stream
//! ([`crate::order_stream`]), which the worker writes later; a voucher Redis lacks is loaded
//! from the database first ([`Seckill::warm`]). `sync` mode is the course's database path.
//! Sold-out and already-bought answers are then repeated from memory without Redis
//! ([`memory`]). docs/internals/flash-sale.md says why each step
//! is safe.

mod buckets;
mod grab;
mod memory;
mod reconcile;
mod release;
pub(crate) mod scripts;
mod stats;
mod status;
pub mod voucher_hash;
mod warm;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{Local, NaiveDateTime, TimeZone};
use hmdp_id::IdGenerator;
use hmdp_lock::LockClient;

pub use crate::order_stream::ShardCountMismatch;
pub use reconcile::SaleCheck;
pub(crate) use stats::{SaleStats, SeckillStats};
pub(crate) use status::OrderStatus;

use crate::{
    config::{SeckillMode, SeckillSettings},
    domain::{Answer, Answered, ErrorCode, Refused, StockBuckets, UserId, VoucherId, order_data},
    kv::{Keys, RedisConn, ReplicaWait, Replicated},
    order_stream,
    storage::{Db, StorageError},
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
    /// Another process held the voucher's warm-up lock for all of `hmdp reconcile`'s wait.
    #[error("voucher {0} is being loaded into Redis by another process; run it again")]
    WarmUpBusy(i64),
    /// A split sale's claim this grab made was settled as abandoned by another process while
    /// the grab was still borrowing (it stalled for seconds): nothing was taken, try again.
    #[error("the grab's claim was settled by another process; nothing was taken")]
    ClaimSettled,
    /// A computation shared by concurrent callers (a sale's stats) failed.
    #[error(transparent)]
    Shared(Arc<SeckillError>),
    /// The order was accepted by the Redis primary, but fewer replicas than configured confirmed
    /// it in time: it is written if the primary lives, and lost if a replica without it is
    /// promoted (the user may then buy again).
    #[error(
        "order {order_id} accepted, but only {} of {} replicas confirmed it in time",
        replicated.confirmed,
        replicated.wanted
    )]
    NotReplicated {
        order_id: i64,
        replicated: Replicated,
    },
}

impl Answered for SeckillError {
    fn answer(&self) -> Answer {
        use SeckillError as E;
        match self {
            E::Storage(s) => s.answer(),
            E::Redis(r) => r.answer(),
            E::Lock(l) if l.is_connection_error() || l.is_timeout() => Answer::Unavailable("redis"),
            E::Id(i) if i.is_redis() => Answer::Unavailable("redis"),
            // Redis keeps losing the voucher's keys: retryable, like Redis being away.
            E::NotLoaded | E::ClaimSettled => Answer::Unavailable("redis"),
            E::Shared(inner) => inner.answer(),
            E::NotReplicated { order_id, .. } => Refused::new(
                ErrorCode::NotReplicated,
                "订单已受理，但尚未确认，请稍后查询订单 (order accepted but not yet confirmed by the \
                 Redis replicas: query it before buying again)",
            )
            .with_data(order_data(*order_id))
            .into(),
            _ => Answer::Internal,
        }
    }
}

/// Why an order was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("sold out")]
    SoldOut,
    /// The user has an order of this voucher already: its id, so that a retry after a lost
    /// answer finds it (`None` only while that first order is still being decided).
    #[error("one order per user")]
    Duplicate(Option<i64>),
    #[error("the sale has not begun")]
    NotStarted,
    #[error("the sale is over")]
    Ended,
    #[error("no such flash-sale voucher")]
    UnknownVoucher,
}

/// The original's messages, each with its own code.
impl Answered for Refusal {
    fn answer(&self) -> Answer {
        let refused = match self {
            Refusal::SoldOut => Refused::new(ErrorCode::SoldOut, "库存不足"),
            // With the order the user has: a retry after a lost answer finds it.
            Refusal::Duplicate(prior) => {
                let refused = Refused::new(ErrorCode::DuplicateOrder, "不能重复下单");
                match prior {
                    Some(id) => refused.with_data(order_data(*id)),
                    None => refused,
                }
            }
            Refusal::NotStarted => Refused::new(ErrorCode::SeckillNotStarted, "秒杀尚未开始"),
            Refusal::Ended => Refused::new(ErrorCode::SeckillEnded, "秒杀已经结束"),
            Refusal::UnknownVoucher => Refused::new(
                ErrorCode::VoucherNotFound,
                "优惠券不存在 (no flash-sale voucher with this id)",
            ),
        };
        refused.into()
    }
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
    /// Voucher ids found to be no flash-sale voucher, until when they stay refused
    /// ([`UNKNOWN_TTL`]): a client repeating one is refused without a Redis round trip. Every
    /// grab reads this, so it is a `quick_cache`, whose reads record nothing (see
    /// `memory::Ids`).
    unknown: Arc<memory::Ids<Instant>>,
    /// Each voucher's stock buckets, once read (they never change).
    layouts: Arc<memory::Ids<StockBuckets>>,
    /// Each voucher's dashboard view for [`STATS_TTL`], computed once for all concurrent
    /// callers: the route is public, and each computation counts orders in the database.
    sale_stats: moka::future::Cache<i64, Option<SaleStats>>,
    /// Set with `HMDP_REDIS_WAIT_REPLICAS`: accepted grabs wait for the replicas.
    replicas: Option<Arc<ReplicaWait>>,
    /// Refusals repeated without Redis, once [`Seckill::remember_refusals`] subscribed.
    memory: Option<Arc<memory::SaleMemory>>,
    listener: Option<Arc<memory::ListenerGuard>>,
    /// Where load announcements are published (else on `redis`): the node instances subscribe
    /// through.
    publisher: Option<Arc<memory::Publisher>>,
}

/// How long this instance remembers that a voucher id is unknown. Short, because a voucher
/// created on another instance is not announced here (one created here is forgotten at once).
const UNKNOWN_TTL: Duration = Duration::from_secs(5);
/// Unknown voucher ids remembered at most (random ids from a scanner evict each other).
const UNKNOWN_CAPACITY: usize = 10_000;
/// How long a sale's dashboard view is reused.
const STATS_TTL: Duration = Duration::from_secs(1);

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
            unknown: Arc::new(memory::ids(UNKNOWN_CAPACITY)),
            layouts: Arc::new(memory::ids(buckets::LAYOUT_CAPACITY)),
            sale_stats: moka::future::Cache::builder()
                .max_capacity(UNKNOWN_CAPACITY as u64)
                .time_to_live(STATS_TTL)
                .build(),
            replicas: None,
            memory: None,
            listener: None,
            publisher: None,
        }
    }

    /// Publishes load announcements through `client` (a plain client of the node the instances
    /// subscribe through: on a cluster, PUBLISH counts only that node's subscribers).
    pub fn with_publisher(mut self, client: redis::Client) -> Self {
        self.publisher = Some(Arc::new(memory::Publisher::new(client)));
        self
    }

    /// Makes every accepted grab wait for replicas before it is answered
    /// (`HMDP_REDIS_WAIT_REPLICAS`).
    pub fn with_replica_wait(mut self, replicas: ReplicaWait) -> Self {
        self.replicas = Some(Arc::new(replicas));
        self
    }

    /// Records this instance's shard count in Redis, or checks it against the recorded one;
    /// call it at start (in `async` mode) and refuse to start on an error. Also warns when
    /// Redis may evict keys. The first order checks it too, should this not have been called.
    pub async fn check_shards(&self) -> Result<(), SeckillError> {
        self.shards_checked
            .get_or_try_init(|| async {
                order_stream::check_shard_count(&self.redis, &self.keys, self.settings.shards)
                    .await??;
                Ok::<_, SeckillError>(())
            })
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
        // The decisions are boxed: their state (Redis, the database, the lock) would otherwise
        // be part of every grab's future, 2.7 KB that the handler's caller allocates and copies
        // even for a refusal answered from memory.
        let outcome = match self.settings.mode {
            SeckillMode::Async => match self.refusal_from_memory(user, voucher) {
                Some(refusal) => Err(refusal),
                None => Box::pin(self.grab_async(user, voucher)).await?,
            },
            SeckillMode::Sync => Box::pin(self.grab_sync(user, voucher)).await?,
        };
        let counter = match outcome {
            Ok(_) => &self.stats.accepted,
            Err(Refusal::SoldOut) => &self.stats.sold_out,
            Err(Refusal::Duplicate(_)) => &self.stats.duplicate,
            Err(Refusal::NotStarted) => &self.stats.not_started,
            Err(Refusal::Ended) => &self.stats.ended,
            Err(Refusal::UnknownVoucher) => &self.stats.unknown,
        };
        counter.inc();
        Ok(outcome)
    }

    /// The shard of a voucher's keys and orders.
    fn shard(&self, voucher: VoucherId) -> u32 {
        Keys::seckill_shard(voucher.get(), self.settings.shards)
    }
}

/// Milliseconds since the epoch of a server-local date-time (the original stores local time).
pub(crate) fn local_millis(t: NaiveDateTime) -> i64 {
    match Local.from_local_datetime(&t) {
        chrono::LocalResult::Single(t) => t.timestamp_millis(),
        chrono::LocalResult::Ambiguous(a, _) => a.timestamp_millis(),
        // A time skipped by a DST change: read it as UTC rather than fail.
        chrono::LocalResult::None => t.and_utc().timestamp_millis(),
    }
}
