//! This instance's counters, and the live view of one sale for the dashboard.

use chrono::Local;

use super::{Seckill, SeckillError, SeckillMode, voucher_hash::VoucherHash};
use crate::{
    domain::{ApiDateTime, VoucherId, VoucherOrderStatus},
    metrics::{Counter, Family, Registry},
    order_stream,
    storage::{order_life, orders},
};

/// Flash-sale requests decided by this instance, by outcome, and warm-ups (`hmdp_seckill_*`).
#[derive(Debug)]
pub struct SeckillStats {
    outcomes: Family<[(&'static str, &'static str); 1], Counter>,
    pub accepted: Counter,
    pub sold_out: Counter,
    pub duplicate: Counter,
    pub not_started: Counter,
    pub ended: Counter,
    pub unknown: Counter,
    pub warm_ups: Counter,
    reloads: Family<[(&'static str, &'static str); 1], Counter>,
    /// Warm-ups of a voucher on sale whose keys were all gone from Redis (never loaded there,
    /// or Redis lost its data), and of one with a field or its buyers gone (certainly lost).
    pub reload_missing: Counter,
    pub reload_incomplete: Counter,
    /// Accepted orders whose id already had a pending record (the id generator repeated).
    pub id_collisions: Counter,
    /// Dashboard views computed (not served from the one-second memory).
    pub stats_computed: Counter,
    /// Accepted grabs answered 503 because the replicas did not confirm them in time.
    pub replica_wait_timeouts: Counter,
    memory_refusals: Family<[(&'static str, &'static str); 1], Counter>,
    /// Refusals answered from this instance's memory, without Redis (also counted above).
    pub memory_sold_out: Counter,
    pub memory_duplicate: Counter,
    /// Load announcements that not every instance acknowledged in time.
    pub clear_ack_timeouts: Counter,
    /// Split sales: grabs served by a bucket other than the buyer's home bucket.
    pub borrowed: Counter,
    /// Split sales: claims left by grabs that never finished, dropped with no unit taken.
    pub claims_dropped: Counter,
}

impl Default for SeckillStats {
    fn default() -> Self {
        let outcomes = Family::<[(&'static str, &'static str); 1], Counter>::default();
        // One handle per outcome, made once: counting a grab is one atomic add, no lookup.
        let outcome = |code| outcomes.get_or_create(&[("outcome", code)]).clone();
        let memory_refusals = Family::<[(&'static str, &'static str); 1], Counter>::default();
        let remembered = |code| memory_refusals.get_or_create(&[("outcome", code)]).clone();
        let reloads = Family::<[(&'static str, &'static str); 1], Counter>::default();
        let reload = |cause| reloads.get_or_create(&[("cause", cause)]).clone();
        Self {
            reload_missing: reload("missing"),
            reload_incomplete: reload("incomplete"),
            reloads,
            memory_sold_out: remembered("sold_out"),
            memory_duplicate: remembered("duplicate_order"),
            memory_refusals,
            clear_ack_timeouts: Counter::default(),
            accepted: outcome("accepted"),
            sold_out: outcome("sold_out"),
            duplicate: outcome("duplicate_order"),
            not_started: outcome("seckill_not_started"),
            ended: outcome("seckill_ended"),
            unknown: outcome("voucher_not_found"),
            warm_ups: Counter::default(),
            id_collisions: Counter::default(),
            stats_computed: Counter::default(),
            replica_wait_timeouts: Counter::default(),
            borrowed: Counter::default(),
            claims_dropped: Counter::default(),
            outcomes,
        }
    }
}

