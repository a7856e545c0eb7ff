//! A sale split over buckets (库存分桶): one hot voucher's grabs spread over a cluster's
//! masters, still exact to the unit.
//!
//! Each bucket is a voucher hash of its own on its own shard (so its own hash slot and order
//! stream) holding a share of the stock. A buyer's record lives in their *home* bucket only
//! ([`StockBuckets::home`]), so one order per user is decided in one slot. A grab runs
//! [`scripts::GRAB_HOME`] there: with stock left it is the one-key grab. An empty home bucket
//! *claims* the record for the order, then asks the other buckets in turn for a unit
//! ([`scripts::BORROW`], which appends the order in the lender's slot); if none has one, the
//! claim is dropped and the buyer told "sold out" — after a look that found every bucket
//! empty, never before.
//!
//! No unit is lost or doubled across the two slots: a unit leaves a bucket only in the step
//! that appends its order, and a claim without a unit is no order. An instance that dies
//! between the claim and the loan leaves a claim behind; it is *settled* (a later grab of the
//! same buyer, `hmdp reconcile`, a reload) by marking the order `void` in every other bucket
//! ([`scripts::FENCE`]): a bucket that had lent to it proves the order exists, and once all are
//! marked no late loan can happen, so the record can go. ARCHITECTURE.md ("Stock buckets") and
//! the book's flash-sale chapter give the whole argument.

use std::{collections::BTreeSet, time::Duration};

use redis::aio::ConnectionLike;

use super::{
    Refusal, Seckill, SeckillError,
    memory::Ticket,
    scripts::{self, BorrowAnswer, BucketOrder, GrabAnswer, HomeAnswer},
};
use crate::{
    domain::{StockBuckets, TraceParent, UserId, VoucherId, pay_deadline_ms},
    kv::Keys,
    storage::orders::{self, SaleSnapshot},
};

/// How old a claim must be before another grab or a check settles it: a live grab borrows
/// within milliseconds, so one this old belongs to an instance that died or stalled (and a
/// stalled one is refused by the settled buckets, never double-served).
pub(super) const CLAIM_STALE: Duration = Duration::from_secs(10);

/// The keys of one bucket of a voucher.
#[derive(Debug, Clone)]
pub(super) struct Bucket {
    pub index: u32,
    pub shard: u32,
    pub hash: String,
    pub buyers: String,
    pub stream: String,
    pub deadlines: String,
    pub claims: String,
    pub lent: String,
    pub released: String,
}

/// How many buckets of a voucher remembered at most (vouchers on sale, not requests).
pub(super) const LAYOUT_CAPACITY: usize = 10_000;

impl Seckill {
    /// A voucher's bucket count: remembered for the life of the process once read (it never
    /// changes), else read from the database. An id the database does not sell reads as one
    /// bucket, and the one-key path answers it as it always has.
    pub(super) async fn buckets_of(
        &self,
        voucher: VoucherId,
    ) -> Result<StockBuckets, SeckillError> {
        if let Some(buckets) = self.layouts.get(&voucher.get()) {
            return Ok(buckets);
        }
        Ok(match orders::seckill_voucher(&self.db, voucher).await? {
            Some(v) => {
                self.layouts.insert(voucher.get(), v.buckets);
                v.buckets
            }
            None => StockBuckets::ONE,
        })
    }

    pub(super) fn bucket(&self, voucher: VoucherId, index: u32) -> Bucket {
        let id = voucher.get();
        let shard = Keys::seckill_bucket_shard(id, index, self.settings.shards);
        Bucket {
            index,
            shard,
            hash: self.keys.seckill_bucket(shard, id, index),
            buyers: self.keys.seckill_bucket_buyers(shard, id, index),
            stream: self.keys.seckill_stream(shard),
            deadlines: self.keys.seckill_deadlines(shard),
            claims: self.keys.seckill_bucket_claims(shard, id, index),
            lent: self.keys.seckill_bucket_lent(shard, id, index),
            released: self.keys.seckill_bucket_released(shard, id, index),
        }
    }

    /// Every bucket of a voucher, in order.
    pub(super) fn all_buckets(&self, voucher: VoucherId, buckets: StockBuckets) -> Vec<Bucket> {
        (0..buckets.get())
            .map(|b| self.bucket(voucher, b))
            .collect()
    }

