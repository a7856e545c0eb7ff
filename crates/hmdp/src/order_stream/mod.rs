//! The order stream: the one contract between the flash sale, which appends accepted orders
//! ([`crate::seckill`]), and the worker, which writes them into the database
//! ([`crate::worker`]). Neither knows the other; both know this module: the entry fields, the
//! consumer group, the pending records of the status query, the shard-count guard and what
//! `XINFO` says about a stream.

mod info;
mod shards;

use std::time::Duration;

use redis::streams::{StreamId, StreamRangeReply};

pub(crate) use info::{StreamMetrics, group_info, read_gauges};
pub use shards::ShardCountMismatch;
pub(crate) use shards::check_shard_count;

use crate::{
    domain::{OrderId, TraceParent, UserId, VoucherId},
    kv::{Keys, RedisConn},
    storage::orders::NewOrder,
};

/// The consumer group of the order streams.
pub const GROUP: &str = "hmdp-orders";

/// Entry field: the order id.
pub(crate) const FIELD_ORDER_ID: &str = "id";
/// Entry field: the buyer's user id.
pub(crate) const FIELD_USER_ID: &str = "userId";
/// Entry field: the voucher id.
pub(crate) const FIELD_VOUCHER_ID: &str = "voucherId";
/// Entry field, optional: the W3C `traceparent` of the grab that accepted the order, written
/// only while traces are exported, so the span that writes the order joins the grab's trace.
/// Entries without it (traces off, older versions) are orders all the same.
pub(crate) const FIELD_TRACE: &str = crate::domain::TRACEPARENT;
/// Dead-letter field added to the copied entry: the id of the entry in the order stream.
pub(crate) const FIELD_ORIGIN: &str = "origin";
/// Dead-letter field added to the copied entry: why the worker gave up on it.
pub(crate) const FIELD_REASON: &str = "reason";

/// The order an entry carries, if its three fields are there and positive. Entries of a
/// deleted (trimmed) message come back without fields.
pub(crate) fn parse(e: &StreamId) -> Option<NewOrder> {
    Some(NewOrder {
        id: OrderId::new(e.get(FIELD_ORDER_ID)?).ok()?,
        user_id: UserId::new(e.get(FIELD_USER_ID)?).ok()?,
        voucher_id: VoucherId::new(e.get(FIELD_VOUCHER_ID)?).ok()?,
    })
}

/// The trace of the grab that accepted the order of an entry, if it carries a valid one.
pub(crate) fn trace_of(e: &StreamId) -> Option<TraceParent> {
    TraceParent::parse(&e.get::<String>(FIELD_TRACE)?)
}

/// When the grab accepted the order of an entry: the milliseconds of its id (Redis clock).
pub(crate) fn accepted_at_ms(e: &StreamId) -> Option<u64> {
    e.id.split_once('-')?.0.parse().ok()
}

/// The orders of one voucher in a stream (the shard's order stream, written or not, or its
/// dead letters), read page by page.
pub(crate) async fn orders_of_voucher(
    redis: &RedisConn,
    stream: &str,
    voucher: i64,
) -> redis::RedisResult<Vec<NewOrder>> {
    let mut out = Vec::new();
    let mut pages = Pages::default();
    while let Some(orders) = pages.next(redis, stream).await? {
        out.extend(orders.into_iter().filter(|o| o.voucher_id.get() == voucher));
    }
    Ok(out)
}

/// A whole stream's orders, read with `XRANGE` a page at a time.
#[derive(Default)]
struct Pages {
    /// Where the next page starts; `None` before the first, `Some("")` after the last.
    start: Option<String>,
}

impl Pages {
    const SIZE: usize = 1000;

    /// The next page's orders; `None` after the last page.
    async fn next(
        &mut self,
        redis: &RedisConn,
        stream: &str,
    ) -> redis::RedisResult<Option<Vec<NewOrder>>> {
        let start = match self.start.as_deref() {
            None => "-".to_owned(),
            Some("") => return Ok(None),
            Some(s) => s.to_owned(),
        };
        let reply: StreamRangeReply = redis::cmd("XRANGE")
            .arg(stream)
            .arg(&start)
            .arg("+")
            .arg("COUNT")
            .arg(Self::SIZE)
            .query_async(&mut redis.clone())
            .await?;
        self.start = Some(match reply.ids.last() {
            Some(last) if reply.ids.len() == Self::SIZE => format!("({}", last.id),
            _ => String::new(),
        });
        Ok(Some(reply.ids.iter().filter_map(parse).collect()))
    }
}

/// Where an order waits in the outbox, as the RabbitMQ relay names it for the consumer:
/// `<shard>/<entry id>`.
pub(crate) fn outbox_entry(shard: u32, entry_id: &str) -> String {
    format!("{shard}/{entry_id}")
}

/// The shard and entry id of an [`outbox_entry`].
pub(crate) fn parse_outbox_entry(s: &str) -> Option<(u32, &str)> {
    let (shard, id) = s.split_once('/')?;
    (!id.is_empty()).then_some((shard.parse().ok()?, id))
}

