//! Publishing orders with publisher confirms: [`Publisher::publish`] returns `Ok` only once the
//! broker has confirmed every message of the batch as routed and stored, so the relay can
//! acknowledge the stream entries behind them. Anything else (the broker away, a nack, a
//! returned message, no answer in time) is an error and the entries stay pending for a retry:
//! a message may then reach the queue twice, never zero times. The consumer's insert is
//! idempotent, and other services can drop copies by `message_id`. Its two halves,
//! [`Publisher::send`] and [`Publisher::confirmed`], let the relay send a batch while earlier
//! ones await their confirms; the messages are queued on the connection without waiting for
//! each to be written, in order.
//!
//! One message per order: its pay deadline is not the broker's to keep. The grab script
//! records it in the shard's deadline set in the step that accepts the order, on both
//! transports (`order_life`); a deadline message per order beside it doubled what the broker
//! stores, confirms and delivers per order, and the relay's drain showed it.

use std::{
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    task::Poll,
    time::Duration,
};

use futures_util::future::{MaybeDone, maybe_done};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, PublisherConfirm,
    options::{BasicPublishOptions, ConfirmSelectOptions},
    types::{AMQPValue, FieldTable},
};
use tokio::{sync::Mutex, time::Instant};

use super::{
    ACCEPTED_AT_HEADER, AmqpError, AmqpStats, CONTENT_TYPE, OUTBOX_HEADER, OrderMessage, Outgoing,
    connect, topology, with_trace, within_declare_timeout,
};

/// Why a batch was not confirmed. The batch is to be published again.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error(transparent)]
    Unavailable(#[from] AmqpError),
    #[error("RabbitMQ returned {0} order messages as unroutable ({1})")]
    Returned(usize, String),
    #[error("RabbitMQ refused (nacked) {0} order messages")]
    Nacked(usize),
}

impl From<lapin::Error> for PublishError {
    fn from(e: lapin::Error) -> Self {
        PublishError::Unavailable(AmqpError::Broker(e))
    }
}

/// One connection with a confirm-mode channel, opened on first use and again after a failure.
/// Shards publish on the same channel, one batch's messages at a time; their confirms travel
/// concurrently.
pub struct Publisher {
    url: String,
    name: String,
    confirm_timeout: Duration,
    stats: Arc<AmqpStats>,
    link: Mutex<Option<Link>>,
    /// Held while a batch's messages are queued on the channel.
    sending: Mutex<()>,
    generations: AtomicU64,
}

/// A batch [`Publisher::send`] sent whose confirms are still to come.
pub(crate) struct Unconfirmed {
    generation: u64,
    deadline: Instant,
    confirms: Vec<PublisherConfirm>,
}

/// One `basic_publish`, polled once: lapin numbers the message and queues its frames at the
/// first poll, so the frames of consecutive calls go out in the order of the calls, and the
/// caller need not wait for each write to reach the socket before queueing the next.
async fn queued<F: Future + Unpin>(publish: F) -> MaybeDone<F> {
    let mut write = maybe_done(publish);
    std::future::poll_fn(|cx| {
        let _ = Pin::new(&mut write).poll(cx);
        Poll::Ready(())
    })
    .await;
    write
}

struct Link {
    generation: u64,
    connection: Connection,
    channel: Channel,
}

impl Publisher {
    /// A publisher to the broker at `url`; `name` shows in the broker's connection list.
    pub fn new(url: &str, name: &str, confirm_timeout: Duration, stats: Arc<AmqpStats>) -> Self {
        Self {
            url: url.to_owned(),
            name: name.to_owned(),
            confirm_timeout,
            stats,
            link: Mutex::new(None),
            sending: Mutex::new(()),
            generations: AtomicU64::new(0),
        }
    }

