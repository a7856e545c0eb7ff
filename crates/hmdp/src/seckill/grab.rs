//! Deciding one order: in Redis with the grab script (`async`), or in the database under a
//! per-user lock (`sync`, the course's path).

use std::time::{Duration, Instant};

use chrono::Local;

use redis::{Cmd, FromRedisValue, Script};
use tracing::Span;

use super::{
    Refusal, Seckill, SeckillError,
    memory::Ticket,
    scripts::{self, GrabAnswer, GrabCall},
};
use crate::{
    domain::{OrderId, SPAN_TARGET, TraceParent, UserId, VoucherId, pay_deadline_ms},
    kv::{Keys, RedisConn, Replicated},
    order_stream::{self, PendingRecord},
    storage::orders::{self, NewOrder, SyncOutcome},
};

/// How long a grab keeps warming a voucher that Redis keeps losing before it gives up (with a
/// retryable 503). Three attempts are always made; a fixed count alone gave up too early on a
/// machine so busy that the key was lost again between each warm-up and the next try.
pub(super) const WARM_RETRY_BUDGET: Duration = Duration::from_secs(2);

impl Seckill {
    /// The refusal this instance can give without Redis: an id known to be no voucher, a
    /// voucher known to be sold out, a buyer known to have bought.
    pub(super) fn refusal_from_memory(&self, user: UserId, voucher: VoucherId) -> Option<Refusal> {
        if self
            .unknown
            .get(&voucher.get())
            .is_some_and(|until| Instant::now() < until)
        {
            return Some(Refusal::UnknownVoucher);
        }
        let memory = self.memory.as_ref()?;
        // A buyer first: one whose answer was lost and who asks again after the stock is gone
        // is told about the order, not that the sale sold out.
        if let Some(order) = memory.bought(voucher.get(), user.get()) {
            self.stats.memory_duplicate.inc();
            return Some(Refusal::Duplicate(Some(order)));
        }
        if memory.sold_out(voucher.get()) {
            self.stats.memory_sold_out.inc();
            return Some(Refusal::SoldOut);
        }
        None
    }

    /// The decision in Redis (after [`Seckill::refusal_from_memory`] had none).
    pub(super) async fn grab_async(
        &self,
        user: UserId,
        voucher: VoucherId,
    ) -> Result<Result<i64, Refusal>, SeckillError> {
        self.check_shards().await?;
        let order_id = self.ids.next_id().await?;
        // The order's pending record (only the status query reads it) is written by the script
        // as it accepts the order: an accepted grab is one request to Redis, and a refusal
        // leaves no record to delete.
        let record = PendingRecord {
            user_id: user,
            voucher_id: voucher,
            failed: false,
        };
        let buckets = self.buckets_of(voucher).await?;
        if !buckets.split() && !matches!(self.redis, RedisConn::Cluster(_)) {
            return self.decide(user, voucher, order_id, Some(record)).await;
        }
        // On a cluster the record's key is in another slot than the script's keys (and a split
        // sale's unit may come from any bucket): it goes out ahead of the script, in the same
        // round trip, and a refusal deletes it again.
        let pending = order_stream::create_pending(&self.redis, &self.keys, order_id, record);
        let decision = async {
            if buckets.split() {
                self.decide_split(user, voucher, order_id, buckets).await
            } else {
                self.decide(user, voucher, order_id, None).await
            }
        };
        let (created, outcome) = tokio::join!(pending, decision);
        match (&outcome, created) {
            // Accepted (`NotReplicated` too: the order exists, its buyer is told to look it up).
            (Ok(Ok(_)) | Err(SeckillError::NotReplicated { .. }), Ok(false)) => {
                self.id_in_use(order_id, user, voucher);
            }
            (Ok(Err(_)), Ok(true)) => {
                let (redis, keys) = (self.redis.clone(), self.keys.clone());
                tokio::spawn(async move {
                    let _ = order_stream::delete_pending(&redis, &keys, order_id).await;
                });
            }
            // Errors before a decision leave the record to its TTL (no one holds its order id).
            _ => {}
        }
        outcome
    }

