//! The broker's closer on the RabbitMQ transport: consumes `hmdp.order.close`, where the broker
//! dead-letters a pay-deadline message once the delay queue's TTL has passed, and closes those
//! orders ([`OrderLife::close`]: one conditional update, the unit back to the database and to
//! Redis, idempotent). The relay no longer publishes such messages (the grab script records
//! every deadline, on both transports, and `order_life`'s closer keeps them): this drains what
//! earlier versions left in the delay queue, and any close another service sends the same way.
//!
//! Every message is acknowledged only once its deadline is settled: the order closed (or found
//! paid, cancelled, ...), or dropped because neither the order nor its pending record exists
//! (given up on by the writer, or unknown). A close whose order is still on its way, or that
//! arrives before its deadline (another clock, an older and shorter pay timeout), goes through
//! a delay queue again, confirmed before the acknowledgement; nothing spins. Through a database
//! or Redis outage the messages are returned to the queue after a growing pause, and a closer
//! that dies leaves its unacknowledged messages to the broker: no deadline is lost.
//!
//! A close message may carry the grab's `traceparent` in the header the order message does; while
//! traces are exported, the close then joins the grab's trace (`order_life::CloseSpans`), and a
//! close sent through a delay queue again keeps the header.

use std::time::Duration;

use lapin::{
    Channel, Confirmation, Connection,
    message::Delivery,
    options::{BasicAckOptions, BasicNackOptions, ConfirmSelectOptions},
};
use tokio::sync::watch;
use tracing::Instrument as _;

use super::{
    OrderWorker,
    queue::QueueConsumer,
    run::{FIRST_BACKOFF, MAX_BACKOFF, sleep_or_stop},
};
use crate::{
    amqp::{
        self, AmqpError, OrderMessage, PublishError, mandatory, order_properties, topology,
        with_trace,
    },
    order_life::{CloseSpans, OrderLife},
};

/// A close message and the order it closes.
type Close = (Delivery, i64);

/// What became of a batch of closes.
#[derive(Default)]
struct Sorted {
    /// Settled: acknowledged now.
    done: Vec<Delivery>,
    /// Sent through a delay queue again (`(queue, closes)`), then acknowledged.
    later: Vec<(String, Vec<Close>)>,
    /// Not settled because the database or Redis failed: returned to the queue after a pause.
    failed: Vec<Delivery>,
}

/// The close queue's consumer: closes the orders each batch names.
struct Closes<'w> {
    worker: &'w OrderWorker,
    life: &'w OrderLife,
}

/// What a connection of the close queue's consumer keeps.
struct CloseOpen {
    /// Closes sent through a delay queue again are confirmed before their acknowledgement.
    republish: Channel,
    /// The pause before failed closes go back to the queue, growing while failures go on.
    pause: Duration,
}

impl QueueConsumer for Closes<'_> {
    type Open = CloseOpen;
    const WHAT: &'static str = "close queue consumer";
    const ROLE: &'static str = "closer";
    const QUEUE: &'static str = topology::CLOSE_QUEUE;

    fn tag(&self) -> String {
        format!("{} closer", self.worker.consumer)
    }

    async fn declare(&self, channel: &Channel) -> Result<(), AmqpError> {
        Ok(topology::declare_deadlines(channel, self.worker.settings.pay_timeout).await?)
    }

    async fn open(&self, connection: &Connection) -> Result<CloseOpen, AmqpError> {
        let republish = connection.create_channel().await?;
        republish
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(CloseOpen {
            republish,
            pause: FIRST_BACKOFF,
        })
    }

    async fn settle(
        &self,
        open: &mut CloseOpen,
        batch: Vec<Delivery>,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<bool, AmqpError> {
        let sorted = self.worker.close_batch(self.life, batch).await;
        for d in &sorted.done {
            d.acker.ack(BasicAckOptions::default()).await?;
        }
        let mut failed = sorted.failed;
        for (queue, closes) in sorted.later {
            match self
                .worker
                .send_later(&open.republish, &queue, &closes)
                .await
            {
                Ok(()) => {
                    for (d, _) in &closes {
                        d.acker.ack(BasicAckOptions::default()).await?;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, queue, closes = closes.len(), "cannot delay closes; they go back to the close queue");
                    failed.extend(closes.into_iter().map(|(d, _)| d));
                }
            }
        }
        if failed.is_empty() {
            open.pause = FIRST_BACKOFF;
            return Ok(false);
        }
        // Returned at once, they would fail again at once: a pause first, growing while the
        // failures go on.
        if sleep_or_stop(stop, open.pause).await {
            return Ok(true);
        }
        open.pause = (open.pause * 2).min(MAX_BACKOFF);
        for d in &failed {
            d.acker
                .nack(BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                })
                .await?;
        }
        Ok(false)
    }
}

impl OrderWorker {
    /// Consumes the close queue with `life` until `stop` turns true, reconnecting after any
    /// failure.
    pub(super) async fn close_until(&self, life: OrderLife, stop: watch::Receiver<bool>) {
        let closes = Closes {
            worker: self,
            life: &life,
        };
        self.consume_queue(&closes, stop).await;
    }

