//! The consumer of `direct.seckill.queue` (`HMDP_ORDER_TRANSPORT=rabbitmq`): the same batched,
//! idempotent write as the stream's, acknowledged only after the commit.
//!
//! The prefetch is two batches, so the next one is already here while one is being written; a
//! batch is what arrives within [`LINGER`](super::queue::LINGER) of its first message, up to `HMDP_WORKER_BATCH`.
//! Through a database outage the batch is held unacknowledged and retried; if the process
//! dies, the broker delivers the unacknowledged messages again (to another consumer), and the
//! insert finds the orders already written. A conflicting order, a body that is no order, or an
//! order that failed `HMDP_WORKER_MAX_DELIVERIES` times goes to the dead-letter exchange and is
//! marked `failed` for its owner.

use std::time::Duration;

use futures_util::future::try_join_all;
use lapin::{
    Channel, Connection,
    message::Delivery,
    options::{BasicAckOptions, BasicNackOptions, BasicRejectOptions},
};
use tokio::sync::watch;

use super::{
    OrderWorker,
    queue::QueueConsumer,
    run::{FIRST_BACKOFF, MAX_BACKOFF, sleep_or_stop},
};
use crate::{
    amqp::{self, AmqpError, OrderMessage, topology},
    order_stream,
    storage::orders::NewOrder,
};

/// How often the consumer looks at the queue's depth (for `hmdp_amqp_queue_depth`).
const DEPTH_EVERY: Duration = Duration::from_secs(1);

/// The order queue's consumer: writes each batch.
struct Orders<'w>(&'w OrderWorker);

impl QueueConsumer for Orders<'_> {
    type Open = ();
    const WHAT: &'static str = "order queue consumer";
    const ROLE: &'static str = "consumer";
    const QUEUE: &'static str = topology::QUEUE;

    fn tag(&self) -> String {
        self.0.consumer.clone()
    }

    async fn declare(&self, channel: &Channel) -> Result<(), AmqpError> {
        Ok(topology::declare(channel).await?)
    }

    async fn open(&self, _connection: &Connection) -> Result<(), AmqpError> {
        Ok(())
    }

    fn connected(&self, up: bool) {
        self.0.amqp.set_consumer_up(up);
    }

    fn tick_every(&self) -> Option<Duration> {
        Some(DEPTH_EVERY)
    }

    async fn tick(&self, channel: &Channel) -> Result<(), AmqpError> {
        let n = topology::depth(channel, topology::QUEUE).await?;
        self.0.amqp.queue_depth.set(i64::from(n));
        Ok(())
    }

    async fn settle(
        &self,
        (): &mut (),
        batch: Vec<Delivery>,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<bool, AmqpError> {
        self.0.settle_deliveries(batch, stop).await
    }
}

impl OrderWorker {
    /// Consumes the order queue until `stop` turns true, reconnecting after any failure.
    pub(super) async fn consume_until(&self, stop: watch::Receiver<bool>) {
        self.consume_queue(&Orders(self), stop).await;
    }

