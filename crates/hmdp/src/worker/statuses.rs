//! Keeping an order's status findable while the worker cannot write it.
//!
//! The status record of an accepted order lives [`order_stream::PENDING_TTL`] (a day); the
//! status query falls back to the database and to `seckill:failed`, but an order still waiting
//! in its stream is in neither. Through an outage the worker holds orders for as long as it
//! lasts (a weekend, say), so while it holds them it gives every record of its shard's stream
//! the full lifetime again, at most once per [`DEFAULT_STATUS_REFRESH_EVERY`] (one paged
//! `XRANGE` and pipelined `PEXPIRE`s). This rather than looking up the stream on a status query:
//! a query knows the order id, not the entry id nor (once the record is gone) the shard, so it
//! could only scan, at a cost growing with the backlog, on the request path.
//!
//! `seckill:failed` is written since the worker records the orders it gives up on there; at its
//! first start a worker copies the dead letters from before into it, once (marked in Redis).

use std::time::Duration;

use super::OrderWorker;
use crate::order_stream;

/// Default of [`OrderWorker::with_status_refresh_every`]: well within the records' day.
pub(crate) const DEFAULT_STATUS_REFRESH_EVERY: Duration = Duration::from_secs(60 * 60);

impl OrderWorker {
    /// Through an outage, the status records of the orders held are refreshed this often.
    #[cfg(feature = "test-util")]
    pub fn with_status_refresh_every(mut self, d: Duration) -> Self {
        self.status_refresh_every = d;
        self
    }

    /// Renews the status records of every order waiting in these shards' streams (held through
    /// an outage, or not read yet). A failure is only logged: the next refresh tries again.
    pub(super) async fn refresh_statuses(&self, shards: impl IntoIterator<Item = u32>) {
        for shard in shards {
            let stream = self.keys.seckill_stream(shard);
            match order_stream::refresh_pending(&self.redis, &self.keys, &stream).await {
                Ok(orders) => tracing::info!(
                    shard,
                    orders,
                    "renewed the status records of the orders waiting out the outage"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, shard, "cannot renew the status records of held orders")
                }
            }
        }
    }

    /// Copies the dead letters into `seckill:failed` unless Redis says it was done; never
    /// fails (a failure is logged and the next start tries again).
    pub async fn backfill_failed(&self) {
        let marker = self.keys.seckill_failed_backfilled();
        let mut redis = self.redis.clone();
        match redis::cmd("EXISTS")
            .arg(&marker)
            .query_async::<bool>(&mut redis)
            .await
        {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot check whether seckill:failed was backfilled");
                return;
            }
        }
        let mut copied = 0;
        for shard in 0..self.settings.shards {
            let dead = self.keys.seckill_dead_letters(shard);
            match order_stream::copy_dead_letters_to_failed(&self.redis, &self.keys, &dead).await {
                Ok(n) => copied += n,
                Err(e) => {
                    tracing::warn!(error = %e, shard, "cannot copy the dead letters into seckill:failed; the next start tries again");
                    return;
                }
            }
        }
        if let Err(e) = redis::cmd("SET")
            .arg(&marker)
            .arg(copied)
            .query_async::<()>(&mut redis)
            .await
        {
            tracing::warn!(error = %e, "cannot record that seckill:failed was backfilled");
        }
        tracing::info!(
            orders = copied,
            "copied the dead-lettered orders into seckill:failed"
        );
    }
}
