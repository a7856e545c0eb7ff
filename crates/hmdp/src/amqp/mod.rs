//! RabbitMQ for the order pipeline (`HMDP_ORDER_TRANSPORT=rabbitmq`).
//!
//! The course's last version of the flash sale hands accepted orders to RabbitMQ; this module
//! holds what that takes, once: the names the course uses ([`topology`]), the message every
//! order becomes ([`OrderMessage`], one per order), a
//! [`Publisher`] that reports success only once the broker has confirmed every message, and the
//! counters and gauges an operator watches ([`AmqpStats`]). The grab still appends each order to its Redis stream first (the outbox);
//! the worker ([`crate::worker`]) relays stream entries through the publisher and consumes the
//! queue into the database. Nothing here knows the database or the streams.

mod publisher;
mod stats;
pub mod topology;

use std::time::Duration;

use lapin::{Connection, ConnectionProperties};
use serde::{Deserialize, Serialize};

pub use publisher::Publisher;
pub(crate) use publisher::{PublishError, Unconfirmed, mandatory, order_properties};
pub use stats::AmqpStats;

use crate::{
    domain::{OrderId, TraceParent, UserId, VoucherId},
    storage::orders::NewOrder,
};

/// How long opening a connection may take before it counts as "broker away".
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The body of an order message: `{"id": orderId, "userId": …, "voucherId": …}`, published with
/// `content_type` `application/json` and `message_id` the order id, so any service that binds a
/// queue to the exchange can read it (and drop a redelivered copy by its `message_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderMessage {
    pub id: i64,
    pub user_id: i64,
    pub voucher_id: i64,
}

/// The `content_type` of an order message.
pub const CONTENT_TYPE: &str = "application/json";

/// Message header: when the grab accepted the order (Unix milliseconds, Redis's clock), for
/// the consumer's `hmdp_worker_order_lag_seconds`.
pub(crate) const ACCEPTED_AT_HEADER: &str = "accepted-at-ms";

/// Message header: where the order waits in the outbox (the relay's Redis stream entry), an
/// opaque string the consumer hands back after its commit so the entry can go. Until then the
/// entry stays, so a warm-up still counts an order the broker holds.
pub(crate) const OUTBOX_HEADER: &str = "outbox-entry";

/// Message header, optional: the W3C `traceparent` of the grab that accepted the order (sent
/// only while traces are exported), so the consumer's write joins the grab's trace.
pub(crate) const TRACE_HEADER: &str = crate::domain::TRACEPARENT;

/// An order to publish: the order, when the grab accepted it (Unix milliseconds, the
/// [`ACCEPTED_AT_HEADER`]) and, from the relay, its outbox entry ([`OUTBOX_HEADER`]) and the
/// grab's trace ([`TRACE_HEADER`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub order: NewOrder,
    pub accepted_at_ms: u64,
    pub outbox_entry: Option<String>,
    pub(crate) trace: Option<TraceParent>,
}

impl From<(NewOrder, u64)> for Outgoing {
    fn from((order, accepted_at_ms): (NewOrder, u64)) -> Self {
        Self {
            order,
            accepted_at_ms,
            outbox_entry: None,
            trace: None,
        }
    }
}

/// The [`OUTBOX_HEADER`] of a delivery, if it has one.
pub(crate) fn outbox_entry(d: &lapin::message::Delivery) -> Option<String> {
    header_string(d, OUTBOX_HEADER)
}

/// The grab's trace a delivery carries ([`TRACE_HEADER`]), if it is a valid one.
pub(crate) fn trace_of(d: &lapin::message::Delivery) -> Option<TraceParent> {
    TraceParent::parse(&header_string(d, TRACE_HEADER)?)
}

/// `properties` with the [`TRACE_HEADER`] of `trace`, if there is one (a message sent on
/// for the same order keeps the grab's trace).
pub(crate) fn with_trace(
    properties: lapin::BasicProperties,
    trace: Option<&TraceParent>,
) -> lapin::BasicProperties {
    let Some(trace) = trace else {
        return properties;
    };
    let mut headers = properties.headers().clone().unwrap_or_default();
    headers.insert(
        TRACE_HEADER.into(),
        lapin::types::AMQPValue::LongString(trace.as_str().into()),
    );
    properties.with_headers(headers)
}

/// A string header of a delivery.
fn header_string(d: &lapin::message::Delivery, name: &str) -> Option<String> {
    use lapin::types::AMQPValue;
    match d.properties.headers().as_ref()?.inner().get(name)? {
        AMQPValue::LongString(s) => Some(s.to_string()),
        AMQPValue::ShortString(s) => Some(s.to_string()),
        _ => None,
    }
}

/// The [`ACCEPTED_AT_HEADER`] of a delivery, if it has one.
pub fn accepted_at_ms(d: &lapin::message::Delivery) -> Option<u64> {
    header_u64(d, ACCEPTED_AT_HEADER)
}

