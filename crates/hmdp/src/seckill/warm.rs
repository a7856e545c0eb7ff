//! Loading a voucher into Redis from the database, without handing out stock twice: the
//! order streams are read first, then one database snapshot of the voucher and its orders
//! (docs/internals/flash-sale.md).

use std::{
    collections::{BTreeMap, HashSet},
    time::Duration,
};

use chrono::NaiveDateTime;

use super::{Seckill, SeckillError, SeckillMode, local_millis, scripts, voucher_hash};
use crate::{
    domain::{StockBuckets, VoucherId},
    kv::{Keys, RedisConn},
    order_stream,
    storage::orders::{self, NewOrder, SaleSnapshot},
};

/// How long an unknown voucher id is remembered as unknown.
const MISSING_TTL: Duration = Duration::from_secs(60);

/// What a warm-up loads: the stock left once every accepted order is counted, and the buyers
/// with their orders.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Load {
    pub stock: i64,
    /// `(user id, order id)`: the written order of a buyer, else the first queued one.
    pub buyers: Vec<(i64, i64)>,
    /// Accepted orders not in the database (queued, or given up on), one per buyer.
    pub unwritten: i64,
}

/// Counts the orders of the streams that the snapshot does not hold: each new buyer takes
/// one from stock (a second order of a buyer can never be written: the unique key refuses it).
pub(super) fn plan(snapshot: &SaleSnapshot, queued: &[NewOrder], dead: &[NewOrder]) -> Load {
    let persisted: HashSet<i64> = snapshot.orders.iter().map(|(id, _)| *id).collect();
    let mut buyers: BTreeMap<i64, i64> = snapshot.orders.iter().map(|(o, u)| (*u, *o)).collect();
    let mut unwritten = 0i64;
    for o in queued.iter().chain(dead) {
        let (id, user) = (o.id.get(), o.user_id.get());
        if !persisted.contains(&id) && !buyers.contains_key(&user) {
            buyers.insert(user, id);
            unwritten += 1;
        }
    }
    let buyers: Vec<(i64, i64)> = buyers.into_iter().collect();
    Load {
        stock: snapshot.voucher.stock - unwritten,
        buyers,
        unwritten,
    }
}

impl Seckill {
    /// Loads a voucher into Redis from the database, or repairs an unusable one. Safe to call
    /// concurrently: a lock makes one caller do the work, and the final write happens only if
    /// the voucher is still missing.
    pub async fn warm(&self, voucher: VoucherId) -> Result<(), SeckillError> {
        // An id that is no flash-sale voucher is settled by the primary key before any lock or
        // stream scan: a client probing random ids costs one indexed read each.
        let Some(sale) = orders::seckill_voucher(&self.db, voucher).await? else {
            return self.mark_missing(voucher).await;
        };
        let lock = self.locks.lock(&Keys::seckill_warm_lock(voucher.get()))?;
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
        let result = if sale.buckets.split() {
            self.warm_split(voucher, sale.buckets).await
        } else {
            self.warm_locked(voucher).await
        };
        // Whatever happened: a failed load must not keep others waiting for the lease.
        let _ = guard.unlock().await;
        result
    }

    async fn warm_locked(&self, voucher: VoucherId) -> Result<(), SeckillError> {
        let shard = self.shard(voucher);
        let state: i64 = scripts::CHECK_LOADED
            .key(self.keys.seckill_voucher(shard, voucher.get()))
            .key(self.keys.seckill_buyers(shard, voucher.get()))
            .invoke_async(&mut self.redis.clone())
            .await?;
        match state {
            -1 => {
                self.stats.reload_incomplete.inc();
                tracing::warn!(
                    voucher = voucher.get(),
                    "flash-sale voucher incomplete in Redis (a field or its buyer set lost); reloading it"
                );
            }
            0 => {
                self.stats.reload_missing.inc();
                tracing::warn!(
                    voucher = voucher.get(),
                    "flash-sale voucher on sale in the database is gone from Redis; reloading it. \
                     Unless it was never loaded into this Redis, Redis lost its data, and with it \
                     the accepted orders not yet written to the database"
                );
            }
            _ => {}
        }
        if state != 1 {
            self.stats.warm_ups.inc();
            self.load_from_database(voucher, shard).await?;
        }
        Ok(())
    }

