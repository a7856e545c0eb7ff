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
    /// Stock left as Redis sees it (what buyers race for); `None` when not loaded.
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
    /// Entries in the shard's order stream (written ones are trimmed away over time).
    pub stream_length: i64,
    /// Entries delivered to a worker and not yet acknowledged.
    pub pending: i64,
    /// Entries not yet delivered to any worker (Redis 7's consumer-group lag).
    pub lag: Option<i64>,
    pub begin_time: ApiDateTime,
    pub end_time: ApiDateTime,
    /// The server's clock in milliseconds, so a page can count down without trusting its own.
    pub now_millis: i64,
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
        let shard = self.shard(voucher);
        let (hash, accepted): (VoucherHash, i64) = redis::pipe()
            .cmd("HGETALL")
            .arg(self.keys.seckill_voucher(shard, voucher.get()))
            .cmd("HLEN")
            .arg(self.keys.seckill_buyers(shard, voucher.get()))
            .query_async(&mut self.redis.clone())
            .await?;
        let stream =
            order_stream::read_gauges(&self.redis, &self.keys.seckill_stream(shard)).await?;
        Ok(Some(SaleStats {
            voucher_id: voucher.get(),
            redis_stock: hash.stock,
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
            stream_length: stream.length as i64,
            pending: stream.group.as_ref().map_or(0, |g| g.pending as i64),
            lag: stream.group.and_then(|g| g.lag).map(|l| l as i64),
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
