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

use std::time::Duration;

use futures_util::StreamExt;
use lapin::{
    Channel, Confirmation, Connection,
    message::Delivery,
    options::{
        BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
        ConfirmSelectOptions,
    },
    types::FieldTable,
};
use tokio::sync::watch;

use super::{
    OrderWorker,
    consume::{LINGER, next_delivery, stopped},
    run::{FIRST_BACKOFF, MAX_BACKOFF, sleep_or_stop},
};
use crate::{
    amqp::{self, AmqpError, OrderMessage, PublishError, mandatory, order_properties, topology},
    order_life::OrderLife,
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

impl OrderWorker {
    /// Consumes the close queue with `life` until `stop` turns true, reconnecting after any
    /// failure.
    pub(super) async fn close_until(&self, life: OrderLife, mut stop: watch::Receiver<bool>) {
        let mut backoff = FIRST_BACKOFF;
        while !*stop.borrow() {
            match self.close_queue(&life, &mut stop, &mut backoff).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "close queue consumer lost its connection; reconnecting");
                    if sleep_or_stop(&mut stop, backoff).await {
                        break;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        tracing::info!("close queue consumer stopped");
    }

    /// One connection's life: consume until asked to stop (`Ok`) or the connection fails.
    async fn close_queue(
        &self,
        life: &OrderLife,
        stop: &mut watch::Receiver<bool>,
        backoff: &mut Duration,
    ) -> Result<(), AmqpError> {
        let name = format!("hmdp closer {}", self.consumer);
        let connection = amqp::connect(&self.settings.amqp_url, &name).await?;
        let result = self.close_on(&connection, life, stop, backoff).await;
        // Unacknowledged closes go back to the queue when the connection closes.
        let _ = connection.close(200, "closer stopping".into()).await;
        result
    }

    async fn close_on(
        &self,
        connection: &Connection,
        life: &OrderLife,
        stop: &mut watch::Receiver<bool>,
        backoff: &mut Duration,
    ) -> Result<(), AmqpError> {
        let channel = amqp::within_declare_timeout(async {
            let channel = connection.create_channel().await?;
            topology::declare_deadlines(&channel, self.settings.pay_timeout).await?;
            Ok::<_, AmqpError>(channel)
        })
        .await?;
        let prefetch = u16::try_from(self.settings.batch * 2).unwrap_or(u16::MAX);
        channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await?;
        // Closes sent through a delay queue again are confirmed before their acknowledgement.
        let republish = connection.create_channel().await?;
        republish
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let mut consumer = channel
            .basic_consume(
                topology::CLOSE_QUEUE.into(),
                format!("{} closer", self.consumer).as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        *backoff = FIRST_BACKOFF;
        tracing::info!(
            queue = topology::CLOSE_QUEUE,
            prefetch,
            "close queue consumer connected"
        );
        let mut pause = FIRST_BACKOFF;
        loop {
            let first = tokio::select! {
                d = consumer.next() => d,
                () = stopped(stop) => return Ok(()),
            };
            let mut batch = vec![next_delivery(first)?];
            let until = tokio::time::Instant::now() + LINGER;
            while batch.len() < self.settings.batch {
                match tokio::time::timeout_at(until, consumer.next()).await {
                    Ok(d) => batch.push(next_delivery(d)?),
                    Err(_) => break,
                }
            }
            let sorted = self.close_batch(life, batch).await;
            for d in &sorted.done {
                d.acker.ack(BasicAckOptions::default()).await?;
            }
            let mut failed = sorted.failed;
            for (queue, closes) in sorted.later {
                match self.send_later(&republish, &queue, &closes).await {
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
                pause = FIRST_BACKOFF;
                continue;
            }
            // Returned at once, they would fail again at once: a pause first, growing while
            // the failures go on.
            if sleep_or_stop(stop, pause).await {
                return Ok(());
            }
            pause = (pause * 2).min(MAX_BACKOFF);
            for d in &failed {
                d.acker
                    .nack(BasicNackOptions {
                        requeue: true,
                        ..BasicNackOptions::default()
                    })
                    .await?;
            }
        }
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
        let closed = if ids.is_empty() {
            Ok(Vec::new())
        } else {
            life.close(&ids).await
        };
        let found: std::collections::HashSet<i64> = match closed {
            Ok(closings) => {
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
            match life.close(&ids).await {
                Ok(closings) => {
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
                            order_properties(*id),
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
    OrderMessage::parse(&d.data).map(|o| o.id).or_else(|| {
        d.properties
            .message_id()
            .as_ref()?
            .as_str()
            .parse()
            .ok()
            .filter(|id: &i64| *id > 0)
    })
}
