//! Writing entries: one transaction per batch, then the acknowledgement; an entry that cannot
//! be written is retried later or, once it has failed long enough, dead-lettered.

use std::time::{Duration, Instant};

use redis::streams::StreamId;

use super::{GROUP, OrderWorker, Step, WorkerError, scripts::RECORD_FAILURE};
use crate::{
    kv::RedisConn,
    order_stream::{self, PendingRecord},
    storage::orders::{self, BatchError, BatchOutcome, NewOrder},
};

impl OrderWorker {
    /// Writes entries in one transaction and acknowledges them after the commit.
    pub(super) async fn write(
        &self,
        shard: u32,
        entries: Vec<StreamId>,
    ) -> Result<Step, WorkerError> {
        if entries.is_empty() {
            return Ok(Step::Idle);
        }
        let handled = entries.len();
        let mut good: Vec<(StreamId, NewOrder)> = Vec::with_capacity(entries.len());
        for e in entries {
            match order_stream::parse(&e) {
                Some(order) => good.push((e, order)),
                // Entries from a deleted (trimmed) message come back without fields.
                None => self.dead_letter(shard, &e, "malformed entry").await?,
            }
        }
        if good.is_empty() {
            return Ok(Step::Wrote(handled));
        }
        let orders: Vec<NewOrder> = good.iter().map(|(_, o)| *o).collect();
        let started = Instant::now();
        match orders::write_order_batch(&self.db, &orders).await {
            Ok(outcome) => {
                self.stats
                    .write_seconds
                    .observe(started.elapsed().as_secs_f64());
                self.stats.batches.inc();
                self.stats.batch_size.observe(orders.len() as f64);
                self.settle(shard, &good, outcome).await?;
                Ok(Step::Wrote(handled))
            }
            Err(BatchError::Storage(e)) if e.is_unavailable() => {
                self.stats.db_outages.inc();
                Err(WorkerError::Stalled {
                    entries: good.into_iter().map(|(e, _)| e).collect(),
                    source: e,
                })
            }
            Err(first) => {
                tracing::warn!(error = ?first, shard, "batch refused; writing its orders one by one");
                let mut rest = good.into_iter();
                while let Some((entry, order)) = rest.next() {
                    match orders::write_order_batch(&self.db, std::slice::from_ref(&order)).await {
                        Ok(outcome) => {
                            self.settle(shard, &[(entry, order)], outcome).await?;
                        }
                        Err(BatchError::Storage(e)) if e.is_unavailable() => {
                            self.stats.db_outages.inc();
                            let mut entries = vec![entry];
                            entries.extend(rest.map(|(e, _)| e));
                            return Err(WorkerError::Stalled { entries, source: e });
                        }
                        Err(err) => self.failed(shard, &entry, &format!("{err:?}")).await?,
                    }
                }
                Ok(Step::Wrote(handled))
            }
        }
    }

    /// After a commit: counts, dead-letters the conflicts, acknowledges the rest.
    async fn settle(
        &self,
        shard: u32,
        batch: &[(StreamId, NewOrder)],
        outcome: BatchOutcome,
    ) -> Result<(), WorkerError> {
        self.stats.persisted.inc_by(outcome.inserted);
        self.stats.already_written.inc_by(outcome.already_written);
        let mut acked: Vec<&(StreamId, NewOrder)> = Vec::with_capacity(batch.len());
        for item in batch {
            match outcome.conflicts.iter().find(|(o, _)| *o == item.1) {
                Some((order, conflict)) => {
                    self.stats.conflicts.inc();
                    tracing::error!(
                        order = order.id,
                        user = order.user_id,
                        voucher = order.voucher_id,
                        %conflict,
                        "accepted order collides with another order in the database; not written"
                    );
                    self.dead_letter(shard, &item.0, &conflict.to_string())
                        .await?;
                }
                None => acked.push(item),
            }
        }
        self.ack(shard, &acked).await
    }