    /// The decision for a split sale: the home bucket first, then a loan from the others.
    pub(super) async fn decide_split(
        &self,
        user: UserId,
        voucher: VoucherId,
        order_id: i64,
        buckets: StockBuckets,
    ) -> Result<Result<i64, Refusal>, SeckillError> {
        let home = self.bucket(voucher, buckets.home(user.get()));
        let started = std::time::Instant::now();
        let deadline = pay_deadline_ms(order_id, self.settings.pay_timeout);
        let span = super::grab::script_span(order_id, voucher, home.shard, home.index);
        let trace = TraceParent::of(&span);
        let trace = trace.as_ref().map(TraceParent::as_str);
        let order = BucketOrder {
            voucher: voucher.get(),
            user: user.get(),
            order: order_id,
            deadline_ms: deadline,
            trace,
        };
        let call = order.home([
            &home.hash,
            &home.buyers,
            &home.stream,
            &home.deadlines,
            &home.claims,
        ]);
        for attempt in 1.. {
            let ticket = self.memory.as_ref().and_then(|m| m.ticket());
            let (answer, replicated) = self
                .run_script(&scripts::GRAB_HOME, &call, HomeAnswer::wrote)
                .await?;
            match answer {
                HomeAnswer::Decided(GrabAnswer::NotLoaded) => {
                    if attempt >= 3 && started.elapsed() >= super::grab::WARM_RETRY_BUDGET {
                        break;
                    }
                    self.warm(voucher).await?;
                }
                HomeAnswer::Decided(answer) => {
                    if let Some(done) =
                        self.conclude(answer, replicated, ticket, user, voucher, order_id)
                    {
                        return done;
                    }
                }
                HomeAnswer::ClaimedBefore { order, age_ms, .. }
                    if age_ms >= CLAIM_STALE.as_millis() as i64 =>
                {
                    // Left by a grab that never finished: settle it, then ask again.
                    self.settle_claim(voucher, buckets, &home, user.get(), order)
                        .await?;
                }
                // Another grab of this buyer is borrowing a unit right now.
                HomeAnswer::ClaimedBefore { .. } => return Ok(Err(Refusal::Duplicate(None))),
                HomeAnswer::Claimed { generation } => {
                    if let Some(replicated) = replicated.filter(|r| !r.is_complete()) {
                        // The claim may be lost with the primary: settle it rather than lend
                        // on a record the replicas may not have.
                        self.settle_claim(voucher, buckets, &home, user.get(), order_id)
                            .await?;
                        self.stats.replica_wait_timeouts.inc();
                        return Err(SeckillError::NotReplicated {
                            order_id,
                            replicated,
                        });
                    }
                    let loan = Loan {
                        user,
                        voucher,
                        order_id,
                        order,
                        generation,
                        ticket,
                    };
                    match self.borrow(buckets, &home, loan).await? {
                        Some(done) => return Ok(done),
                        // A lender was not loaded: the warm-up rebuilt the sale; ask again.
                        None => continue,
                    }
                }
            }
        }
        Err(SeckillError::NotLoaded)
    }

    /// Asks the buckets after `home`, in turn, for a unit for a claimed order. `None` when a
    /// bucket was not loaded (the claim is dropped and the sale warmed: the caller asks again).
    async fn borrow(
        &self,
        buckets: StockBuckets,
        home: &Bucket,
        loan: Loan<'_>,
    ) -> Result<Option<Result<i64, Refusal>>, SeckillError> {
        let n = buckets.get();
        let mut generation = loan.generation;
        for step in 1..n {
            let lender = self.bucket(loan.voucher, (home.index + step) % n);
            let call = loan.order.borrow([
                &lender.hash,
                &lender.lent,
                &lender.stream,
                &lender.deadlines,
            ]);
            let (answer, replicated) = self
                .run_script(&scripts::BORROW, &call, |a| {
                    matches!(a, BorrowAnswer::Lent { .. })
                })
                .await?;
            match answer {
                BorrowAnswer::Lent { .. } => {
                    self.stats.borrowed.inc();
                    // The claim has done its work; a leftover is settled as "lent" later.
                    let (mut redis, claims) = (self.redis.clone(), home.claims.clone());
                    let member = scripts::claim_member(loan.order_id, loan.user.get());
                    tokio::spawn(async move {
                        let _: redis::RedisResult<i64> = redis::cmd("ZREM")
                            .arg(claims)
                            .arg(member)
                            .query_async(&mut redis)
                            .await;
                    });
                    if let Some(replicated) = replicated.filter(|r| !r.is_complete()) {
                        self.stats.replica_wait_timeouts.inc();
                        return Err(SeckillError::NotReplicated {
                            order_id: loan.order_id,
                            replicated,
                        });
                    }
                    if let (Some(memory), Some(ticket)) = (&self.memory, loan.ticket) {
                        memory.remember_buyer(
                            loan.voucher.get(),
                            loan.user.get(),
                            loan.order_id,
                            loan.generation,
                            ticket,
                        );
                    }
                    return Ok(Some(Ok(loan.order_id)));
                }
                BorrowAnswer::Empty { generation: g } => generation = generation.min(g),
                BorrowAnswer::Fenced => return Err(SeckillError::ClaimSettled),
                BorrowAnswer::NotLoaded => {
                    self.unclaim(home, loan.user.get(), loan.order_id).await?;
                    self.warm(loan.voucher).await?;
                    return Ok(None);
                }
            }
        }
        // Every bucket was empty when asked.
        self.unclaim(home, loan.user.get(), loan.order_id).await?;
        if let (Some(memory), Some(ticket)) = (&self.memory, loan.ticket) {
            memory.remember_sold_out(loan.voucher.get(), generation, ticket);
        }
        Ok(Some(Err(Refusal::SoldOut)))
    }

