//! The settings that are one of several names (`HMDP_SECKILL_MODE=async|sync`, ...). Each is a
//! plain enum parsed by strum, here at the bottom so that [`Config`](super::Config) can name it
//! without importing the feature it steers; what each value does is that feature's business.

use strum::{Display, EnumString, VariantNames};

use super::Choice;

/// Where login codes go (`HMDP_SMS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum SmsMode {
    /// Written to the service log (development, demos): whoever reads the log can log in.
    Log,
    /// POSTed to an SMS gateway (`HMDP_SMS_URL`; the sender is `auth`'s `HttpSmsSender`).
    Http,
}

impl Choice for SmsMode {}

/// How `GET /shop/{id}` rebuilds a missing or stale entry (`HMDP_SHOP_CACHE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum ShopCacheStrategy {
    /// Cache-aside with a rebuild mutex (single-flight + distributed lock). The default.
    Mutex,
    /// Logical expiry: never expires in Redis; stale is served while one task rebuilds.
    Logical,
    /// Plain cache-aside with null caching, no lock (the course's first version).
    Aside,
}

impl Choice for ShopCacheStrategy {}

/// When to start a private `redis-server` child instead of using `redis_url`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum ManagedMode {
    /// Only when `HMDP_REDIS_URL` is unset and nothing answers at the default URL.
    Auto,
    /// Always start one (tests, demos on a machine with a busy Redis).
    Always,
    /// Never: fail if Redis does not answer.
    Never,
}

impl Choice for ManagedMode {}

/// When a managed `redis-server` flushes its append-only file to disk (`HMDP_REDIS_APPENDFSYNC`).
///
/// This decides what a Redis crash can lose: an accepted flash-sale order exists only in Redis
/// until the worker writes it, so with `everysec` up to about one second of accepted orders can
/// vanish in a crash of Redis (or of the machine); `always` loses none, at the price of one
/// `fsync` per write. Its `Display` is Redis's own name for the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum AppendFsync {
    /// `fsync` after every write: nothing acknowledged is lost; slowest.
    Always,
    /// `fsync` once a second (Redis's default): up to a second of writes can be lost.
    Everysec,
    /// Leave flushing to the operating system (typically every 30 s): fastest, least safe.
    No,
}

impl Choice for AppendFsync {}

/// How flash-sale orders are decided (`HMDP_SECKILL_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum SeckillMode {
    /// One Lua script decides in Redis and queues the order on a stream; a worker writes it.
    Async,
    /// The database decides, under a per-user lock (the course's baseline).
    Sync,
}

impl Choice for SeckillMode {}

/// How order ids are drawn (`HMDP_ID_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum IdMode {
    /// One `INCR` per id, exactly the original `RedisIdWorker`.
    Compatible,
    /// Blocks of ids reserved with `INCRBY`; most ids need no round trip.
    Segment,
}

impl Choice for IdMode {}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum LogFormat {
    Text,
    Json,
}

impl Choice for LogFormat {}

/// How accepted flash-sale orders travel to the database writer (`HMDP_ORDER_TRANSPORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum OrderTransport {
    /// The worker reads the Redis order streams itself.
    Stream,
    /// A relay moves the stream entries to RabbitMQ; the worker consumes the queue.
    RabbitMq,
}

impl Choice for OrderTransport {}

/// Which halves of the RabbitMQ pipeline a worker runs (`HMDP_AMQP_ROLE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum AmqpRole {
    /// The relay (stream to exchange) and the consumer (queue to database).
    Both,
    /// Only the relay.
    Relay,
    /// Only the consumer.
    Consumer,
}

impl Choice for AmqpRole {}