    /// Records a failed write of one entry; dead-letters it when it has failed often enough
    /// for long enough, else leaves it pending for a later retry.
    async fn failed(&self, shard: u32, entry: &StreamId, error: &str) -> Result<(), WorkerError> {
        let (first, failures, now): (i64, u64, i64) = RECORD_FAILURE
            .key(self.keys.seckill_failing(shard))
            .arg(&entry.id)
            .invoke_async(&mut self.redis.clone())
            .await?;
        let failing_for = Duration::from_millis(now.saturating_sub(first).max(0) as u64);
        if failures >= self.settings.max_deliveries && failing_for >= self.dead_letter_after {
            self.dead_letter(
                shard,
                entry,
                &format!("failed {failures} times over {failing_for:?}: {error}"),
            )
            .await
        } else {
            tracing::warn!(entry = %entry.id, shard, failures, ?failing_for, error, "order not written; it will be retried");
            Ok(())
        }
    }

    async fn ack(&self, shard: u32, items: &[&(StreamId, NewOrder)]) -> Result<(), WorkerError> {
        if items.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.cmd("XACK")
            .arg(self.keys.seckill_stream(shard))
            .arg(GROUP);
        for (e, _) in items {
            pipe.arg(&e.id);
        }
        pipe.ignore();
        // Failure records of entries that failed before (none, nearly always: O(1) then).
        pipe.cmd("HDEL").arg(self.keys.seckill_failing(shard));
        for (e, _) in items {
            pipe.arg(&e.id);
        }
        pipe.ignore();
        // The status query no longer needs the pending records once the orders are written:
        // one multi-key `DEL` in the same round trip. (Deleting them one awaited `DEL` at a
        // time took ~13 ms of every 200-order batch under load: see BENCHMARKS.md.) The
        // pending keys live in other slots than the stream; on a cluster a pipeline must stay
        // in one slot, so there the `DEL` goes on its own and redis-rs splits it by slot.
        let mut del = redis::cmd("DEL");
        for (_, o) in items {
            del.arg(self.keys.seckill_pending(o.id));
        }
        let mut redis = self.redis.clone();
        if matches!(redis, RedisConn::Cluster(_)) {
            let _: () = pipe.query_async(&mut redis).await?;
            let _: i64 = del.query_async(&mut redis).await?;
        } else {
            pipe.add_command(del).ignore();
            let _: () = pipe.query_async(&mut redis).await?;
        }
        Ok(())
    }

    /// Moves an entry to the shard's dead-letter stream (with `origin` and `reason`) and marks
    /// its order `failed` for the status query.
    async fn dead_letter(
        &self,
        shard: u32,
        entry: &StreamId,
        reason: &str,
    ) -> Result<(), WorkerError> {
        // The status first: should the move below not happen, the entry is retried, and a
        // written order shows `created` whatever its pending record says.
        if let Some(order) = order_stream::parse(entry) {
            let record = PendingRecord {
                user_id: order.user_id,
                voucher_id: order.voucher_id,
                failed: true,
            };
            order_stream::write_pending(&self.redis, &self.keys, order.id, record).await?;
        }
        let mut cmd = redis::cmd("XADD");
        cmd.arg(self.keys.seckill_dead_letters(shard)).arg("*");
        for (k, v) in &entry.map {
            let v: String = redis::from_redis_value_ref(v).unwrap_or_default();
            cmd.arg(k).arg(v);
        }
        cmd.arg(order_stream::FIELD_ORIGIN)
            .arg(&entry.id)
            .arg(order_stream::FIELD_REASON)
            .arg(reason);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .add_command(cmd)
            .ignore()
            .cmd("XACK")
            .arg(self.keys.seckill_stream(shard))
            .arg(GROUP)
            .arg(&entry.id)
            .ignore()
            .cmd("HDEL")
            .arg(self.keys.seckill_failing(shard))
            .arg(&entry.id)
            .ignore();
        let _: () = pipe.query_async(&mut self.redis.clone()).await?;
        self.stats.dead_lettered.inc();
        tracing::error!(entry = %entry.id, shard, reason, "order moved to the dead-letter stream");
        Ok(())
    }
}