    /// An accepted order whose id had a pending record already: the other order's record is
    /// kept, and the worker refuses this one as a conflict.
    fn id_in_use(&self, order_id: i64, user: UserId, voucher: VoucherId) {
        self.stats.id_collisions.inc();
        tracing::error!(
            order = order_id,
            user = user.get(),
            voucher = voucher.get(),
            "order id already used by another pending order (the id counter was reset?); the \
             worker will refuse this one as a conflict"
        );
    }

    /// Runs the grab script for an order id, loading the voucher into Redis when it is missing;
    /// with `pending`, the script also writes the order's pending record if it accepts it.
    async fn decide(
        &self,
        user: UserId,
        voucher: VoucherId,
        order_id: i64,
        pending: Option<PendingRecord>,
    ) -> Result<Result<i64, Refusal>, SeckillError> {
        let shard = self.shard(voucher);
        let started = Instant::now();
        let deadline = pay_deadline_ms(order_id, self.settings.pay_timeout);
        let keys = [
            self.keys.seckill_voucher(shard, voucher.get()),
            self.keys.seckill_buyers(shard, voucher.get()),
            self.keys.seckill_stream(shard),
            self.keys.seckill_deadlines(shard),
        ];
        let pending_key = pending.map(|_| self.keys.seckill_pending(order_id));
        // The script's span (exported traces only) lasts until the decision; an accepted order
        // carries its context in its stream entry, so the span that writes it joins this trace.
        let span = script_span(order_id, voucher, shard, 0);
        let trace = TraceParent::of(&span);
        let grab = GrabCall {
            keys: keys.each_ref().map(String::as_str),
            voucher: voucher.get(),
            user: user.get(),
            order: order_id,
            deadline_ms: deadline,
            pending: pending_key.as_deref().zip(pending),
            trace: trace.as_ref().map(TraceParent::as_str),
        }
        .command();
        for attempt in 1.. {
            // Before the script runs: its answer is remembered only if no announcement can
            // have been missed since.
            let ticket = self.memory.as_ref().and_then(|m| m.ticket());
            let (answer, replicated) = self
                .run_script(&scripts::GRAB, &grab, GrabAnswer::is_accepted)
                .await?;
            if let Some(done) = self.conclude(answer, replicated, ticket, user, voucher, order_id) {
                return done;
            }
            if attempt >= 3 && started.elapsed() >= WARM_RETRY_BUDGET {
                break;
            }
            self.warm(voucher).await?;
        }
        Err(SeckillError::NotLoaded)
    }

    /// Runs a script that may decide an order; an accepted grab (`wrote`) waits for the
    /// replicas on a connection of its own (`kv::replicas`) when that is configured.
    pub(super) async fn run_script<T: FromRedisValue>(
        &self,
        script: &Script,
        cmd: &Cmd,
        wrote: impl FnOnce(&T) -> bool,
    ) -> Result<(T, Option<Replicated>), SeckillError> {
        Ok(match &self.replicas {
            None => (
                scripts::eval(script, cmd, &mut self.redis.clone()).await?,
                None,
            ),
            Some(replicas) => {
                replicas
                    .write(async |conn| scripts::eval(script, cmd, conn).await, wrote)
                    .await?
            }
        })
    }