    async fn unclaim(&self, home: &Bucket, user: i64, order: i64) -> Result<bool, SeckillError> {
        let dropped: i64 = scripts::UNCLAIM
            .key(&home.hash)
            .key(&home.buyers)
            .key(&home.claims)
            .arg(user)
            .arg(order)
            .invoke_async(&mut self.redis.clone())
            .await?;
        Ok(dropped == 1)
    }

    /// Settles the claim of `order` (buyer `user`) in `home`: whether a bucket had lent it a
    /// unit (the order exists; the claim is only forgotten), else the record is dropped after
    /// every other bucket was marked never to lend to it.
    pub(super) async fn settle_claim(
        &self,
        voucher: VoucherId,
        buckets: StockBuckets,
        home: &Bucket,
        user: i64,
        order: i64,
    ) -> Result<bool, SeckillError> {
        let mut redis = self.redis.clone();
        for index in (0..buckets.get()).filter(|b| *b != home.index) {
            let lender = self.bucket(voucher, index);
            let lent: i64 = scripts::FENCE
                .key(&lender.lent)
                .arg(order)
                .invoke_async(&mut redis)
                .await?;
            if lent == 1 {
                let _: i64 = redis::cmd("ZREM")
                    .arg(&home.claims)
                    .arg(scripts::claim_member(order, user))
                    .query_async(&mut redis)
                    .await?;
                return Ok(true);
            }
        }
        let dropped = self.unclaim(home, user, order).await?;
        self.stats.claims_dropped.inc();
        tracing::warn!(
            voucher = voucher.get(),
            order,
            user,
            dropped,
            "a claim on a flash-sale buyer record was left by a grab that never finished; no \
             bucket lent it a unit, so the record is dropped and the buyer may grab again"
        );
        Ok(false)
    }

    /// Settles every claim of the voucher at least `older_than` old: how many.
    pub(super) async fn settle_claims(
        &self,
        voucher: VoucherId,
        buckets: StockBuckets,
        older_than: Duration,
    ) -> Result<usize, SeckillError> {
        let mut settled = 0;
        for home in self.all_buckets(voucher, buckets) {
            settled += self
                .settle_claims_in(voucher, buckets, &home, older_than)
                .await?;
        }
        Ok(settled)
    }

    /// Settles the claims of one home bucket at least `older_than` old: how many.
    pub(super) async fn settle_claims_in(
        &self,
        voucher: VoucherId,
        buckets: StockBuckets,
        home: &Bucket,
        older_than: Duration,
    ) -> Result<usize, SeckillError> {
        let mut redis = self.redis.clone();
        let now = redis_millis(&mut redis).await?;
        let stale: Vec<String> = redis::cmd("ZRANGE")
            .arg(&home.claims)
            .arg("-inf")
            .arg(now - older_than.as_millis() as i64)
            .arg("BYSCORE")
            .query_async(&mut redis)
            .await?;
        let mut settled = 0;
        for (order, user) in stale.iter().filter_map(|m| scripts::parse_claim_member(m)) {
            self.settle_claim(voucher, buckets, home, user, order)
                .await?;
            settled += 1;
        }
        Ok(settled)
    }

    /// The claims of a voucher younger than [`CLAIM_STALE`]: grabs borrowing right now,
    /// `(user, order)`.
    pub(super) async fn live_claims(
        &self,
        voucher: VoucherId,
        buckets: StockBuckets,
    ) -> Result<BTreeSet<(i64, i64)>, SeckillError> {
        let mut redis = self.redis.clone();
        let mut live = BTreeSet::new();
        for home in self.all_buckets(voucher, buckets) {
            let members: Vec<String> = redis::cmd("ZRANGE")
                .arg(&home.claims)
                .arg(0)
                .arg(-1)
                .query_async(&mut redis)
                .await?;
            live.extend(
                members
                    .iter()
                    .filter_map(|m| scripts::parse_claim_member(m))
                    .map(|(order, user)| (user, order)),
            );
        }
        Ok(live)
    }

    /// Makes a split sale not loaded in every bucket (grabs wait for the reload), then settles
    /// every claim: with no bucket loaded none is being lent to, and once settled none ever
    /// will be, so the reload that follows starts from the database and the streams alone.
    pub(super) async fn unload_split(
        &self,
        voucher: VoucherId,
        buckets: StockBuckets,
    ) -> Result<(), SeckillError> {
        let mut redis = self.redis.clone();
        for b in self.all_buckets(voucher, buckets) {
            let _: i64 = scripts::UNLOAD
                .key(&b.hash)
                .key(&b.buyers)
                .invoke_async(&mut redis)
                .await?;
        }
        self.settle_claims(voucher, buckets, Duration::ZERO).await?;
        Ok(())
    }

