//! The one loop both RabbitMQ consumers run (the order queue, `consume`, and the close queue,
//! `close`): connect, declare, consume in batches, settle, and reconnect after a growing pause
//! when the connection fails. What differs, the queue and what settling a batch means, is a
//! [`QueueConsumer`]; the loop's guarantees (nothing acknowledged here, unacknowledged
//! deliveries back to the queue with the connection) are the same for both.

use std::time::Duration;

use futures_util::StreamExt;
use lapin::{
    Channel, Connection,
    message::Delivery,
    options::{BasicConsumeOptions, BasicQosOptions},
    types::FieldTable,
};
use tokio::sync::watch;

use super::{
    OrderWorker,
    run::{FIRST_BACKOFF, MAX_BACKOFF, sleep_or_stop},
};
use crate::amqp::{self, AmqpError};

/// How long a batch waits for more messages after its first: fewer, larger transactions for
/// at most this much latency.
pub(super) const LINGER: Duration = Duration::from_millis(2);

/// What one consumer of a RabbitMQ queue does with what it receives.
pub(super) trait QueueConsumer {
    /// What a connection needs besides the consuming channel.
    type Open;
    /// The consumer's name in the logs ("order queue consumer").
    const WHAT: &'static str;
    /// Its role in the connection's name ("hmdp consumer <id>").
    const ROLE: &'static str;
    /// The queue it consumes.
    const QUEUE: &'static str;

    /// The consumer tag.
    fn tag(&self) -> String;
    /// Declares what it consumes on `channel`.
    async fn declare(&self, channel: &Channel) -> Result<(), AmqpError>;
    /// After the prefetch is set, before consuming: what else the connection needs.
    async fn open(&self, connection: &Connection) -> Result<Self::Open, AmqpError>;
    /// Consuming started (`true`) or the connection ended (`false`).
    fn connected(&self, _up: bool) {}
    /// How often [`QueueConsumer::tick`] runs between batches, if at all.
    fn tick_every(&self) -> Option<Duration> {
        None
    }
    /// Something to do now and then on the consuming channel.
    async fn tick(&self, _channel: &Channel) -> Result<(), AmqpError> {
        Ok(())
    }
    /// Settles a batch of deliveries; true if asked to stop meanwhile (the deliveries not
    /// settled then go back to the queue with the connection).
    async fn settle(
        &self,
        open: &mut Self::Open,
        batch: Vec<Delivery>,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<bool, AmqpError>;
}

impl OrderWorker {
    /// Consumes `Q`'s queue until `stop` turns true, reconnecting after any failure.
    pub(super) async fn consume_queue<Q: QueueConsumer>(
        &self,
        queue: &Q,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut backoff = FIRST_BACKOFF;
        while !*stop.borrow() {
            let result = self.queue_connection(queue, &mut stop, &mut backoff).await;
            queue.connected(false);
            match result {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "{} lost its connection; reconnecting", Q::WHAT);
                    if sleep_or_stop(&mut stop, backoff).await {
                        break;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        tracing::info!("{} stopped", Q::WHAT);
    }

    /// One connection's life: consume until asked to stop (`Ok`) or the connection fails.
    async fn queue_connection<Q: QueueConsumer>(
        &self,
        queue: &Q,
        stop: &mut watch::Receiver<bool>,
        backoff: &mut Duration,
    ) -> Result<(), AmqpError> {
        let name = format!("hmdp {} {}", Q::ROLE, self.consumer);
        let connection = amqp::connect(&self.settings.amqp_url, &name).await?;
        let result = self.consume_on(queue, &connection, stop, backoff).await;
        // Unacknowledged deliveries go back to the queue when the connection closes.
        let reason = format!("{} stopping", Q::ROLE);
        let _ = connection.close(200, reason.as_str().into()).await;
        result
    }

    async fn consume_on<Q: QueueConsumer>(
        &self,
        queue: &Q,
        connection: &Connection,
        stop: &mut watch::Receiver<bool>,
        backoff: &mut Duration,
    ) -> Result<(), AmqpError> {
        let channel = amqp::within_declare_timeout(async {
            let channel = connection.create_channel().await?;
            queue.declare(&channel).await?;
            Ok::<_, AmqpError>(channel)
        })
        .await?;
        let prefetch = u16::try_from(self.settings.batch * 2).unwrap_or(u16::MAX);
        channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await?;
        let mut open = queue.open(connection).await?;
        let mut consumer = channel
            .basic_consume(
                Q::QUEUE.into(),
                queue.tag().as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        queue.connected(true);
        *backoff = FIRST_BACKOFF;
        tracing::info!(queue = Q::QUEUE, prefetch, "{} connected", Q::WHAT);
        let mut ticks = queue.tick_every().map(tokio::time::interval);
        loop {
            let first = tokio::select! {
                d = consumer.next() => d,
                () = stopped(stop) => return Ok(()),
                _ = tick(&mut ticks), if ticks.is_some() => {
                    queue.tick(&channel).await?;
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
            if queue.settle(&mut open, batch, stop).await? {
                return Ok(());
            }
        }
    }
}

/// The next tick of `ticks`, which the caller only awaits when there is one.
async fn tick(ticks: &mut Option<tokio::time::Interval>) {
    if let Some(t) = ticks {
        t.tick().await;
    }
}

/// Completes when `stop` turns true (its guard never crosses an `await` of the caller).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn next_delivery(d: Option<lapin::Result<Delivery>>) -> Result<Delivery, AmqpError> {
    match d {
        Some(Ok(d)) => Ok(d),
        Some(Err(e)) => Err(e.into()),
        None => Err(AmqpError::Cancelled),
    }
}
