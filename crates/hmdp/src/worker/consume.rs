//! The consumer of `direct.seckill.queue` (`HMDP_ORDER_TRANSPORT=rabbitmq`): the same batched,
//! idempotent write as the stream's, acknowledged only after the commit.
//!
//! The prefetch is two batches, so the next one is already here while one is being written; a
//! batch is what arrives within [`LINGER`] of its first message, up to `HMDP_WORKER_BATCH`.
//! Through a database outage the batch is held unacknowledged and retried; if the process
//! dies, the broker delivers the unacknowledged messages again (to another consumer), and the
//! insert finds the orders already written. A conflicting order, a body that is no order, or an
//! order that failed `HMDP_WORKER_MAX_DELIVERIES` times goes to the dead-letter exchange and is
//! marked `failed` for its owner.

use std::time::Duration;

use futures_util::{StreamExt, future::try_join_all};
use lapin::{
    Channel, Connection,
    message::Delivery,
    options::{
        BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, BasicRejectOptions,
    },
    types::FieldTable,
};
use tokio::sync::watch;

use super::{
    OrderWorker,
    run::{FIRST_BACKOFF, MAX_BACKOFF, sleep_or_stop},
};
use crate::{
    amqp::{self, AmqpError, OrderMessage, topology},
    order_stream,
    storage::orders::NewOrder,
};

/// How long a batch waits for more messages after its first: fewer, larger transactions for
/// at most this much latency.
pub(super) const LINGER: Duration = Duration::from_millis(2);

/// How often the consumer looks at the queue's depth (for `hmdp_amqp_queue_depth`).
const DEPTH_EVERY: Duration = Duration::from_secs(1);

impl OrderWorker {
    /// Consumes the order queue until `stop` turns true, reconnecting after any failure.
    pub(super) async fn consume_until(&self, mut stop: watch::Receiver<bool>) {
        let mut backoff = FIRST_BACKOFF;
        while !*stop.borrow() {
            let result = self.consume(&mut stop, &mut backoff).await;
            self.amqp.set_consumer_up(false);
            match result {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "order queue consumer lost its connection; reconnecting");
                    if sleep_or_stop(&mut stop, backoff).await {
                        break;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        tracing::info!("order queue consumer stopped");
    }

    /// One connection's life: consume until asked to stop (`Ok`) or the connection fails.
    async fn consume(
        &self,
        stop: &mut watch::Receiver<bool>,
        backoff: &mut Duration,
    ) -> Result<(), AmqpError> {
        let name = format!("hmdp consumer {}", self.consumer);
        let connection = amqp::connect(&self.settings.amqp_url, &name).await?;
        let result = self.consume_on(&connection, stop, backoff).await;
        // Unacknowledged deliveries go back to the queue when the connection closes.
        let _ = connection.close(200, "consumer stopping".into()).await;
        result
    }

    async fn consume_on(
        &self,
        connection: &Connection,
        stop: &mut watch::Receiver<bool>,
        backoff: &mut Duration,
    ) -> Result<(), AmqpError> {
        let channel = amqp::within_declare_timeout(async {
            let channel = connection.create_channel().await?;
            topology::declare(&channel).await?;
            Ok::<_, AmqpError>(channel)
        })
        .await?;
        let prefetch = u16::try_from(self.settings.batch * 2).unwrap_or(u16::MAX);
        channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await?;
        let mut consumer = channel
            .basic_consume(
                topology::QUEUE.into(),
                self.consumer.as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        self.amqp.set_consumer_up(true);
        *backoff = FIRST_BACKOFF;
        tracing::info!(
            queue = topology::QUEUE,
            prefetch,
            "order queue consumer connected"
        );
        let mut depth = tokio::time::interval(DEPTH_EVERY);
        loop {
            let first = tokio::select! {
                d = consumer.next() => d,
                () = stopped(stop) => return Ok(()),
                _ = depth.tick() => {
                    self.refresh_depth(&channel).await?;
                    continue;
                }
            };
            let mut batch = vec![next_delivery(first)?];
            let until = tokio::time::Instant::now() + LINGER;
            while batch.len() < self.settings.batch {
                match tokio::time::timeout_at(until, consumer.next()).await {
                    Ok(d) => batch.push(next_delivery(d)?),
                    Err(_) => break,
                }
            }
            if self.settle_deliveries(batch, stop).await? {
                return Ok(());
            }
        }
    }

    async fn refresh_depth(&self, channel: &Channel) -> Result<(), AmqpError> {
        let n = topology::depth(channel, topology::QUEUE).await?;
        self.amqp.queue_depth.set(i64::from(n));
        Ok(())
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
                            order = order.id,
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
            tracing::warn!(error = %e, order = order.id, "cannot mark the order failed");
        }
        tracing::error!(
            order = order.id,
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

/// Completes when `stop` turns true (its guard never crosses an `await` of the caller).
pub(super) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

pub(super) fn next_delivery(d: Option<lapin::Result<Delivery>>) -> Result<Delivery, AmqpError> {
    match d {
        Some(Ok(d)) => Ok(d),
        Some(Err(e)) => Err(e.into()),
        None => Err(AmqpError::Cancelled),
    }
}

/// How often the broker delivered this message before (a quorum queue's `x-delivery-count`).
fn delivery_count(d: &Delivery) -> u64 {
    amqp::header_u64(d, "x-delivery-count").unwrap_or(0)
}
