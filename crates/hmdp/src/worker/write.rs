//! Writing orders: one transaction per batch ([`OrderWorker::write_orders`], the same for the
//! stream and for the RabbitMQ queue), then settling each source's entries. A stream entry is
//! acknowledged after the commit, retried later, or dead-lettered; with
//! `HMDP_ORDER_TRANSPORT=rabbitmq` the stream is only relayed here, to the broker. While traces
//! are exported, the grab's trace of each order is kept for its close.

use std::time::{Duration, Instant};

use redis::streams::StreamId;
use tracing::{Instrument as _, Span};

use super::{GROUP, Held, OrderWorker, Step, WorkerError, scripts::RECORD_FAILURE};
use crate::{
    domain::{SPAN_TARGET, TraceParent, fan_out},
    kv::RedisConn,
    metrics::TraceExemplar,
    order_life::deadlines,
    order_stream,
    storage::{
        StorageError,
        orders::{self, BatchError, BatchOutcome, NewOrder},
    },
};

/// What became of a batch of orders, each beside its source `T` (a stream entry, a delivery).
pub(super) struct Written<T> {
    /// In the database now: inserted, or there already.
    pub done: Vec<(T, NewOrder)>,
    /// Collided with another order in the database: never to be written.
    pub conflicts: Vec<(T, NewOrder, String)>,
    /// Refused for another reason: retried later, given up on after enough failures.
    pub failed: Vec<(T, NewOrder, String)>,
    /// Not written because the database is away or briefly refusing (`outage`): to be
    /// retried as they are.
    pub held: Vec<(T, NewOrder)>,
    pub outage: Option<StorageError>,
}

impl<T> Default for Written<T> {
    fn default() -> Self {
        Self {
            done: Vec::new(),
            conflicts: Vec::new(),
            failed: Vec::new(),
            held: Vec::new(),
            outage: None,
        }
    }
}

/// What an order came in, as far as its trace goes: the grab's `traceparent` it carries, if any
/// (a field of its stream entry, a header of its message).
pub(super) trait Carrier {
    fn trace(&self) -> Option<TraceParent>;
}

impl Carrier for StreamId {
    fn trace(&self) -> Option<TraceParent> {
        order_stream::trace_of(self)
    }
}

impl Carrier for lapin::message::Delivery {
    fn trace(&self) -> Option<TraceParent> {
        crate::amqp::trace_of(self)
    }
}

/// The spans of a batch write while traces are exported: the batch's own span, inside which
/// the transaction runs, linked to the trace of every order it carries, and one span per order
/// in that order's grab trace, linked back to the batch ([`fan_out`]). Dropped when the write
/// is over; empty (and free) when traces are off.
struct BatchSpans {
    batch: Span,
    _orders: Vec<(NewOrder, Span)>,
    /// The batch's trace, if sampled: the write time's exemplar.
    exemplar: Option<TraceExemplar>,
}

impl BatchSpans {
    /// The spans, and the orders of `items` that carry a trace (none with traces off).
    fn open<T: Carrier>(items: &[(T, NewOrder)]) -> (Self, Vec<(TraceParent, NewOrder)>) {
        let batch = tracing::info_span!(
            target: SPAN_TARGET,
            "write orders",
            hmdp.orders = items.len(),
        );
        if batch.is_disabled() {
            let spans = Self {
                batch,
                _orders: Vec::new(),
                exemplar: None,
            };
            return (spans, Vec::new());
        }
        let traced: Vec<(TraceParent, NewOrder)> = items
            .iter()
            .filter_map(|(source, order)| Some((source.trace()?, *order)))
            .collect();
        let orders = fan_out(&batch, traced.clone(), |order| {
            tracing::info_span!(
                target: SPAN_TARGET,
                parent: None,
                "write order",
                hmdp.order = order.id.get(),
                hmdp.batch_size = items.len(),
            )
        });
        let exemplar = TraceParent::of(&batch)
            .and_then(|t| t.sampled_trace_id())
            .map(TraceExemplar::new);
        let spans = Self {
            batch,
            _orders: orders,
            exemplar,
        };
        (spans, traced)
    }
}

impl OrderWorker {
    /// Writes orders in one idempotent transaction; if the database refuses the batch for a
    /// reason other than an outage, writes them one by one to find the culprits.
    pub(super) async fn write_orders<T: Carrier>(&self, items: Vec<(T, NewOrder)>) -> Written<T> {
        let mut written = Written::default();
        if items.is_empty() {
            return written;
        }
        let (spans, traced) = BatchSpans::open(&items);
        self.keep_traces(&traced).await;
        let orders: Vec<NewOrder> = items.iter().map(|(_, o)| *o).collect();
        let started = Instant::now();
        let batch = orders::write_order_batch(&self.db, &orders).instrument(spans.batch.clone());
        match batch.await {
            Ok(outcome) => {
                self.stats
                    .write_seconds
                    .observe(started.elapsed().as_secs_f64(), spans.exemplar);
                self.stats.batches.inc();
                self.stats.batch_size.observe(orders.len() as f64);
                self.sort_out(&mut written, items, outcome);
            }
            Err(BatchError::Storage(e)) if e.is_unavailable() => {
                self.stats.db_outages.inc();
                written.held = items;
                written.outage = Some(e);
            }
            Err(first) => {
                tracing::warn!(error = ?first, "batch refused; writing its orders one by one");
                let mut rest = items.into_iter();
                while let Some((source, order)) = rest.next() {
                    let one = orders::write_order_batch(&self.db, std::slice::from_ref(&order))
                        .instrument(spans.batch.clone());
                    match one.await {
                        Ok(outcome) => self.sort_out(&mut written, vec![(source, order)], outcome),
                        Err(BatchError::Storage(e)) if e.is_unavailable() => {
                            self.stats.db_outages.inc();
                            written.held.push((source, order));
                            written.held.extend(rest);
                            written.outage = Some(e);
                            break;
                        }
                        Err(err) => written.failed.push((source, order, format!("{err:?}"))),
                    }
                }
            }
        }
        written
    }