    /// Writes a batch of deliveries and settles each one; holds and retries them through a
    /// database outage. True if asked to stop while holding (the deliveries then go back to
    /// the queue with the connection).
    async fn settle_deliveries(
        &self,
        deliveries: Vec<Delivery>,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<bool, AmqpError> {
        let mut items: Vec<(Delivery, NewOrder)> = Vec::with_capacity(deliveries.len());
        for d in deliveries {
            self.amqp.consumed.inc();
            match OrderMessage::parse(&d.data) {
                Some(order) => items.push((d, order)),
                None => {
                    tracing::error!(message_id = ?d.properties.message_id(), body = %String::from_utf8_lossy(&d.data), "a message on the order queue is no order; dead-lettered");
                    self.reject(&d).await?;
                }
            }
        }
        let mut backoff = FIRST_BACKOFF;
        let mut refreshed = tokio::time::Instant::now();
        loop {
            let written = self.write_orders(items).await;
            // The written ones first, as the stream worker does: a conflict may share an id
            // whose pending record their acknowledgement deletes.
            // With nothing else of the batch left open, one acknowledgement settles it all.
            let whole = written.conflicts.is_empty()
                && written.failed.is_empty()
                && written.outage.is_none();
            self.acknowledge(&written.done, whole).await?;
            for (d, order, conflict) in &written.conflicts {
                self.give_up(d, order, conflict).await?;
            }
            if !written.failed.is_empty() {
                // Failing again at once would burn the order's deliveries in milliseconds.
                if sleep_or_stop(stop, backoff).await {
                    return Ok(true);
                }
                for (d, order, error) in &written.failed {
                    let deliveries = delivery_count(d) + 1;
                    if deliveries >= self.settings.max_deliveries {
                        self.give_up(d, order, &format!("failed {deliveries} times: {error}"))
                            .await?;
                    } else {
                        tracing::warn!(
                            order = %order.id,
                            deliveries,
                            error,
                            "order not written; it will be redelivered"
                        );
                        d.acker
                            .nack(BasicNackOptions {
                                requeue: true,
                                ..BasicNackOptions::default()
                            })
                            .await?;
                    }
                }
            }
            let Some(source) = written.outage else {
                return Ok(false);
            };
            tracing::warn!(error = %source, orders = written.held.len(), retry_in = ?backoff, "database unavailable; holding the orders for a retry");
            items = written.held;
            // The held orders and those queued behind them all wait in the outbox streams.
            if refreshed.elapsed() >= self.status_refresh_every {
                refreshed = tokio::time::Instant::now();
                self.refresh_statuses(0..self.settings.shards).await;
            }
            if sleep_or_stop(stop, backoff).await {
                return Ok(true);
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// After the commit: the pending records and the outbox entries go (the status query finds
    /// the orders in the database now) while the broker is told. With `whole`, `done` is every
    /// delivery of the channel still open (earlier batches are settled before a batch is
    /// written), so one `basic.ack` with `multiple` settles them all: one settlement for the
    /// broker's queue to log instead of one per order.
    async fn acknowledge(
        &self,
        done: &[(Delivery, NewOrder)],
        whole: bool,
    ) -> Result<(), AmqpError> {
        if done.is_empty() {
            return Ok(());
        }
        let forget = async {
            let del = self.forget_pending(done.iter().map(|(_, o)| o));
            if let Err(e) = del.query_async::<i64>(&mut self.redis.clone()).await {
                // Harmless: the status query reads the database too, and the records expire.
                tracing::debug!(error = %e, "pending records of written orders not deleted");
            }
        };
        let release = async {
            if let Err(e) = self.release_outbox(done).await {
                // Harmless too: a warm-up skips an entry whose order is in the database.
                tracing::debug!(error = %e, "outbox entries of written orders not deleted");
            }
        };
        let ack = async {
            if whole {
                let last = done
                    .iter()
                    .map(|(d, _)| d)
                    .max_by_key(|d| d.delivery_tag)
                    .expect("done is not empty");
                last.acker
                    .ack(BasicAckOptions { multiple: true })
                    .await
                    .map(drop)
            } else {
                // All handed to the connection at once: one at a time, each waited for its turn
                // on the connection's I/O loop.
                try_join_all(
                    done.iter()
                        .map(|(d, _)| d.acker.ack(BasicAckOptions::default())),
                )
                .await
                .map(drop)
            }
        };
        let ((), (), acked) = tokio::join!(forget, release, ack);
        acked?;
        self.stats
            .observe_lag(done.iter().filter_map(|(d, _)| amqp::accepted_at_ms(d)));
        Ok(())
    }

    /// Deletes the relay's stream entries of written orders (one `XDEL` per shard, each in
    /// its shard's slot). An order given up on keeps its entry, so its stock stays taken and
    /// its buyer recorded through a warm-up, as the stream's dead letters do.
    async fn release_outbox(&self, done: &[(Delivery, NewOrder)]) -> redis::RedisResult<()> {
        let mut by_shard: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
        for (d, _) in done {
            let entry = amqp::outbox_entry(d);
            if let Some((shard, id)) = entry.as_deref().and_then(order_stream::parse_outbox_entry) {
                by_shard.entry(shard).or_default().push(id.to_owned());
            }
        }
        for (shard, ids) in by_shard {
            let _: i64 = redis::cmd("XDEL")
                .arg(self.keys.seckill_stream(shard))
                .arg(&ids)
                .query_async(&mut self.redis.clone())
                .await?;
        }
        Ok(())
    }

    /// Marks the order `failed` and sends the message to the dead-letter exchange.
    async fn give_up(&self, d: &Delivery, order: &NewOrder, reason: &str) -> Result<(), AmqpError> {
        if let Err(e) = self.mark_failed(order).await {
            tracing::warn!(error = %e, order = %order.id, "cannot mark the order failed");
        }
        tracing::error!(
            order = %order.id,
            reason,
            "order message moved to {}",
            topology::DEAD_LETTER_QUEUE
        );
        self.reject(d).await
    }

    async fn reject(&self, d: &Delivery) -> Result<(), AmqpError> {
        d.acker
            .reject(BasicRejectOptions { requeue: false })
            .await?;
        self.amqp.dead_lettered.inc();
        self.stats.dead_lettered.inc();
        Ok(())
    }
}

/// How often the broker delivered this message before (a quorum queue's `x-delivery-count`).
fn delivery_count(d: &Delivery) -> u64 {
    amqp::header_u64(d, "x-delivery-count").unwrap_or(0)
}
