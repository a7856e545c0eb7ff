//! The exchange, queues and bindings of the order pipeline, declared idempotently by whichever
//! process needs them (the relay before it publishes, the consumer before it consumes, the
//! start-up check). Declaring what exists with the same arguments changes nothing; a queue that
//! exists with other arguments (say a classic `direct.seckill.queue` of the original Java
//! service) is refused by the broker with `PRECONDITION_FAILED`, which the start-up check
//! reports in one line.

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

fn durable_exchange() -> ExchangeDeclareOptions {
    ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    }
}

fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()))
}

/// Declares the exchanges, the two queues and their bindings.
pub async fn declare(channel: &Channel) -> lapin::Result<()> {
    channel
        .exchange_declare(
            EXCHANGE.into(),
            ExchangeKind::Direct,
            durable_exchange(),
            FieldTable::default(),
        )
        .await?;
    channel
        .exchange_declare(
            DEAD_LETTER_EXCHANGE.into(),
            ExchangeKind::Direct,
            durable_exchange(),
            FieldTable::default(),
        )
        .await?;
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), text("quorum"));
    args.insert("x-dead-letter-exchange".into(), text(DEAD_LETTER_EXCHANGE));
    args.insert(
        "x-delivery-limit".into(),
        AMQPValue::LongInt(DELIVERY_LIMIT),
    );
    channel
        .queue_declare(QUEUE.into(), QueueDeclareOptions::durable(), args)
        .await?;
    channel
        .queue_bind(
            QUEUE.into(),
            EXCHANGE.into(),
            ROUTING_KEY.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), text("quorum"));
    channel
        .queue_declare(
            DEAD_LETTER_QUEUE.into(),
            QueueDeclareOptions::durable(),
            args,
        )
        .await?;
    channel
        .queue_bind(
            DEAD_LETTER_QUEUE.into(),
            DEAD_LETTER_EXCHANGE.into(),
            ROUTING_KEY.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
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