    /// Keeps the grab's trace of the orders that carry one (none with traces off) for the
    /// close at their pay deadline (`order_life::deadlines`). Kept before the write: a closer
    /// that finds an order's row finds its trace too. A failure costs the close its place in
    /// the trace, nothing else.
    async fn keep_traces(&self, traced: &[(TraceParent, NewOrder)]) {
        if traced.is_empty() {
            return;
        }
        let kept = deadlines::keep_traces(
            &self.redis,
            &self.keys,
            self.settings.shards,
            self.settings.pay_timeout,
            traced,
        )
        .await;
        if let Err(e) = kept {
            tracing::debug!(error = %e, "the orders' traces were not kept for their close");
        }
    }

    /// After a commit: counts, and tells the conflicts from the rest.
    fn sort_out<T>(&self, into: &mut Written<T>, batch: Vec<(T, NewOrder)>, outcome: BatchOutcome) {
        self.stats.persisted.inc_by(outcome.inserted);
        self.stats.already_written.inc_by(outcome.already_written);
        for (source, order) in batch {
            match outcome.conflicts.iter().find(|(o, _)| *o == order) {
                Some((_, conflict)) => {
                    self.stats.conflicts.inc();
                    tracing::error!(
                        order = %order.id,
                        user = %order.user_id,
                        voucher = %order.voucher_id,
                        %conflict,
                        "accepted order collides with another order in the database; not written"
                    );
                    into.conflicts.push((source, order, conflict.to_string()));
                }
                None => into.done.push((source, order)),
            }
        }
    }

    /// Writes stream entries (or relays them to RabbitMQ) and settles them: acknowledged after
    /// the commit (or the broker's confirm), dead-lettered, or left for a retry.
    pub(super) async fn write(
        &self,
        shard: u32,
        entries: Vec<StreamId>,
    ) -> Result<Step, WorkerError> {
        if entries.is_empty() {
            return Ok(Step::Idle);
        }
        let handled = entries.len();
        let good = self.parse_entries(shard, entries).await?;
        if good.is_empty() {
            return Ok(Step::Wrote(handled));
        }
        if self.uses_rabbitmq() {
            let batch = self.send_batch(shard, good).await?;
            self.settle_batch(shard, batch).await?;
            return Ok(Step::Wrote(handled));
        }
        let written = self.write_orders(good).await;
        // The written ones first: their acknowledgement deletes the pending records of their
        // ids, and a conflict may share an id (a repeated order id) whose `failed` mark must
        // stay.
        self.ack(shard, &written.done, true).await?;
        for (entry, _, conflict) in &written.conflicts {
            self.dead_letter(shard, entry, conflict).await?;
        }
        self.stats.observe_lag(
            written
                .done
                .iter()
                .filter_map(|(e, _)| order_stream::accepted_at_ms(e)),
        );
        for (entry, _, error) in &written.failed {
            self.failed(shard, entry, error).await?;
        }
        match written.outage {
            Some(source) => Err(WorkerError::Stalled {
                entries: written.held.into_iter().map(|(e, _)| e).collect(),
                source: Held::Database(source),
            }),
            None => Ok(Step::Wrote(handled)),
        }
    }

    /// The orders of `entries`; an entry that holds none goes to the dead letters.
    pub(super) async fn parse_entries(
        &self,
        shard: u32,
        entries: Vec<StreamId>,
    ) -> Result<Vec<(StreamId, NewOrder)>, WorkerError> {
        let mut good = Vec::with_capacity(entries.len());
        for e in entries {
            match order_stream::parse(&e) {
                Some(order) => good.push((e, order)),
                // Entries from a deleted (trimmed) message come back without fields.
                None => self.dead_letter(shard, &e, "malformed entry").await?,
            }
        }
        Ok(good)
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

    /// Acknowledges entries (and forgets their failures); with `written`, also deletes their
    /// pending records, which the status query no longer needs.
    pub(super) async fn ack(
        &self,
        shard: u32,
        items: &[(StreamId, NewOrder)],
        written: bool,
    ) -> Result<(), WorkerError> {
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
        let del = self.forget_pending(items.iter().map(|(_, o)| o));
        let mut redis = self.redis.clone();
        if !written {
            let _: () = pipe.query_async(&mut redis).await?;
        } else if matches!(redis, RedisConn::Cluster(_)) {
            let _: () = pipe.query_async(&mut redis).await?;
            let _: i64 = del.query_async(&mut redis).await?;
        } else {
            pipe.add_command(del).ignore();
            let _: () = pipe.query_async(&mut redis).await?;
        }
        Ok(())
    }

    /// One `DEL` of the pending records of written orders.
    pub(super) fn forget_pending<'a>(
        &self,
        orders: impl Iterator<Item = &'a NewOrder>,
    ) -> redis::Cmd {
        let mut del = redis::cmd("DEL");
        for o in orders {
            del.arg(self.keys.seckill_pending(o.id.get()));
        }
        del
    }

    /// Marks an order `failed` for the status query: the worker gave up on it.
    pub(super) async fn mark_failed(&self, order: &NewOrder) -> redis::RedisResult<()> {
        order_stream::record_failed(&self.redis, &self.keys, order).await
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
            self.mark_failed(&order).await?;
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