/// An integer header of a delivery, whatever integer type the publisher chose.
pub(crate) fn header_u64(d: &lapin::message::Delivery, name: &str) -> Option<u64> {
    use lapin::types::AMQPValue;
    match d.properties.headers().as_ref()?.inner().get(name)? {
        AMQPValue::LongLongInt(n) => u64::try_from(*n).ok(),
        AMQPValue::LongInt(n) => u64::try_from(*n).ok(),
        AMQPValue::LongUInt(n) => Some(u64::from(*n)),
        AMQPValue::ShortInt(n) => u64::try_from(*n).ok(),
        AMQPValue::ShortUInt(n) => Some(u64::from(*n)),
        AMQPValue::ShortShortInt(n) => u64::try_from(*n).ok(),
        AMQPValue::ShortShortUInt(n) => Some(u64::from(*n)),
        AMQPValue::Timestamp(n) => Some(*n),
        _ => None,
    }
}

impl OrderMessage {
    /// The order a message body carries, if it is one: JSON with three positive ids.
    pub fn parse(body: &[u8]) -> Option<NewOrder> {
        let m: OrderMessage = serde_json::from_slice(body).ok()?;
        Some(NewOrder {
            id: OrderId::new(m.id).ok()?,
            user_id: UserId::new(m.user_id).ok()?,
            voucher_id: VoucherId::new(m.voucher_id).ok()?,
        })
    }

    /// The message body of an order.
    pub fn body(order: &NewOrder) -> Vec<u8> {
        serde_json::to_vec(&OrderMessage {
            id: order.id.get(),
            user_id: order.user_id.get(),
            voucher_id: order.voucher_id.get(),
        })
        .expect("three integers always serialise")
    }
}

/// Errors talking to the broker. Every one of them means "try again later": the orders wait
/// in the stream (relay) or in the queue (consumer) meanwhile.
#[derive(Debug, thiserror::Error)]
pub enum AmqpError {
    #[error("RabbitMQ: {0}")]
    Broker(#[from] lapin::Error),
    #[error("RabbitMQ did not answer within {0:?}")]
    Timeout(Duration),
    #[error("RabbitMQ cancelled the consumer (the queue was deleted?)")]
    Cancelled,
}

/// How long opening a channel and declaring the topology may take on a new connection. A
/// node that is still recovering its quorum queues after a restart can leave a declaration
/// unanswered; without a bound the relay or a consumer would wait on it for good, instead of
/// reconnecting.
pub(crate) const DECLARE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `setup` (a channel's opening and declarations) within [`DECLARE_TIMEOUT`].
pub(crate) async fn within_declare_timeout<T, E: From<AmqpError>>(
    setup: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    tokio::time::timeout(DECLARE_TIMEOUT, setup)
        .await
        .unwrap_or(Err(AmqpError::Timeout(DECLARE_TIMEOUT).into()))
}

/// Opens a connection named `name` (shown in the broker's connection list), within
/// [`CONNECT_TIMEOUT`].
pub async fn connect(url: &str, name: &str) -> Result<Connection, AmqpError> {
    let props = ConnectionProperties::default().with_connection_name(name.into());
    tokio::time::timeout(CONNECT_TIMEOUT, Connection::connect(url, props))
        .await
        .map_err(|_| AmqpError::Timeout(CONNECT_TIMEOUT))?
        .map_err(AmqpError::from)
}

/// Connects and declares the topology once, the pay deadlines' of `pay_timeout` included: what
/// `hmdp` runs at start-up with `HMDP_ORDER_TRANSPORT=rabbitmq`, so a wrong URL, bad
/// credentials or a conflicting queue stop the start with one clear line instead of a worker
/// that retries forever.
pub(crate) async fn check(url: &str, pay_timeout: Duration) -> Result<(), AmqpError> {
    let conn = connect(url, "hmdp start-up check").await?;
    let channel = conn.create_channel().await?;
    let declared = match topology::declare(&channel).await {
        Ok(()) => topology::declare_deadlines(&channel, pay_timeout).await,
        Err(e) => Err(e),
    };
    let _ = conn.close(200, "checked".into()).await;
    declared.map_err(AmqpError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_the_courses_json_and_reads_back() {
        let order = NewOrder {
            id: OrderId::new(42).unwrap(),
            user_id: UserId::new(7).unwrap(),
            voucher_id: VoucherId::new(9).unwrap(),
        };
        let body = OrderMessage::body(&order);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
            serde_json::json!({"id": 42, "userId": 7, "voucherId": 9})
        );
        assert_eq!(OrderMessage::parse(&body), Some(order));
        for bad in [
            &b"{}"[..],
            b"not json",
            br#"{"id":0,"userId":7,"voucherId":9}"#,
            br#"{"id":"42","userId":7,"voucherId":9}"#,
        ] {
            assert_eq!(OrderMessage::parse(bad), None, "{bad:?}");
        }
    }
}
