//! The exchange, queues and bindings of the order pipeline, declared idempotently by whichever
//! process needs them (the relay before it publishes, the consumer before it consumes, the
//! start-up check). Declaring what exists with the same arguments changes nothing; a queue that
//! exists with other arguments (say a classic `direct.seckill.queue` of the original Java
//! service) is refused by the broker with `PRECONDITION_FAILED`, which the start-up check
//! reports in one line.
//!
//! The broker's way of closing orders ([`declare_deadlines`]): a message in a delay queue whose
//! per-queue TTL is the pay timeout is dead-lettered, when it expires, into the close queue,
//! which the worker's closer consumes. Earlier versions sent every order's deadline this way
//! (one more message per order); the grab script's deadline set keeps them now, and the closer
//! drains what is left. All of them are
//! quorum queues whose dead-lettering is at-least-once (RabbitMQ 3.10 and later): the broker
//! keeps an expired message in its delay queue until the close queue has confirmed it, so a
//! broker crash mid-transfer duplicates a deadline at worst (closing is idempotent), never
//! loses one.

use std::time::Duration;

use lapin::{
    Channel, ExchangeKind,
    options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions},
    types::{AMQPValue, FieldTable, LongString},
};

/// The durable direct exchange every accepted order is published to (the course's name).
pub const EXCHANGE: &str = "hmdianping.direct";
/// The routing key of order messages (the course's name).
pub const ROUTING_KEY: &str = "direct.seckill";
/// The queue the order writer consumes (the course's name): durable, a quorum queue.
pub const QUEUE: &str = "direct.seckill.queue";
/// Where messages the writer gives up on go (rejected, or delivered too often).
pub const DEAD_LETTER_EXCHANGE: &str = "hmdianping.dlx";
/// The queue of dead-lettered order messages, for an operator to settle.
pub const DEAD_LETTER_QUEUE: &str = "direct.seckill.dlq";
/// The broker's own limit on deliveries of one message before it dead-letters it. A safety net
/// for a message that crashes its consumer over and over; the writer gives up earlier itself
/// (`HMDP_WORKER_MAX_DELIVERIES`) on messages that fail without crashing it. Fixed, because a
/// queue's arguments cannot change once it exists.
pub const DELIVERY_LIMIT: i32 = 50;

/// The durable direct exchange expired pay deadlines are dead-lettered to.
pub const CLOSE_EXCHANGE: &str = "hmdp.order.close";
/// The routing key of close messages, on [`CLOSE_EXCHANGE`] (the delay queues dead-letter with
/// it, and a close can be asked for by hand with it).
pub const CLOSE_ROUTING_KEY: &str = "order.close";
/// The queue the closer consumes: one message per order whose pay deadline has passed.
pub const CLOSE_QUEUE: &str = "hmdp.order.close";
/// How long a close waits for an order that is not written yet before it is looked at again.
pub const CLOSE_RETRY_DELAY: Duration = Duration::from_secs(1);

/// The delay queue of pay deadlines for a pay timeout: `hmdp.order.delay.<secs>s`. The timeout
/// is in the name because a queue's TTL cannot change once it exists: another timeout is
/// another queue, and what the old one still holds closes after the old timeout.
pub fn delay_queue(pay_timeout: Duration) -> String {
    format!("hmdp.order.delay.{}s", pay_timeout.as_secs())
}

/// The delay queue a close waiting for its order's row goes through
/// (`hmdp.order.close.retry.<secs>s`), expiring after [`CLOSE_RETRY_DELAY`].
pub fn close_retry_queue() -> String {
    format!("hmdp.order.close.retry.{}s", CLOSE_RETRY_DELAY.as_secs())
}

fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()))
}

/// The arguments of a quorum queue, plus `extra`.
fn quorum(extra: &[(&str, AMQPValue)]) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), text("quorum"));
    for (key, value) in extra {
        args.insert((*key).into(), value.clone());
    }
    args
}