impl SeckillStats {
    /// Adds the flash-sale metrics to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "hmdp_seckill_outcomes",
            "Flash-sale requests decided by this instance, by outcome code",
            self.outcomes.clone(),
        );
        registry.register(
            "hmdp_seckill_id_collisions",
            "Accepted orders whose id was already another pending order's (an id counter reset)",
            self.id_collisions.clone(),
        );
        registry.register(
            "hmdp_seckill_stats_computed",
            "Sale dashboard views computed from Redis and the database (the rest were reused)",
            self.stats_computed.clone(),
        );
        registry.register(
            "hmdp_seckill_replica_wait_timeouts",
            "Accepted grabs answered 503 because fewer replicas than HMDP_REDIS_WAIT_REPLICAS \
             confirmed them within HMDP_REDIS_WAIT_TIMEOUT_MS",
            self.replica_wait_timeouts.clone(),
        );
        registry.register(
            "hmdp_seckill_memory_refusals",
            "Flash-sale refusals this instance answered from memory, without Redis, by outcome \
             code (also counted in hmdp_seckill_outcomes)",
            self.memory_refusals.clone(),
        );
        registry.register(
            "hmdp_seckill_clear_ack_timeouts",
            "Voucher loads that went ahead before every instance acknowledged the announcement \
             (an instance may refuse as sold out for up to a second)",
            self.clear_ack_timeouts.clone(),
        );
        registry.register(
            "hmdp_seckill_reloads",
            "Vouchers on sale in the database found gone from Redis by a grab, by cause: missing \
             (no key left: never loaded, or Redis lost its data with the accepted orders not yet \
             written) or incomplete (a field or the buyers lost)",
            self.reloads.clone(),
        );
        registry.register(
            "hmdp_seckill_borrowed",
            "Accepted grabs of a sale split over stock buckets whose unit came from a bucket \
             other than the buyer's home bucket (it had run dry)",
            self.borrowed.clone(),
        );
        registry.register(
            "hmdp_seckill_claims_dropped",
            "Buyer records claimed by a grab that never finished borrowing (its instance died), \
             dropped once every bucket was marked never to lend to it",
            self.claims_dropped.clone(),
        );
        registry.register(
            "hmdp_seckill_warm_ups",
            "Vouchers loaded into Redis from the database",
            self.warm_ups.clone(),
        );
    }
}

/// A live view of one sale, for the dashboard.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SaleStats {
    pub voucher_id: i64,
    /// Stock left as Redis sees it (what buyers race for; every bucket's together); `None`
    /// when not loaded (a bucket of a split sale not loaded).
    pub redis_stock: Option<i64>,
    /// Stock left in the database (lags behind while orders are queued).
    pub db_stock: i64,
    /// Buyers accepted so far (the Redis buyer set).
    pub accepted: i64,
    /// Orders written to the database.
    pub persisted: i64,
    /// Written orders waiting to be paid (status 1).
    pub unpaid: i64,
    /// Written orders that were paid (statuses 2 paid, 3 used, 5 refunding, 6 refunded).
    pub paid: i64,
    /// Written orders cancelled or closed unpaid (status 4): their units went back on sale.
    pub released: i64,
    /// Written orders by status, each status present.
    pub by_status: StatusCounts,
    /// Entries in the order streams of the sale's shards (written ones are trimmed away over
    /// time).
    pub stream_length: i64,
    /// Entries delivered to a worker and not yet acknowledged.
    pub pending: i64,
    /// Entries not yet delivered to any worker (Redis 7's consumer-group lag).
    pub lag: Option<i64>,
    pub begin_time: ApiDateTime,
    pub end_time: ApiDateTime,
    /// Buckets the stock is split over in Redis (1: one key).
    pub stock_buckets: u32,
    /// Each bucket of a split sale, when asked for (`?buckets=true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buckets: Option<Vec<BucketStats>>,
    /// The server's clock in milliseconds, so a page can count down without trusting its own.
    pub now_millis: i64,
}

/// One stock bucket of a split sale, live.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BucketStats {
    pub bucket: u32,
    /// The order-stream shard (and so the hash slot) it lives on.
    pub shard: u32,
    /// Its share of the stock left; `None` when not loaded.
    pub redis_stock: Option<i64>,
    /// Buyers whose home it is and who have an order (a grab borrowing a unit for its buyer
    /// right now is not counted yet).
    pub accepted: i64,
}

/// How many written orders of a sale are in each status.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusCounts {
    pub unpaid: i64,
    pub paid: i64,
    pub used: i64,
    pub cancelled: i64,
    pub refunding: i64,
    pub refunded: i64,
}