/// Appends an order to a stream with the entry fields the grab script writes (`hmdp reconcile`
/// queues again an order that Redis acknowledged and that no stream or table holds).
pub(crate) async fn append(
    redis: &RedisConn,
    stream: &str,
    order: NewOrder,
) -> redis::RedisResult<()> {
    let _: String = redis::cmd("XADD")
        .arg(stream)
        .arg("*")
        .arg(FIELD_ORDER_ID)
        .arg(order.id)
        .arg(FIELD_USER_ID)
        .arg(order.user_id)
        .arg(FIELD_VOUCHER_ID)
        .arg(order.voucher_id)
        .query_async(&mut redis.clone())
        .await?;
    Ok(())
}

/// How long the owner and voucher of an accepted (or failed) order are kept for the status
/// query.
pub const PENDING_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// What `seckill:pending:{orderId}` holds until the order is written: `user:voucher`, or
/// `user:voucher:failed` once the worker moved the order to the dead letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingRecord {
    pub user_id: UserId,
    pub voucher_id: VoucherId,
    /// The worker gave up on the order (it waits in the dead letters).
    pub failed: bool,
}

impl PendingRecord {
    /// Reads a record as [`PendingRecord`]'s `Display` writes it.
    pub fn parse(s: &str) -> Option<Self> {
        let mut parts = s.split(':');
        let user_id = parts.next()?.parse().ok()?;
        let voucher_id = parts.next()?.parse().ok()?;
        let failed = match parts.next() {
            None => false,
            Some("failed") => true,
            Some(_) => return None,
        };
        parts.next().is_none().then_some(Self {
            user_id,
            voucher_id,
            failed,
        })
    }
}

impl std::fmt::Display for PendingRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.user_id, self.voucher_id)?;
        if self.failed {
            f.write_str(":failed")?;
        }
        Ok(())
    }
}

/// Records a newly accepted order (kept for [`PENDING_TTL`]) unless its id has a record
/// already: false then. Order ids repeat only if the id generator's Redis counter was lost
/// (a reset day counter in segment mode, say); `NX` keeps the earlier buyer's record, and the
/// worker's insert refuses the second order as a conflict (dead-lettered, marked `failed`).
pub(crate) async fn create_pending(
    redis: &RedisConn,
    keys: &Keys,
    order_id: i64,
    record: PendingRecord,
) -> redis::RedisResult<bool> {
    let mut set = pending_set(keys, order_id, record);
    let stored: Option<String> = set.arg("NX").query_async(&mut redis.clone()).await?;
    Ok(stored.is_some())
}

/// Deletes the pending record of an order that was refused after all.
pub(crate) async fn delete_pending(
    redis: &RedisConn,
    keys: &Keys,
    order_id: i64,
) -> redis::RedisResult<()> {
    redis::cmd("DEL")
        .arg(keys.seckill_pending(order_id))
        .query_async(&mut redis.clone())
        .await
}

/// Writes the pending record of an order (kept for [`PENDING_TTL`]), replacing any: for the
/// worker's `failed` mark.
pub(crate) async fn write_pending(
    redis: &RedisConn,
    keys: &Keys,
    order_id: i64,
    record: PendingRecord,
) -> redis::RedisResult<()> {
    pending_set(keys, order_id, record)
        .query_async(&mut redis.clone())
        .await
}

/// `SET` of a pending record with its lifetime.
fn pending_set(keys: &Keys, order_id: i64, record: PendingRecord) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(keys.seckill_pending(order_id))
        .arg(record.to_string())
        .arg("PX")
        .arg(PENDING_TTL.as_millis() as u64);
    cmd
}

/// Records for good that the worker gave up on an order: its pending record says `failed`
/// (for [`PENDING_TTL`]), and `seckill:failed` keeps the owner and voucher as long as the dead
/// letters, for a status query after the record has expired.
pub(crate) async fn record_failed(
    redis: &RedisConn,
    keys: &Keys,
    order: &NewOrder,
) -> redis::RedisResult<()> {
    let record = PendingRecord {
        user_id: order.user_id,
        voucher_id: order.voucher_id,
        failed: true,
    };
    let _: i64 = redis::cmd("HSET")
        .arg(keys.seckill_failed())
        .arg(order.id)
        .arg(format!("{}:{}", order.user_id, order.voucher_id))
        .query_async(&mut redis.clone())
        .await?;
    write_pending(redis, keys, order.id.get(), record).await
}