    /// The grab's result for an answer of the grab script, remembered where it may be;
    /// `None` for "not loaded" (warm the voucher and ask again).
    pub(super) fn conclude(
        &self,
        answer: GrabAnswer,
        replicated: Option<Replicated>,
        ticket: Option<Ticket>,
        user: UserId,
        voucher: VoucherId,
        order_id: i64,
    ) -> Option<Result<Result<i64, Refusal>, SeckillError>> {
        let memory = self.memory.as_ref().zip(ticket);
        Some(match answer {
            GrabAnswer::Accepted {
                generation,
                id_in_use,
            } => {
                if id_in_use {
                    self.id_in_use(order_id, user, voucher);
                }
                if let Some(replicated) = replicated.filter(|r| !r.is_complete()) {
                    self.stats.replica_wait_timeouts.inc();
                    return Some(Err(SeckillError::NotReplicated {
                        order_id,
                        replicated,
                    }));
                }
                if let Some((memory, ticket)) = memory {
                    memory.remember_buyer(voucher.get(), user.get(), order_id, generation, ticket);
                }
                Ok(Ok(order_id))
            }
            GrabAnswer::SoldOut { generation } => {
                if let Some((memory, ticket)) = memory {
                    memory.remember_sold_out(voucher.get(), generation, ticket);
                }
                Ok(Err(Refusal::SoldOut))
            }
            GrabAnswer::AlreadyBought { order, generation } => {
                if let (Some((memory, ticket)), Some(order)) = (memory, order) {
                    memory.remember_buyer(voucher.get(), user.get(), order, generation, ticket);
                }
                Ok(Err(Refusal::Duplicate(order)))
            }
            GrabAnswer::NotStarted => Ok(Err(Refusal::NotStarted)),
            GrabAnswer::Ended => Ok(Err(Refusal::Ended)),
            GrabAnswer::NoSuchVoucher => {
                self.unknown
                    .insert(voucher.get(), Instant::now() + super::UNKNOWN_TTL);
                Ok(Err(Refusal::UnknownVoucher))
            }
            GrabAnswer::NotLoaded => return None,
        })
    }

    pub(super) async fn grab_sync(
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
        let lock = self.locks.lock(&Keys::order_lock(user.get()))?;
        let Some(guard) = lock
            .try_lock(Duration::ZERO, Some(Duration::from_secs(10)))
            .await?
        else {
            // Its first request is still deciding: the order may not exist yet.
            let prior = orders::order_id_of(&self.db, user, voucher).await?;
            return Ok(Err(Refusal::Duplicate(prior)));
        };
        let order_id = self.ids.next_id().await;
        let outcome = match order_id {
            Ok(id) => orders::create_order_sync(
                &self.db,
                NewOrder {
                    id: generated(id),
                    user_id: user,
                    voucher_id: voucher,
                },
            )
            .await
            .map(|o| (id, o))
            .map_err(SeckillError::from),
            Err(e) => Err(e.into()),
        };
        let _ = guard.unlock().await;
        Ok(match outcome? {
            (id, SyncOutcome::Created) => {
                self.schedule_close_sync(voucher, id).await;
                Ok(id)
            }
            (_, SyncOutcome::SoldOut) => Err(Refusal::SoldOut),
            (_, SyncOutcome::Duplicate) => Err(Refusal::Duplicate(
                orders::order_id_of(&self.db, user, voucher).await?,
            )),
        })
    }

    /// The pay deadline of an order the database just took (`sync` mode has no grab script to
    /// add it atomically): added after the commit, so a Redis failure here leaves the order
    /// open past its deadline, which the log says.
    async fn schedule_close_sync(&self, voucher: VoucherId, order_id: i64) {
        let deadline = pay_deadline_ms(order_id, self.settings.pay_timeout);
        let added: redis::RedisResult<i64> = redis::cmd("ZADD")
            .arg(self.keys.seckill_deadlines(self.shard(voucher)))
            .arg(deadline)
            .arg(order_id)
            .query_async(&mut self.redis.clone())
            .await;
        if let Err(e) = added {
            tracing::error!(order = order_id, error = %e, "could not record the pay deadline of an order; it stays open until cancelled");
        }
    }
}

/// The span of a grab's scripts on `bucket` (0 for a one-key sale), while traces are exported.
pub(super) fn script_span(order_id: i64, voucher: VoucherId, shard: u32, bucket: u32) -> Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        "grab script",
        otel.kind = "client",
        db.system.name = "redis",
        db.operation.name = "EVALSHA",
        hmdp.order = order_id,
        hmdp.voucher = voucher.get(),
        hmdp.shard = shard,
        hmdp.bucket = bucket,
    )
}

/// An id from the order-id generator, which makes only positive ids (a timestamp since its
/// epoch in the high bits).
fn generated(id: i64) -> OrderId {
    OrderId::new(id).expect("the order-id generator makes positive ids")
}
