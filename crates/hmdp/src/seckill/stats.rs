//! This instance's counters, and the live view of one sale for the dashboard.

use std::sync::atomic::AtomicU64;

use chrono::{Local, NaiveDateTime};

use super::{Seckill, SeckillError};
use crate::{config::SeckillMode, domain::VoucherId, order_stream, storage::orders};

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
        let shard = self.shard(voucher);
        let (redis_stock, accepted): (Option<i64>, i64) = redis::pipe()
            .cmd("HGET")
            .arg(self.keys.seckill_voucher(shard, voucher.get()))
            .arg("stock")
            .cmd("SCARD")
            .arg(self.keys.seckill_buyers(shard, voucher.get()))
            .query_async(&mut self.redis.clone())
            .await?;
        let stream =
            order_stream::read_gauges(&self.redis, &self.keys.seckill_stream(shard)).await?;
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
            stream_length: stream.length as i64,
            pending: stream.group.as_ref().map_or(0, |g| g.pending as i64),
            lag: stream.group.and_then(|g| g.lag).map(|l| l as i64),
            begin_time: v.begin_time,
            end_time: v.end_time,
            now_millis: Local::now().timestamp_millis(),
        }))
    }
}