/// Gives the pending records of the orders in `stream` (a shard's order stream: what waits to
/// be written) their full [`PENDING_TTL`] again, page by page, one pipeline of `PEXPIRE`s a
/// page; records already gone (written orders) stay gone. Returns how many orders were seen.
pub(crate) async fn refresh_pending(
    redis: &RedisConn,
    keys: &Keys,
    stream: &str,
) -> redis::RedisResult<usize> {
    let ttl = PENDING_TTL.as_millis() as u64;
    let mut seen = 0;
    let mut pages = Pages::default();
    while let Some(orders) = pages.next(redis, stream).await? {
        if orders.is_empty() {
            continue;
        }
        let mut pipe = redis::pipe();
        for o in &orders {
            pipe.cmd("PEXPIRE")
                .arg(keys.seckill_pending(o.id.get()))
                .arg(ttl)
                .ignore();
        }
        let _: () = pipe.query_async(&mut redis.clone()).await?;
        seen += orders.len();
    }
    Ok(seen)
}

/// Copies the orders of a shard's dead letters into `seckill:failed` (see [`record_failed`]),
/// page by page; returns how many. Idempotent: an order's value is always `user:voucher`.
pub(crate) async fn copy_dead_letters_to_failed(
    redis: &RedisConn,
    keys: &Keys,
    dead_letters: &str,
) -> redis::RedisResult<usize> {
    let mut copied = 0;
    let mut pages = Pages::default();
    while let Some(orders) = pages.next(redis, dead_letters).await? {
        if orders.is_empty() {
            continue;
        }
        let mut hset = redis::cmd("HSET");
        hset.arg(keys.seckill_failed());
        for o in &orders {
            hset.arg(o.id)
                .arg(format!("{}:{}", o.user_id, o.voucher_id));
        }
        let _: i64 = hset.query_async(&mut redis.clone()).await?;
        copied += orders.len();
    }
    Ok(copied)
}

/// An order the worker gave up on, from `seckill:failed` (see [`record_failed`]).
pub(crate) async fn read_failed(
    redis: &RedisConn,
    keys: &Keys,
    order_id: i64,
) -> redis::RedisResult<Option<PendingRecord>> {
    let raw: Option<String> = redis::cmd("HGET")
        .arg(keys.seckill_failed())
        .arg(order_id)
        .query_async(&mut redis.clone())
        .await?;
    Ok(raw
        .as_deref()
        .and_then(PendingRecord::parse)
        .map(|r| PendingRecord { failed: true, ..r }))
}

/// The pending record of an order; `None` when there is none, or not one of ours.
pub(crate) async fn read_pending(
    redis: &RedisConn,
    keys: &Keys,
    order_id: i64,
) -> redis::RedisResult<Option<PendingRecord>> {
    let raw: Option<String> = redis::cmd("GET")
        .arg(keys.seckill_pending(order_id))
        .query_async(&mut redis.clone())
        .await?;
    Ok(raw.as_deref().and_then(PendingRecord::parse))
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    fn entry(fields: &[(&str, &str)]) -> StreamId {
        StreamId {
            id: "1-0".into(),
            map: fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Value::BulkString(v.as_bytes().to_vec())))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn entries_parse_into_orders() {
        let e = entry(&[
            (FIELD_ORDER_ID, "42"),
            (FIELD_USER_ID, "7"),
            (FIELD_VOUCHER_ID, "9"),
        ]);
        assert_eq!(
            parse(&e),
            Some(NewOrder {
                id: OrderId::new(42).unwrap(),
                user_id: UserId::new(7).unwrap(),
                voucher_id: VoucherId::new(9).unwrap(),
            })
        );
        // A trimmed message comes back without fields; a bad or missing field is no order.
        assert_eq!(parse(&entry(&[])), None);
        assert_eq!(
            parse(&entry(&[(FIELD_ORDER_ID, "42"), (FIELD_USER_ID, "7")])),
            None
        );
        assert_eq!(
            parse(&entry(&[
                (FIELD_ORDER_ID, "42"),
                (FIELD_USER_ID, "x"),
                (FIELD_VOUCHER_ID, "9")
            ])),
            None
        );
        assert_eq!(
            parse(&entry(&[
                (FIELD_ORDER_ID, "0"),
                (FIELD_USER_ID, "7"),
                (FIELD_VOUCHER_ID, "9")
            ])),
            None
        );
    }

    #[test]
    fn pending_records_round_trip() {
        for failed in [false, true] {
            let r = PendingRecord {
                user_id: UserId::new(7).unwrap(),
                voucher_id: VoucherId::new(9).unwrap(),
                failed,
            };
            assert_eq!(PendingRecord::parse(&r.to_string()), Some(r));
        }
        assert_eq!(
            PendingRecord {
                user_id: UserId::new(7).unwrap(),
                voucher_id: VoucherId::new(9).unwrap(),
                failed: false
            }
            .to_string(),
            "7:9"
        );
        assert_eq!(
            PendingRecord {
                user_id: UserId::new(7).unwrap(),
                voucher_id: VoucherId::new(9).unwrap(),
                failed: true
            }
            .to_string(),
            "7:9:failed"
        );
        for bad in ["7:9:other", "7", "7:9:failed:x", "a:9", ""] {
            assert_eq!(PendingRecord::parse(bad), None, "{bad:?}");
        }
    }
}
