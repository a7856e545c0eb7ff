//! `hmdp reconcile`: does Redis agree with the database and the order streams about each sale?
//!
//! Redis decides every order, but it is not the truth: a replica promoted before it received
//! some grabs forgets those orders, their stock and their buyers, while the database (or a
//! stream) still has them; a lost stream entry leaves an order Redis acknowledged that nothing
//! will ever write. The check compares what the warm-up would load ([`super::warm`]: the
//! database snapshot plus the orders still in the streams) with what Redis holds, and the
//! repair rebuilds the sale through that same warm-up, after queueing again the acknowledged
//! orders nothing else holds. docs/internals/flash-sale.md, "Replicas, failover and `hmdp reconcile`", says
//! when to run it.

use std::{collections::HashMap, fmt, time::Duration};

use super::{
    Seckill, SeckillError,
    buckets::{Bucket, CLAIM_STALE},
    scripts,
    voucher_hash::VoucherHash,
};
use crate::{
    domain::{OrderId, StockBuckets, UserId, VoucherId},
    kv::Keys,
    order_stream::{self, PendingRecord},
    storage::{
        order_life,
        orders::{self, NewOrder},
    },
};

/// What the check found for one sale.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SaleCheck {
    pub voucher: i64,
    /// Redis holds the sale (else it loads from the database on first use: nothing to compare).
    pub loaded: bool,
    /// Redis remembers the voucher as "no such voucher" although the database sells it.
    pub marked_unknown: bool,
    pub redis_stock: i64,
    /// The stock Redis should hold: the database's, less the accepted orders not written yet.
    pub expected_stock: i64,
    /// Buyers Redis holds.
    pub buyers: usize,
    /// `(user, order)` the database or a stream holds and Redis does not: they could buy again.
    pub unknown_to_redis: Vec<(i64, i64)>,
    /// `(user, order)` Redis acknowledged that neither the database nor a stream holds.
    pub only_in_redis: Vec<(i64, i64)>,
    /// `(user, order in Redis, order elsewhere)`: a buyer with two different orders.
    pub other_order: Vec<(i64, i64, i64)>,
    /// `--repair` rebuilt the sale (after queueing again the orders only Redis held).
    pub repaired: bool,
    /// The database's books: every unit is in the stock or held by an order that was not
    /// cancelled (`initial = stock + holding`). `None` for a voucher without a recorded
    /// initial stock (created by another program).
    pub initial_stock: Option<i64>,
    pub db_stock: i64,
    /// Orders in statuses 1, 2, 3, 5 and 6.
    pub holding: i64,
    /// Cancelled orders whose payment was kept (neither owed back nor refunded): must be 0.
    pub paid_and_closed: i64,
    /// A sale split over stock buckets: each bucket's part (empty for one bucket).
    pub buckets: Vec<BucketCheck>,
}

/// One stock bucket of a split sale, as the check found it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketCheck {
    pub bucket: u32,
    pub shard: u32,
    /// Its share of the stock left (`None`: not loaded).
    pub stock: Option<i64>,
    /// Buyers whose home it is.
    pub buyers: usize,
    /// Buyer records claimed by grabs borrowing a unit right now.
    pub claims: usize,
    /// Buyer records in this bucket although it is not their home: a second grab of theirs
    /// would not see them.
    pub misplaced: usize,
    /// Claims left by grabs that never finished, settled by this check.
    pub settled: usize,
}

impl SaleCheck {
    /// Whether Redis disagrees with the database and the streams, or the database's books do
    /// not add up.
    pub fn drift(&self) -> bool {
        self.redis_drift() || self.books_drift()
    }

    /// Whether Redis disagrees with the database and the streams (what `--repair` mends).
    pub fn redis_drift(&self) -> bool {
        self.marked_unknown
            || (self.loaded && self.redis_stock != self.expected_stock)
            || !self.unknown_to_redis.is_empty()
            || !self.only_in_redis.is_empty()
            || !self.other_order.is_empty()
            || (self.loaded
                && self
                    .buckets
                    .iter()
                    .any(|b| b.misplaced > 0 || b.stock.is_none()))
    }

    /// Whether a unit is missing or counted twice in the database, or a closed order kept a
    /// payment: no repair by this command, a bug to look into.
    pub fn books_drift(&self) -> bool {
        self.initial_stock
            .is_some_and(|i| i != self.db_stock + self.holding)
            || self.paid_and_closed > 0
    }