    /// Publishes one persistent, mandatory message per order to `hmdianping.direct` and waits
    /// for the broker to confirm them all.
    /// Each order comes with the time the grab accepted it (its [`ACCEPTED_AT_HEADER`]) and
    /// maybe its outbox entry ([`OUTBOX_HEADER`]). The relay itself sends and settles
    /// separately (several batches in flight); this is the one-batch form for tests and benches.
    #[cfg(any(test, feature = "test-util"))]
    pub async fn publish(&self, orders: &[Outgoing]) -> Result<(), PublishError> {
        let sent = self.send(orders).await?;
        self.confirmed(sent).await
    }

    /// The first half of [`Publisher::publish`]: hands the batch's messages to the connection
    /// and returns without waiting for the broker, so a caller can send more batches while
    /// this one's confirms travel ([`Publisher::confirmed`] waits for them). Its confirm
    /// timeout runs from now.
    pub(crate) async fn send(&self, orders: &[Outgoing]) -> Result<Unconfirmed, PublishError> {
        if orders.is_empty() {
            return Ok(Unconfirmed {
                generation: 0,
                deadline: Instant::now(),
                confirms: Vec::new(),
            });
        }
        let (generation, channel) = self.channel().await?;
        let deadline = Instant::now() + self.confirm_timeout;
        let sent = match tokio::time::timeout_at(deadline, self.send_on(&channel, orders)).await {
            Ok(r) => r,
            Err(_) => Err(AmqpError::Timeout(self.confirm_timeout).into()),
        };
        match sent {
            Ok(confirms) => Ok(Unconfirmed {
                generation,
                deadline,
                confirms,
            }),
            Err(e) => {
                self.drop_link(generation).await;
                Err(e)
            }
        }
    }

    /// Waits for the broker's confirms of a batch [`Publisher::send`] sent: `Ok` once every
    /// message of it is confirmed as routed and stored.
    pub(crate) async fn confirmed(&self, batch: Unconfirmed) -> Result<(), PublishError> {
        if batch.confirms.is_empty() {
            return Ok(());
        }
        let result =
            match tokio::time::timeout_at(batch.deadline, self.confirms(batch.confirms)).await {
                Ok(r) => r,
                Err(_) => Err(AmqpError::Timeout(self.confirm_timeout).into()),
            };
        match &result {
            // A nack leaves the channel usable; anything else starts over on a new connection
            // (a returned message means the queue is gone: declaring again brings it back).
            Ok(()) | Err(PublishError::Nacked(_)) => {}
            Err(_) => self.drop_link(batch.generation).await,
        }
        result
    }

    /// Queues the batch's messages on `channel`, in order, and waits until the connection has
    /// written them all; returns each message's confirm.
    async fn send_on(
        &self,
        channel: &Channel,
        orders: &[Outgoing],
    ) -> Result<Vec<PublisherConfirm>, PublishError> {
        let bodies: Vec<Vec<u8>> = orders
            .iter()
            .map(|o| OrderMessage::body(&o.order))
            .collect();
        let mut writes = Vec::with_capacity(orders.len());
        {
            // One batch at a time on the channel: its messages stay together, and each takes
            // the confirm number lapin expects (lapin numbers a message and queues its frames
            // under two separate locks).
            let _sending = self.sending.lock().await;
            for (
                Outgoing {
                    order,
                    accepted_at_ms,
                    outbox_entry,
                    trace,
                },
                body,
            ) in orders.iter().zip(&bodies)
            {
                let mut headers = FieldTable::default();
                headers.insert(
                    ACCEPTED_AT_HEADER.into(),
                    AMQPValue::LongLongInt(i64::try_from(*accepted_at_ms).unwrap_or(0)),
                );
                if let Some(entry) = outbox_entry {
                    headers.insert(
                        OUTBOX_HEADER.into(),
                        AMQPValue::LongString(entry.as_str().into()),
                    );
                }
                let properties = with_trace(
                    order_properties(order.id.get()).with_headers(headers),
                    trace.as_ref(),
                );
                let publish = channel.basic_publish(
                    topology::EXCHANGE.into(),
                    topology::ROUTING_KEY.into(),
                    mandatory(),
                    body,
                    properties,
                );
                writes.push(queued(Box::pin(publish)).await);
            }
        }
        let mut confirms = Vec::with_capacity(writes.len());
        for mut write in writes {
            (&mut write).await;
            let confirm = Pin::new(&mut write)
                .take_output()
                .expect("a finished write has its output")?;
            self.stats.published.inc();
            confirms.push(confirm);
        }
        Ok(confirms)
    }