    /// The warm-up of a split sale (under its warm-up lock): nothing if every bucket is
    /// loaded; else the sale is rebuilt whole, since a bucket's share cannot be told apart from
    /// the others' while they sell.
    pub(super) async fn warm_split(
        &self,
        voucher: VoucherId,
        buckets: StockBuckets,
    ) -> Result<(), SeckillError> {
        let mut redis = self.redis.clone();
        let mut states = Vec::with_capacity(buckets.get() as usize);
        for b in self.all_buckets(voucher, buckets) {
            let state: i64 = scripts::CHECK_LOADED
                .key(&b.hash)
                .key(&b.buyers)
                .invoke_async(&mut redis)
                .await?;
            states.push(state);
        }
        if states.iter().all(|s| *s == 1) {
            return Ok(());
        }
        if states.contains(&-1) {
            self.stats.reload_incomplete.inc();
        } else {
            self.stats.reload_missing.inc();
        }
        tracing::warn!(
            voucher = voucher.get(),
            buckets = buckets.get(),
            missing = states.iter().filter(|s| **s != 1).count(),
            "a bucket of a split flash-sale voucher is gone from Redis or unusable; rebuilding \
             every bucket from the database and the streams"
        );
        self.stats.warm_ups.inc();
        self.unload_split(voucher, buckets).await?;
        self.load_split(voucher, buckets).await
    }

    /// Loads every bucket of a split sale from the database and the streams of its shards:
    /// the stock left shared out, each buyer in their home bucket, each closed order counted
    /// in the bucket its unit returns to.
    pub(super) async fn load_split(
        &self,
        voucher: VoucherId,
        buckets: StockBuckets,
    ) -> Result<(), SeckillError> {
        let all = self.all_buckets(voucher, buckets);
        let shards: Vec<u32> = all
            .iter()
            .map(|b| b.shard)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let Some((snapshot, load, dead)) = self.what_to_load(voucher, &shards).await? else {
            return Ok(());
        };
        let mut redis = self.redis.clone();
        let mut sold = vec![0i64; all.len()];
        for b in &all {
            let homed: Vec<(i64, i64)> = load
                .buyers
                .iter()
                .copied()
                .filter(|(user, _)| buckets.home(*user) == b.index)
                .collect();
            sold[b.index as usize] = homed.len() as i64;
            for chunk in homed.chunks(1000) {
                let _: i64 = redis::cmd("HSET")
                    .arg(&b.buyers)
                    .arg(chunk)
                    .query_async(&mut redis)
                    .await?;
            }
        }
        let generation = self.announce_load(voucher, all[0].shard).await?;
        let stock = load.stock.max(0);
        for b in &all {
            let closed: Vec<i64> = snapshot
                .closed
                .iter()
                .copied()
                .filter(|o| buckets.return_bucket(*o) == b.index)
                .collect();
            let sale = sale_of(
                &snapshot,
                buckets.share(stock, b.index),
                sold[b.index as usize],
                generation,
            );
            sale.load_counting(&b.hash, Some((&b.released, &closed)), &mut redis)
                .await?;
        }
        self.layouts.insert(voucher.get(), buckets);
        tracing::info!(
            voucher = voucher.get(),
            buckets = buckets.get(),
            stock = load.stock,
            buyers = load.buyers.len(),
            queued_unwritten = load.unwritten,
            dead_letters = dead,
            "split flash-sale voucher loaded into Redis from the database"
        );
        Ok(())
    }
}

/// A grab's loan request, carried from the claim to the lenders.
struct Loan<'a> {
    user: UserId,
    voucher: VoucherId,
    order_id: i64,
    /// The order's script arguments.
    order: BucketOrder<'a>,
    /// The home bucket's generation when it claimed.
    generation: u64,
    ticket: Option<Ticket>,
}

/// One bucket's sale as the loader writes it.
fn sale_of(
    snapshot: &SaleSnapshot,
    stock: i64,
    sold: i64,
    generation: u64,
) -> super::voucher_hash::Sale {
    super::voucher_hash::Sale {
        stock,
        begin_ms: super::local_millis(snapshot.voucher.begin_time),
        end_ms: super::local_millis(snapshot.voucher.end_time),
        sold,
        generation,
    }
}

/// Redis's clock in ms (claims are scored by it, so their age is read by it too).
async fn redis_millis(conn: &mut impl ConnectionLike) -> Result<i64, SeckillError> {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(conn).await?;
    Ok(secs * 1000 + micros / 1000)
}