/// A durable direct exchange.
async fn exchange(channel: &Channel, name: &str) -> lapin::Result<()> {
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    channel
        .exchange_declare(
            name.into(),
            ExchangeKind::Direct,
            durable,
            FieldTable::default(),
        )
        .await
}

/// A durable queue with `args`, bound to `exchange` with `key` when given.
async fn queue(
    channel: &Channel,
    name: &str,
    args: FieldTable,
    bound_to: Option<(&str, &str)>,
) -> lapin::Result<()> {
    channel
        .queue_declare(name.into(), QueueDeclareOptions::durable(), args)
        .await?;
    if let Some((exchange, key)) = bound_to {
        channel
            .queue_bind(
                name.into(),
                exchange.into(),
                key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
    }
    Ok(())
}

/// Declares the exchanges, the two queues and their bindings.
pub async fn declare(channel: &Channel) -> lapin::Result<()> {
    exchange(channel, EXCHANGE).await?;
    exchange(channel, DEAD_LETTER_EXCHANGE).await?;
    let args = quorum(&[
        ("x-dead-letter-exchange", text(DEAD_LETTER_EXCHANGE)),
        ("x-delivery-limit", AMQPValue::LongInt(DELIVERY_LIMIT)),
    ]);
    queue(channel, QUEUE, args, Some((EXCHANGE, ROUTING_KEY))).await?;
    let args = quorum(&[]);
    let bound_to = Some((DEAD_LETTER_EXCHANGE, ROUTING_KEY));
    queue(channel, DEAD_LETTER_QUEUE, args, bound_to).await
}

/// Declares what pay deadlines take on the RabbitMQ transport: the close exchange, the close
/// queue bound to it, the delay queue of `pay_timeout` ([`delay_queue`]) and the retry queue
/// ([`close_retry_queue`]), both dead-lettering into the close exchange. Messages reach the two
/// delay queues through the default exchange (routing key: the queue's name), so nothing else
/// is bound to them.
pub async fn declare_deadlines(channel: &Channel, pay_timeout: Duration) -> lapin::Result<()> {
    exchange(channel, CLOSE_EXCHANGE).await?;
    let bound_to = Some((CLOSE_EXCHANGE, CLOSE_ROUTING_KEY));
    queue(channel, CLOSE_QUEUE, quorum(&[]), bound_to).await?;
    for (name, ttl) in [
        (delay_queue(pay_timeout), pay_timeout),
        (close_retry_queue(), CLOSE_RETRY_DELAY),
    ] {
        queue(channel, &name, delay_arguments(ttl), None).await?;
    }
    Ok(())
}

/// A quorum delay queue: every message expires `ttl` after it arrives and moves, at least once,
/// to the close exchange. `at-least-once` needs `reject-publish` overflow; without a length
/// limit nothing is ever rejected.
fn delay_arguments(ttl: Duration) -> FieldTable {
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    quorum(&[
        ("x-message-ttl", AMQPValue::LongLongInt(ttl_ms)),
        ("x-dead-letter-exchange", text(CLOSE_EXCHANGE)),
        ("x-dead-letter-routing-key", text(CLOSE_ROUTING_KEY)),
        ("x-dead-letter-strategy", text("at-least-once")),
        ("x-overflow", text("reject-publish")),
    ])
}

/// Messages ready in `queue` (not counting those delivered and not yet acknowledged).
pub async fn depth(channel: &Channel, queue: &str) -> lapin::Result<u32> {
    let q = channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    Ok(q.message_count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_queues_are_named_after_their_ttl() {
        assert_eq!(
            delay_queue(Duration::from_secs(900)),
            "hmdp.order.delay.900s"
        );
        assert_eq!(close_retry_queue(), "hmdp.order.close.retry.1s");
        let args = delay_arguments(Duration::from_secs(2));
        let args = args.inner();
        assert_eq!(
            args.get("x-message-ttl"),
            Some(&AMQPValue::LongLongInt(2000))
        );
        assert_eq!(
            args.get("x-dead-letter-strategy"),
            Some(&text("at-least-once"))
        );
        assert_eq!(args.get("x-overflow"), Some(&text("reject-publish")));
    }
}