    /// Closes the due orders of a batch and sorts the messages by what is to become of them.
    async fn close_batch(&self, life: &OrderLife, batch: Vec<Delivery>) -> Sorted {
        let mut sorted = Sorted::default();
        let now = chrono::Utc::now().timestamp_millis();
        let (mut due, mut early_retry, mut early_delay) = (Vec::new(), Vec::new(), Vec::new());
        for d in batch {
            let Some(id) = order_of(&d) else {
                tracing::error!(message_id = ?d.properties.message_id(), body = %String::from_utf8_lossy(&d.data), "a message on the close queue names no order; dropped");
                life.stats().deadlines_dropped.inc();
                sorted.done.push(d);
                continue;
            };
            let left = life.deadline_of(id) - now;
            if left <= 0 {
                due.push((d, id));
            } else if left <= CLOSE_RETRY_MS {
                early_retry.push((d, id));
            } else {
                // Waits a whole pay timeout: closing late is harmless (paying past the deadline
                // is refused), closing early is not.
                early_delay.push((d, id));
            }
        }
        if !early_delay.is_empty() || !early_retry.is_empty() {
            tracing::debug!(
                closes = early_delay.len() + early_retry.len(),
                "closes before their deadline wait again"
            );
        }
        let ids: Vec<i64> = due.iter().map(|(_, id)| *id).collect();
        let batch = CloseSpans::batch(ids.len());
        let traced = if batch.is_disabled() {
            Vec::new()
        } else {
            due.iter()
                .filter_map(|(d, id)| Some((amqp::trace_of(d)?, *id)))
                .collect()
        };
        let spans = CloseSpans::open(batch, traced);
        let closed = if ids.is_empty() {
            Ok(Vec::new())
        } else {
            life.close(&ids).instrument(spans.span().clone()).await
        };
        let found: std::collections::HashSet<i64> = match closed {
            Ok(closings) => {
                spans.record(&closings);
                let closed = closings.iter().filter(|c| c.closed_now).count();
                if closed > 0 {
                    tracing::debug!(closed, "unpaid orders closed at their pay deadline");
                }
                closings.iter().map(|c| c.order.id).collect()
            }
            Err(e) => {
                tracing::warn!(error = %e, closes = due.len(), "closing orders failed; the closes go back to the queue");
                sorted.failed.extend(due.into_iter().map(|(d, _)| d));
                due = Vec::new();
                Default::default()
            }
        };
        let (mut waiting, mut gone) = (Vec::new(), Vec::new());
        for (d, id) in due {
            if found.contains(&id) {
                sorted.done.push(d);
                continue;
            }
            match life.is_pending(id).await {
                Ok(true) => waiting.push((d, id)),
                Ok(false) => gone.push((d, id)),
                Err(e) => {
                    tracing::warn!(error = %e, order = id, "cannot tell whether the order is on its way; the close goes back to the queue");
                    sorted.failed.push(d);
                }
            }
        }
        // The writer deletes the pending record after its commit: an order written between the
        // close and that look is in the database now, and is closed, not dropped.
        if !gone.is_empty() {
            let ids: Vec<i64> = gone.iter().map(|(_, id)| *id).collect();
            match life.close(&ids).instrument(spans.span().clone()).await {
                Ok(closings) => {
                    spans.record(&closings);
                    let found: std::collections::HashSet<i64> =
                        closings.iter().map(|c| c.order.id).collect();
                    for (d, id) in gone {
                        if !found.contains(&id) {
                            life.stats().deadlines_dropped.inc();
                            tracing::warn!(
                                order = id,
                                "pay deadline of an order that is neither written nor on its \
                                 way (given up on by the worker, or unknown): dropped"
                            );
                        }
                        sorted.done.push(d);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, closes = gone.len(), "closing orders failed; the closes go back to the queue");
                    sorted.failed.extend(gone.into_iter().map(|(d, _)| d));
                }
            }
        }
        // Those settled now, including dropped ones (as the stream's closer counts).
        life.stats()
            .deadlines_handled
            .inc_by(sorted.done.len() as u64);
        early_retry.extend(waiting);
        if !early_retry.is_empty() {
            sorted
                .later
                .push((topology::close_retry_queue(), early_retry));
        }
        if !early_delay.is_empty() {
            sorted.later.push((
                topology::delay_queue(self.settings.pay_timeout),
                early_delay,
            ));
        }
        sorted
    }

    /// Publishes the closes to a delay queue and waits for the broker's confirms.
    async fn send_later(
        &self,
        channel: &Channel,
        queue: &str,
        closes: &[Close],
    ) -> Result<(), PublishError> {
        let publish = async {
            let mut confirms = Vec::with_capacity(closes.len());
            for (d, id) in closes {
                confirms.push(
                    channel
                        .basic_publish(
                            "".into(),
                            queue.into(),
                            mandatory(),
                            &d.data,
                            with_trace(order_properties(*id), amqp::trace_of(d).as_ref()),
                        )
                        .await?,
                );
            }
            for confirm in confirms {
                match confirm.await? {
                    Confirmation::Ack(None) => {}
                    Confirmation::Ack(Some(m)) | Confirmation::Nack(Some(m)) => {
                        return Err(PublishError::Returned(1, m.reply_text.to_string()));
                    }
                    Confirmation::Nack(None) | Confirmation::NotRequested => {
                        return Err(PublishError::Nacked(1));
                    }
                }
            }
            Ok(())
        };
        let timeout = self.settings.confirm_timeout;
        tokio::time::timeout(timeout, publish)
            .await
            .unwrap_or(Err(AmqpError::Timeout(timeout).into()))
    }
}

/// [`topology::CLOSE_RETRY_DELAY`] in milliseconds.
const CLOSE_RETRY_MS: i64 = topology::CLOSE_RETRY_DELAY.as_millis() as i64;

/// The order a close message names: its body (an order message), else its `message_id` (a
/// close asked for by hand).
fn order_of(d: &Delivery) -> Option<i64> {
    OrderMessage::parse(&d.data)
        .map(|o| o.id.get())
        .or_else(|| {
            d.properties
                .message_id()
                .as_ref()?
                .as_str()
                .parse()
                .ok()
                .filter(|id: &i64| *id > 0)
        })
}