    /// Waits for a batch's confirms, counting each.
    async fn confirms(&self, confirms: Vec<PublisherConfirm>) -> Result<(), PublishError> {
        let (mut returned, mut nacked, mut why) = (0, 0, String::new());
        for confirm in confirms {
            match confirm.await? {
                Confirmation::Ack(None) => {
                    self.stats.confirmed.inc();
                }
                Confirmation::Ack(Some(message)) | Confirmation::Nack(Some(message)) => {
                    self.stats.returned.inc();
                    returned += 1;
                    why = message.reply_text.to_string();
                }
                Confirmation::Nack(None) | Confirmation::NotRequested => {
                    self.stats.nacked.inc();
                    nacked += 1;
                }
            }
        }
        if returned > 0 {
            Err(PublishError::Returned(returned, why))
        } else if nacked > 0 {
            Err(PublishError::Nacked(nacked))
        } else {
            Ok(())
        }
    }

    /// Connects (and declares the topology) now rather than at the first batch, so that
    /// `/health` tells a broker that cannot be reached before any order needs it.
    pub(crate) async fn connect(&self) -> Result<(), PublishError> {
        self.channel().await.map(drop)
    }

    /// The current channel, connecting (and declaring the topology) first if there is none.
    async fn channel(&self) -> Result<(u64, Channel), PublishError> {
        let mut link = self.link.lock().await;
        if let Some(l) = link.as_ref()
            && l.channel.status().connected()
        {
            return Ok((l.generation, l.channel.clone()));
        }
        let generation = self.generations.fetch_add(1, Relaxed);
        *link = None;
        self.stats.set_relay_up(false);
        let connection = connect(&self.url, &self.name).await?;
        let setup = within_declare_timeout(async {
            let channel = connection.create_channel().await?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            topology::declare(&channel).await?;
            Ok::<_, PublishError>(channel)
        })
        .await;
        let channel = match setup {
            Ok(channel) => channel,
            Err(e) => {
                tokio::spawn(async move {
                    let _ = connection.close(320, "reconnecting".into()).await;
                });
                return Err(e);
            }
        };
        tracing::info!(name = %self.name, "order relay connected to RabbitMQ");
        self.stats.set_relay_up(true);
        *link = Some(Link {
            generation,
            connection,
            channel: channel.clone(),
        });
        Ok((generation, channel))
    }

    /// Forgets the connection of `generation` (unless a newer one replaced it already).
    async fn drop_link(&self, generation: u64) {
        let mut link = self.link.lock().await;
        if link.as_ref().is_some_and(|l| l.generation == generation) {
            if let Some(l) = link.take() {
                tokio::spawn(async move {
                    let _ = l.connection.close(320, "reconnecting".into()).await;
                });
            }
            self.stats.set_relay_up(false);
        }
    }

    /// Closes the connection, if any (at shutdown).
    pub async fn close(&self) {
        if let Some(l) = self.link.lock().await.take() {
            let _ = l.connection.close(200, "shutting down".into()).await;
        }
        self.stats.set_relay_up(false);
    }
}

/// The properties of an order's messages: persistent JSON whose `message_id` is the order id.
pub(crate) fn order_properties(order_id: i64) -> BasicProperties {
    BasicProperties::default()
        .with_delivery_mode(2) // persistent
        .with_content_type(CONTENT_TYPE.into())
        .with_message_id(order_id.to_string().into())
}

/// Returned by the broker if no queue takes it (the relay then retries, declaring again).
pub(crate) fn mandatory() -> BasicPublishOptions {
    BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    }
}