impl StatusCounts {
    fn from_counts(counts: &[(VoucherOrderStatus, i64)]) -> Self {
        let mut c = Self::default();
        for &(status, n) in counts {
            *match status {
                VoucherOrderStatus::Unpaid => &mut c.unpaid,
                VoucherOrderStatus::Paid => &mut c.paid,
                VoucherOrderStatus::Used => &mut c.used,
                VoucherOrderStatus::Cancelled => &mut c.cancelled,
                VoucherOrderStatus::Refunding => &mut c.refunding,
                VoucherOrderStatus::Refunded => &mut c.refunded,
            } += n;
        }
        c
    }

    /// Orders that were paid at some point, whatever came after.
    fn ever_paid(&self) -> i64 {
        self.paid + self.used + self.refunding + self.refunded
    }
}

impl Seckill {
    /// The live state of a sale; `None` for an unknown voucher. Computed at most once a second
    /// per voucher on this instance, however many ask.
    pub async fn sale_stats(&self, voucher: VoucherId) -> Result<Option<SaleStats>, SeckillError> {
        let stats = self
            .sale_stats
            .try_get_with(voucher.get(), self.compute_sale_stats(voucher))
            .await
            .map_err(SeckillError::Shared)?;
        Ok(stats.map(|mut s| {
            s.now_millis = Local::now().timestamp_millis();
            s
        }))
    }

    async fn compute_sale_stats(
        &self,
        voucher: VoucherId,
    ) -> Result<Option<SaleStats>, SeckillError> {
        self.stats.stats_computed.inc();
        let Some(v) = orders::seckill_voucher(&self.db, voucher).await? else {
            return Ok(None);
        };
        let counts = order_life::status_counts(&self.db, voucher.get()).await?;
        let persisted = counts.iter().map(|(_, n)| n).sum();
        let by_status = StatusCounts::from_counts(&counts);
        let buckets = v.buckets;
        let mut parts = Vec::with_capacity(buckets.get() as usize);
        let mut shards = std::collections::BTreeSet::new();
        for b in self.all_buckets(voucher, buckets) {
            let mut pipe = redis::pipe();
            pipe.cmd("HGETALL").arg(&b.hash).cmd("HLEN").arg(&b.buyers);
            let (hash, buyers, claims): (VoucherHash, i64, i64) = if buckets.split() {
                pipe.cmd("ZCARD")
                    .arg(&b.claims)
                    .query_async(&mut self.redis.clone())
                    .await?
            } else {
                let (hash, buyers) = pipe.query_async(&mut self.redis.clone()).await?;
                (hash, buyers, 0)
            };
            shards.insert(b.shard);
            parts.push(BucketStats {
                bucket: b.index,
                shard: b.shard,
                redis_stock: hash.stock,
                accepted: buyers - claims,
            });
        }
        let (mut stream_length, mut pending, mut lag) = (0, 0, None::<i64>);
        for shard in shards {
            let stream =
                order_stream::read_gauges(&self.redis, &self.keys.seckill_stream(shard)).await?;
            stream_length += stream.length as i64;
            pending += stream.group.as_ref().map_or(0, |g| g.pending as i64);
            if let Some(l) = stream.group.and_then(|g| g.lag) {
                lag = Some(lag.unwrap_or(0) + l as i64);
            }
        }
        let accepted = parts.iter().map(|p| p.accepted).sum();
        let redis_stock = parts
            .iter()
            .map(|p| p.redis_stock)
            .try_fold(0, |sum, s| s.map(|s| sum + s));
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
            unpaid: by_status.unpaid,
            paid: by_status.ever_paid(),
            released: by_status.cancelled,
            by_status,
            stream_length,
            pending,
            lag,
            stock_buckets: buckets.get(),
            buckets: buckets.split().then_some(parts),
            begin_time: v.begin_time.into(),
            end_time: v.end_time.into(),
            now_millis: Local::now().timestamp_millis(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paid_counts_every_status_an_order_reaches_only_by_paying() {
        use VoucherOrderStatus::*;
        let c = StatusCounts::from_counts(&[
            (Unpaid, 4),
            (Paid, 3),
            (Used, 2),
            (Cancelled, 7),
            (Refunding, 1),
            (Refunded, 5),
        ]);
        assert_eq!(c.ever_paid(), 3 + 2 + 1 + 5);
        assert_eq!((c.unpaid, c.cancelled), (4, 7));
        assert_eq!(StatusCounts::from_counts(&[]), StatusCounts::default());
    }
}