    /// A split sale's buckets, one line each.
    fn write_buckets(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.buckets {
            let stock = b
                .stock
                .map_or("not loaded".to_owned(), |s| format!("stock {s}"));
            write!(
                f,
                "\n  bucket {} (shard {}): {stock}, {} buyers",
                b.bucket, b.shard, b.buyers
            )?;
            if b.claims > 0 {
                write!(f, ", {} borrowing now", b.claims)?;
            }
            if b.settled > 0 {
                write!(f, ", {} abandoned claims settled", b.settled)?;
            }
            if b.misplaced > 0 {
                write!(
                    f,
                    ", DRIFT: {} buyers recorded outside their home bucket",
                    b.misplaced
                )?;
            }
        }
        Ok(())
    }

    fn write_books(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(initial) = self.initial_stock
            && initial != self.db_stock + self.holding
        {
            write!(
                f,
                "\n  books: initial stock {initial} != stock left {} + orders not cancelled {}",
                self.db_stock, self.holding
            )?;
        }
        if self.paid_and_closed > 0 {
            write!(
                f,
                "\n  books: {} cancelled orders kept their payment (neither owed back nor refunded)",
                self.paid_and_closed
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for SaleCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.voucher;
        if self.marked_unknown {
            write!(
                f,
                "voucher {v}: DRIFT: Redis refuses it as unknown, the database sells it"
            )?;
        } else if !self.loaded {
            if self.books_drift() {
                write!(f, "voucher {v}: DRIFT (not in Redis)")?;
                return self.write_books(f);
            }
            return write!(
                f,
                "voucher {v}: not in Redis (loaded from the database on first use)"
            );
        } else if !self.drift() {
            write!(
                f,
                "voucher {v}: ok (stock {}, {} buyers)",
                self.redis_stock, self.buyers
            )?;
            return self.write_buckets(f);
        } else {
            write!(f, "voucher {v}: DRIFT")?;
        }
        if self.loaded && self.redis_stock != self.expected_stock {
            let gap = self.redis_stock - self.expected_stock;
            let what = if gap > 0 {
                format!("Redis would sell {gap} more than the database allows")
            } else {
                format!("Redis would sell {} fewer", -gap)
            };
            write!(
                f,
                "\n  stock: Redis {}, expected {} ({what})",
                self.redis_stock, self.expected_stock
            )?;
        }
        let list = |pairs: &[(i64, i64)]| {
            let shown: Vec<String> = pairs
                .iter()
                .take(10)
                .map(|(u, o)| format!("user {u} order {o}"))
                .collect();
            let more = pairs.len().saturating_sub(10);
            let more = if more > 0 {
                format!(", and {more} more")
            } else {
                String::new()
            };
            format!("{}{more}", shown.join(", "))
        };
        if !self.unknown_to_redis.is_empty() {
            write!(
                f,
                "\n  {} buyers the database or a stream holds are unknown to Redis (they could buy again): {}",
                self.unknown_to_redis.len(),
                list(&self.unknown_to_redis)
            )?;
        }
        if !self.only_in_redis.is_empty() {
            write!(
                f,
                "\n  {} orders Redis acknowledged are in neither the database nor a stream: {}",
                self.only_in_redis.len(),
                list(&self.only_in_redis)
            )?;
        }
        for (user, in_redis, elsewhere) in self.other_order.iter().take(10) {
            write!(
                f,
                "\n  user {user} has order {in_redis} in Redis but order {elsewhere} in the database or a stream"
            )?;
        }
        self.write_books(f)?;
        self.write_buckets(f)?;
        if self.repaired {
            write!(
                f,
                "\n  repaired: {} orders queued again, the sale reloaded from the database and the streams",
                self.only_in_redis.len()
            )?;
        }
        Ok(())
    }
}

impl Seckill {
    /// Checks every flash-sale voucher on sale (or only `only`), repairing drift if `repair`.
    pub async fn reconcile(
        &self,
        only: Option<VoucherId>,
        repair: bool,
    ) -> Result<Vec<SaleCheck>, SeckillError> {
        let vouchers = match only {
            Some(v) => vec![v.get()],
            None => orders::seckill_voucher_ids(&self.db).await?,
        };
        let mut checks = Vec::with_capacity(vouchers.len());
        for id in vouchers {
            let Ok(voucher) = VoucherId::new(id) else {
                continue;
            };
            if let Some(check) = self.reconcile_one(voucher, repair).await? {
                checks.push(check);
            }
        }
        Ok(checks)
    }

    /// One sale, under its warm-up lock (so no warm-up runs meanwhile); `None` when the
    /// database does not sell it.
    async fn reconcile_one(
        &self,
        voucher: VoucherId,
        repair: bool,
    ) -> Result<Option<SaleCheck>, SeckillError> {
        let lock = self.locks.lock(&Keys::seckill_warm_lock(voucher.get()))?;
        let Some(guard) = lock.try_lock(Duration::from_secs(30), None).await? else {
            return Err(SeckillError::WarmUpBusy(voucher.get()));
        };
        let result = self.compare(voucher).await;
        let result = match result {
            Ok(Some(mut check)) if repair && check.redis_drift() => {
                self.repair(voucher, &check).await.map(|()| {
                    check.repaired = true;
                    Some(check)
                })
            }
            other => other,
        };
        let _ = guard.unlock().await;
        result
    }

    /// Redis first (both hashes of each bucket at one instant), then the streams, then the
    /// database: an order accepted before the Redis read is then in a stream or in the table,
    /// and one accepted after it is found again in Redis by the second look below. A split
    /// sale's abandoned claims are settled first; the claims of grabs borrowing right now are
    /// in flight, not drift. They are read after the buyers and before the streams: a claim
    /// the buyers read saw is then still claimed, or was lent (its order in a stream by the
    /// time they are read) or dropped (its record gone at a last look).
    async fn compare(&self, voucher: VoucherId) -> Result<Option<SaleCheck>, SeckillError> {
        let buckets = self.buckets_of(voucher).await?;
        let all = self.all_buckets(voucher, buckets);
        let mut settled = vec![0usize; all.len()];
        if buckets.split() {
            for b in &all {
                settled[b.index as usize] = self
                    .settle_claims_in(voucher, buckets, b, CLAIM_STALE)
                    .await?;
            }
        }
        let mut in_redis: HashMap<i64, i64> = HashMap::new();
        let mut parts = Vec::with_capacity(all.len());
        let mut hashes = Vec::with_capacity(all.len());
        for b in &all {
            let (hash, buyers): (VoucherHash, HashMap<i64, i64>) = scripts::READ_SALE
                .key(&b.hash)
                .key(&b.buyers)
                .invoke_async(&mut self.redis.clone())
                .await?;
            parts.push(BucketCheck {
                bucket: b.index,
                shard: b.shard,
                stock: hash.sale().map(|s| s.stock),
                buyers: buyers.len(),
                claims: 0,
                misplaced: buyers
                    .keys()
                    .filter(|user| buckets.home(**user) != b.index)
                    .count(),
                settled: settled[b.index as usize],
            });
            in_redis.extend(buyers);
            hashes.push(hash);
        }
        let live = if buckets.split() {
            self.live_claims(voucher, buckets).await?
        } else {
            Default::default()
        };
        for part in &mut parts {
            part.claims = live
                .iter()
                .filter(|(user, _)| buckets.home(*user) == part.bucket)
                .count();
        }
        let shards: Vec<u32> = all
            .iter()
            .map(|b| b.shard)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let Some((_, load, _)) = self.what_to_load(voucher, &shards).await? else {
            return Ok(None);
        };
        let mut check = SaleCheck {
            voucher: voucher.get(),
            marked_unknown: hashes[0].marked_unknown(),
            ..SaleCheck::default()
        };
        if let Some(books) = order_life::books(&self.db, voucher.get()).await? {
            check.initial_stock = books.initial;
            check.db_stock = books.stock;
            check.holding = books.holding;
            check.paid_and_closed = books.paid_and_closed;
        }
        if buckets.split() {
            check.buckets = parts;
        }
        let sales: Vec<_> = hashes.iter().filter_map(VoucherHash::sale).collect();
        // Nothing loaded, nothing to compare; a split sale loaded in part is compared, and its
        // buckets not loaded are drift.
        if sales.is_empty() {
            return Ok(Some(check));
        }
        check.loaded = true;
        check.redis_stock = sales.iter().map(|s| s.stock).sum();
        check.buyers = in_redis.len();
        let elsewhere: HashMap<i64, i64> = load.buyers.iter().copied().collect();
        let mut missing = Vec::new();
        for &(user, order) in &load.buyers {
            match in_redis.get(&user) {
                None => missing.push((user, order)),
                Some(&o) if o != order => check.other_order.push((user, o, order)),
                Some(_) => {}
            }
        }
        // Accepted after the Redis read: in Redis now (in the buyer's home bucket), with the
        // same order.
        let mut late = 0;
        for ((user, order), now) in self.records_now(&all, buckets, missing).await? {
            match now {
                Some(o) if o == order => late += 1,
                Some(o) => check.other_order.push((user, o, order)),
                None => check.unknown_to_redis.push((user, order)),
            }
        }
        // In Redis only. (With RabbitMQ too, an order keeps its stream entry until the
        // consumer has written it, so one in the broker is in a stream.) A claim being lent
        // to right now has no unit yet and is in no stream: in flight, not drift.
        let mut orphans: Vec<(i64, i64)> = in_redis
            .iter()
            .filter(|&(user, order)| {
                !elsewhere.contains_key(user) && !live.contains(&(*user, *order))
            })
            .map(|(&user, &order)| (user, order))
            .collect();
        if buckets.split() && !orphans.is_empty() {
            // A claim dropped between the buyers' read and the claims' is no order: its
            // record is gone now.
            orphans = self
                .records_now(&all, buckets, orphans)
                .await?
                .into_iter()
                .filter(|((_, order), now)| *now == Some(*order))
                .map(|(pair, _)| pair)
                .collect();
        }
        check.only_in_redis = orphans;
        check.only_in_redis.sort_unstable();
        check.unknown_to_redis.sort_unstable();
        check.other_order.sort_unstable();
        // Each order Redis counted and the plan did not takes one from Redis's stock; each one
        // accepted after the Redis read took one from the plan's.
        check.expected_stock = load.stock + late - check.only_in_redis.len() as i64;
        Ok(Some(check))
    }

    /// The order each buyer's record in their home bucket names now, for `(user, order)` pairs.
    async fn records_now(
        &self,
        all: &[Bucket],
        buckets: StockBuckets,
        pairs: Vec<(i64, i64)>,
    ) -> Result<Vec<((i64, i64), Option<i64>)>, SeckillError> {
        let mut found = Vec::with_capacity(pairs.len());
        for b in all {
            let homed: Vec<(i64, i64)> = pairs
                .iter()
                .copied()
                .filter(|(user, _)| buckets.home(*user) == b.index)
                .collect();
            if homed.is_empty() {
                continue;
            }
            let users: Vec<i64> = homed.iter().map(|(u, _)| *u).collect();
            let now: Vec<Option<i64>> = redis::cmd("HMGET")
                .arg(&b.buyers)
                .arg(&users)
                .query_async(&mut self.redis.clone())
                .await?;
            found.extend(homed.into_iter().zip(now));
        }
        Ok(found)
    }

    /// Queues again the orders only Redis holds, then rebuilds the sale the way a warm-up
    /// does, from the database and the streams (announced to every instance first, so none
    /// keeps refusing it from memory: `super::memory`).
    async fn repair(&self, voucher: VoucherId, check: &SaleCheck) -> Result<(), SeckillError> {
        let buckets = self.buckets_of(voucher).await?;
        for &(user, order) in &check.only_in_redis {
            let (Ok(user_id), Ok(id)) = (UserId::new(user), OrderId::new(order)) else {
                tracing::warn!(
                    user,
                    order,
                    "a buyer record whose ids are not positive: left alone"
                );
                continue;
            };
            let order = NewOrder {
                id,
                user_id,
                voucher_id: voucher,
            };
            let stream = self.bucket(voucher, buckets.home(user)).stream;
            order_stream::append(&self.redis, &stream, order).await?;
            let record = PendingRecord {
                user_id,
                voucher_id: voucher,
                failed: false,
            };
            order_stream::write_pending(&self.redis, &self.keys, id.get(), record).await?;
        }
        self.unknown.remove(&voucher.get());
        if buckets.split() {
            self.unload_split(voucher, buckets).await?;
            return self.load_split(voucher, buckets).await;
        }
        let shard = self.shard(voucher);
        let _: i64 = scripts::UNLOAD
            .key(self.keys.seckill_voucher(shard, voucher.get()))
            .key(self.keys.seckill_buyers(shard, voucher.get()))
            .invoke_async(&mut self.redis.clone())
            .await?;
        self.load_from_database(voucher, shard).await
    }
}