    pub(super) async fn load_from_database(
        &self,
        voucher: VoucherId,
        shard: u32,
    ) -> Result<(), SeckillError> {
        let mut redis = self.redis.clone();
        let hash = self.keys.seckill_voucher(shard, voucher.get());
        let Some((snapshot, load, dead)) = self.what_to_load(voucher, &[shard]).await? else {
            return self.mark_missing(voucher).await;
        };
        let buyers_key = self.keys.seckill_buyers(shard, voucher.get());
        for chunk in load.buyers.chunks(1000) {
            let _: i64 = redis::cmd("HSET")
                .arg(&buyers_key)
                .arg(chunk)
                .query_async(&mut redis)
                .await?;
        }
        // Every instance forgets its old answers before the stock can be taken.
        let generation = self.announce_load(voucher, shard).await?;
        // The hash last, and only if nobody loaded it meanwhile.
        let sale = voucher_hash::Sale {
            stock: load.stock.max(0),
            begin_ms: local_millis(snapshot.voucher.begin_time),
            end_ms: local_millis(snapshot.voucher.end_time),
            sold: load.buyers.len() as i64,
            generation,
        };
        let released = self.keys.seckill_released(shard, voucher.get());
        let loaded = sale
            .load_counting(&hash, Some((&released, &snapshot.closed)), &mut redis)
            .await?;
        tracing::info!(
            voucher = voucher.get(),
            stock = load.stock,
            buyers = load.buyers.len(),
            queued_unwritten = load.unwritten,
            dead_letters = dead,
            loaded,
            "flash-sale voucher loaded into Redis from the database"
        );
        Ok(())
    }

    /// What a warm-up loads now, read from the streams of `shards` first and then from one database
    /// snapshot (so an order on its way from one to the other is seen at least once): the
    /// snapshot, the load and the dead letters' count; `None` if the database does not sell it.
    pub(super) async fn what_to_load(
        &self,
        voucher: VoucherId,
        shards: &[u32],
    ) -> Result<Option<(SaleSnapshot, Load, usize)>, SeckillError> {
        let (mut queued, mut dead) = (Vec::new(), Vec::new());
        for &shard in shards {
            queued.extend(
                order_stream::orders_of_voucher(
                    &self.redis,
                    &self.keys.seckill_stream(shard),
                    voucher.get(),
                )
                .await?,
            );
            dead.extend(
                order_stream::orders_of_voucher(
                    &self.redis,
                    &self.keys.seckill_dead_letters(shard),
                    voucher.get(),
                )
                .await?,
            );
        }
        let Some(snapshot) = orders::sale_snapshot(&self.db, voucher).await? else {
            return Ok(None);
        };
        let load = plan(&snapshot, &queued, &dead);
        Ok(Some((snapshot, load, dead.len())))
    }

    /// Remembers in Redis, for every instance, that `voucher` is no flash-sale voucher (unless
    /// it got loaded meanwhile).
    async fn mark_missing(&self, voucher: VoucherId) -> Result<(), SeckillError> {
        let mark = scripts::MarkMissingCall {
            hash: &self
                .keys
                .seckill_voucher(self.shard(voucher), voucher.get()),
            ttl_ms: MISSING_TTL.as_millis() as u64,
        }
        .command();
        let _: i64 = scripts::eval(&scripts::MARK_MISSING, &mark, &mut self.redis.clone()).await?;
        Ok(())
    }

    /// Loads a freshly created voucher into Redis (a failure is logged: the first request
    /// loads it instead).
    pub async fn load_new_voucher(
        &self,
        voucher: VoucherId,
        stock: i64,
        begin: NaiveDateTime,
        end: NaiveDateTime,
        buckets: StockBuckets,
    ) {
        self.unknown.remove(&voucher.get());
        self.layouts.insert(voucher.get(), buckets);
        if self.settings.mode == SeckillMode::Sync {
            return;
        }
        if buckets.split() {
            if buckets.get() > self.settings.shards && matches!(self.redis, RedisConn::Cluster(_)) {
                tracing::warn!(
                    voucher = voucher.get(),
                    buckets = buckets.get(),
                    shards = self.settings.shards,
                    "the voucher has more stock buckets than HMDP_SECKILL_SHARDS: buckets share \
                     hash slots, so its sale spreads over at most that many masters (exact all \
                     the same)"
                );
            }
            if let Err(e) = self
                .load_new_split(voucher, stock, begin, end, buckets)
                .await
            {
                tracing::warn!(voucher = voucher.get(), error = %e, "could not load the new voucher into Redis; it loads on first use");
            }
            return;
        }
        let shard = self.shard(voucher);
        let result = match self.announce_load(voucher, shard).await {
            Ok(generation) => voucher_hash::Sale {
                stock,
                begin_ms: local_millis(begin),
                end_ms: local_millis(end),
                sold: 0,
                generation,
            }
            .load(
                &self.keys.seckill_voucher(shard, voucher.get()),
                &mut self.redis.clone(),
            )
            .await
            .map_err(SeckillError::from),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            tracing::warn!(voucher = voucher.get(), error = %e, "could not load the new voucher into Redis; it loads on first use");
        }
    }
}

impl Seckill {
    /// A new split sale: its stock shared out over the buckets, under one generation.
    async fn load_new_split(
        &self,
        voucher: VoucherId,
        stock: i64,
        begin: NaiveDateTime,
        end: NaiveDateTime,
        buckets: StockBuckets,
    ) -> Result<(), SeckillError> {
        let all = self.all_buckets(voucher, buckets);
        let generation = self.announce_load(voucher, all[0].shard).await?;
        let mut redis = self.redis.clone();
        for b in &all {
            voucher_hash::Sale {
                stock: buckets.share(stock, b.index),
                begin_ms: local_millis(begin),
                end_ms: local_millis(end),
                sold: 0,
                generation,
            }
            .load(&b.hash, &mut redis)
            .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        domain::{OrderId, UserId},
        storage::orders::SeckillVoucher,
    };

    fn order(id: i64, user_id: i64) -> NewOrder {
        NewOrder {
            id: OrderId::new(id).unwrap(),
            user_id: UserId::new(user_id).unwrap(),
            voucher_id: VoucherId::new(1).unwrap(),
        }
    }

    #[test]
    fn orders_outside_the_snapshot_take_stock_once_per_buyer() {
        let snapshot = SaleSnapshot {
            voucher: SeckillVoucher {
                voucher_id: 1,
                stock: 10,
                begin_time: NaiveDateTime::default(),
                end_time: NaiveDateTime::default(),
                buckets: StockBuckets::ONE,
            },
            // Orders 1 and 2 are written.
            orders: vec![(1, 100), (2, 200)],
            closed: vec![],
        };
        let queued = [
            order(1, 100), // written, not yet trimmed: counted by the snapshot
            order(3, 300), // unwritten: takes one
            order(4, 300), // a second order of buyer 300 can never be written
            order(5, 200), // a buyer who already has a written order: nothing more
        ];
        let dead = [order(6, 600)]; // given up on: its stock stays taken
        assert_eq!(
            plan(&snapshot, &queued, &dead),
            Load {
                stock: 8,
                // Each buyer with the order they get answered on a second grab.
                buyers: vec![(100, 1), (200, 2), (300, 3), (600, 6)],
                unwritten: 2,
            }
        );
        assert_eq!(plan(&snapshot, &[], &[]).stock, 10);
    }
}
