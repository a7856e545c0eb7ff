//! Configuration: built-in defaults < optional TOML file (`--config FILE`) < environment.
//!
//! The `HMDP_*` variable names are a contract: scripts, CI and tests outside the code set them, so
//! they never change meaning. Every setting has a default that makes `hmdp` run with no
//! configuration at all (SQLite file under the data directory, Redis on localhost or a managed
//! child `redis-server`).
//!
//! Each setting is declared once, in a `settings!` block below: variable, field, type, default,
//! docs and check. Everything else comes from that entry: the TOML key (the variable in lower
//! case without `HMDP_`: `HMDP_REDIS_URL` → `redis_url`), a serde struct that figment fills from
//! the stacked file and environment, the start-up summary and the README's configuration table.
//! Unknown file keys are rejected so typos do not pass silently.

use std::{
    collections::HashMap,
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
    str::FromStr,
    sync::LazyLock,
    time::Duration,
};

use figment::{
    Figment,
    providers::{Format as _, Toml},
    value::{Dict, Value},
};
use strum::{Display, EnumString, VariantNames};

/// Errors found while reading the configuration; each names the setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The `--config` file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The `--config` file is not valid TOML, has unknown keys or a value of the wrong type.
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// A value does not parse (environment) or fails its check (file or environment).
    #[error("invalid value for {name}: {message}")]
    Invalid { name: &'static str, message: String },
}

/// When to start a private `redis-server` child instead of using `redis_url`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum ManagedRedis {
    /// Only when `HMDP_REDIS_URL` is unset and nothing answers at the default URL.
    Auto,
    /// Always start one (tests, demos on a machine with a busy Redis).
    Always,
    /// Never: fail if Redis does not answer.
    Never,
}

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

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum LogFormat {
    Text,
    Json,
}

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

/// How flash-sale orders are decided (`HMDP_SECKILL_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum SeckillMode {
    /// One Lua script decides in Redis and queues the order on a stream; a worker writes it.
    Async,
    /// The database decides, under a per-user lock (the course's baseline).
    Sync,
}

/// How accepted flash-sale orders travel to the database writer (`HMDP_ORDER_TRANSPORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum OrderTransport {
    /// The worker reads the Redis order streams itself.
    Stream,
    /// A relay moves the stream entries to RabbitMQ; the worker consumes the queue.
    RabbitMq,
}

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

impl AmqpRole {
    /// Whether this worker relays the streams to the exchange.
    pub fn relays(self) -> bool {
        matches!(self, AmqpRole::Both | AmqpRole::Relay)
    }

    /// Whether this worker consumes the queue.
    pub fn consumes(self) -> bool {
        matches!(self, AmqpRole::Both | AmqpRole::Consumer)
    }
}

/// Where login codes go (`HMDP_SMS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum SmsMode {
    /// Written to the service log (development, demos): whoever reads the log can log in.
    Log,
    /// POSTed to an SMS gateway (`HMDP_SMS_URL`, see [`crate::auth::HttpSmsSender`]).
    Http,
}

/// How order ids are drawn (`HMDP_ID_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum IdMode {
    /// One `INCR` per id, exactly the original `RedisIdWorker`.
    Compatible,
    /// Blocks of ids reserved with `INCRBY`; most ids need no round trip.
    Segment,
}

/// A secret string that never shows up in `Debug`/`Display` output or logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself; call only where it is really needed.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

/// The default Redis URL, used when `HMDP_REDIS_URL` is unset.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
/// The RabbitMQ of `HMDP_AMQP_URL` when unset: a local broker's default account and vhost.
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// The default `HMDP_DATA_DIR`.
const DEFAULT_DATA_DIR: &str = "data";

/// Declares a settings struct, each field once: `VARIABLE field: Type [as Unit] = default
/// [, unset "what unset means"] [, check fn];` under its doc comment, which is also its line in
/// the README. It derives the struct, its `Default`, how a given value is parsed, checked and
/// stored, and its [`Row`]s; `groups` are nested settings structs.
macro_rules! settings {
    (@unset) => { String::from("unset") };
    (@unset $unset:expr) => { String::from($unset) };
    (@check) => { |_: &_| Ok(()) };
    (@check $check:expr) => { $check };
    (
        $(#[$attr:meta])*
        pub struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                $var:ident $field:ident: $ty:ty $(as $unit:ident)? = $default:expr
                    $(, unset $unset:expr)? $(, check $check:expr)?;
            )*
        }
        $(groups { $($(#[doc = $gdoc:literal])* $group:ident: $gty:ty,)* })?
    ) => {
        $(#[$attr])*
        pub struct $name {
            $(
                #[doc = concat!("`", stringify!($var), "`:")]
                $(#[doc = $doc])*
                pub $field: $ty,
            )*
            $($($(#[doc = $gdoc])* pub $group: $gty,)*)?
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $($field: $default,)* $($($group: <$gty>::default(),)*)? }
            }
        }

        impl $name {
            /// Overwrites each setting that is given, once it parses and passes its check.
            fn apply(&mut self, given: &Given) -> Result<(), ConfigError> {
                $(if let Some(raw) = parse(given, stringify!($var), settings!(@check $($check)?))? {
                    self.$field = <$ty as Setting<$($unit)?>>::from_raw(raw);
                })*
                $($(self.$group.apply(given)?;)*)?
                Ok(())
            }

            /// Every setting with its value, in declaration order.
            fn all_rows(&self) -> Vec<Row> {
                let rows = vec![$(Row {
                    var: stringify!($var),
                    doc: &[$($doc),*],
                    unset: settings!(@unset $($unset)?),
                    value: <$ty as Setting<$($unit)?>>::show(&self.$field),
                }),*];
                rows.into_iter()$($(.chain(self.$group.all_rows()))*)?.collect()
            }
        }
    };
}

settings! {
    /// The effective configuration of one `hmdp` process.
    ///
    /// `Debug` prints [`Config::redacted_summary`], so logging a `Config` never leaks a secret.
    #[derive(Clone)]
    pub struct Config {
        /// address to serve on (the original's port)
        HMDP_LISTEN listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 8081));
        /// serve `/metrics` and `/health` without a credential on this address too, for a
        /// scraper (bind it where only the scraper reaches); on `HMDP_LISTEN`, `/metrics` always
        /// needs the admin token
        HMDP_METRICS_LISTEN metrics_listen: Option<SocketAddr> = None, unset "off";
        /// SQLite file (embedded default) or `mysql://user:pass@host:3306/db` (created if missing)
        HMDP_DATABASE_URL database_url: String as Url =
            default_database_url(Path::new(DEFAULT_DATA_DIR));
        /// database pool size
        HMDP_DB_MAX_CONNECTIONS db_max_connections: u32 = 10, check at_least(1);
        /// Redis; several comma-separated `redis://` URLs mean a Redis Cluster
        HMDP_REDIS_URL redis_url: Option<String> as Url = None,
            unset format!("`{DEFAULT_REDIS_URL}`");
        /// prepended to every Redis key (tests, a shared Redis); no `{` `}`
        HMDP_REDIS_PREFIX redis_prefix: String = String::new(), check no_braces();
        /// admin credential for `x-admin-token` (at least 16 characters)
        HMDP_ADMIN_TOKEN admin_token: Option<Secret> = None, unset "generated", check min_len(16);
        /// a folder served at `/`, e.g. the original front-end's `html/hmdp`
        HMDP_STATIC_DIR static_dir: Option<PathBuf> = None;
        /// where the embedded defaults keep files (SQLite, managed Redis, admin token)
        HMDP_DATA_DIR data_dir: PathBuf = PathBuf::from(DEFAULT_DATA_DIR);
        /// `auto`: start a child `redis-server` only if `HMDP_REDIS_URL` is unset and nothing
        /// answers at the default; `always`; `never`
        HMDP_REDIS_MANAGED redis_managed: ManagedRedis = ManagedRedis::Auto;
        /// how often the managed `redis-server` flushes its AOF: `always` (every write: a Redis
        /// crash loses no accepted order), `everysec` (up to ~1 s of accepted orders can be lost),
        /// `no` (the OS decides); a Redis of your own keeps its own `appendfsync`
        HMDP_REDIS_APPENDFSYNC redis_appendfsync: AppendFsync = AppendFsync::Everysec;
        /// sliding session lifetime, refreshed by every request with the token
        HMDP_SESSION_TTL_SECS session_ttl: Duration as Secs = Duration::from_secs(30 * 60),
            check at_least(1);
        /// how long a session lives at most after its login, however much it is used (its TTL
        /// never slides past that); `POST /user/logout/all` ends a user's sessions sooner
        HMDP_SESSION_MAX_AGE_SECS session_max_age: Duration as Secs =
            Duration::from_secs(30 * 24 * 3600), check at_least(60);
        /// trust a session read from Redis for this long without asking again (at most 60000;
        /// `0` = read Redis on every request): its TTL then slides at most once per window. A
        /// logout on any instance ends the session everywhere at once (pub/sub); a session
        /// deleted in Redis by other means is still trusted here for up to this long
        HMDP_SESSION_CACHE_MS session_cache: Duration as Millis = Duration::from_secs(5),
            check at_most(60_000);
        /// requests per second per client address (an IPv6 /64 counts as one), bursts of twice
        /// that (`0` = off, e.g. for benchmarks; behind a proxy set `HMDP_TRUSTED_PROXIES`)
        HMDP_RATE_LIMIT_IP rate_limit_ip: u32 = 200;
        /// requests per second per logged-in user (`0` = off)
        HMDP_RATE_LIMIT_USER rate_limit_user: u32 = 20;
        /// largest accepted request body
        HMDP_BODY_LIMIT_BYTES body_limit: usize = 64 * 1024;
        /// a request taking longer is answered 503 `timeout`
        HMDP_REQUEST_TIMEOUT_MS request_timeout: Duration as Millis = Duration::from_secs(10),
            check at_least(1);
        /// how long a client may take to send a request head, and how long an idle keep-alive
        /// connection stays open (slow or silent clients cannot pin connections)
        HMDP_IDLE_TIMEOUT_SECS idle_timeout: Duration as Secs = Duration::from_secs(30),
            check at_least(1);
        /// reverse proxies whose `X-Forwarded-For` is believed, comma-separated CIDRs or addresses
        /// (`127.0.0.1/32,10.0.0.0/8`): the client is the rightmost entry not in them. Empty: the
        /// TCP peer is the client and the header is ignored
        HMDP_TRUSTED_PROXIES trusted_proxies: TrustedProxies = TrustedProxies::default();
        /// open connections at most; more are closed as soon as they are accepted (`0` = off).
        /// Keep it below the open-files limit, which start-up raises to its hard limit
        HMDP_MAX_CONNECTIONS max_connections: usize = 10_000;
        /// open connections from one client address (an IPv6 /64 counts as one; the TCP peer,
        /// trusted proxies exempt); more are closed as soon as they are accepted (`0` = off)
        HMDP_MAX_CONNECTIONS_PER_IP max_connections_per_ip: usize = 256;
        /// largest request head (request line and headers); a larger one is answered 431 and its
        /// connection closed
        HMDP_MAX_HEADER_BYTES max_header_bytes: usize = 16 * 1024, check between(1024, 1 << 20);
        /// log filter (`hmdp=debug,info`; falls back to `RUST_LOG`)
        HMDP_LOG log_filter: String = "info".to_owned();
        /// `text` or `json`
        HMDP_LOG_FORMAT log_format: LogFormat = LogFormat::Text;
    }
    groups {
        /// Login codes (`HMDP_CODE_*`).
        code: CodePolicy,
        /// Where login codes are sent (`HMDP_SMS*`).
        sms: SmsSettings,
        /// The shop cache (`HMDP_SHOP_CACHE`, `HMDP_CACHE_*`, `HMDP_SHOP_BLOOM`).
        cache: CacheSettings,
        /// The flash sale and its order worker (`HMDP_SECKILL_*`, `HMDP_WORKER*`, `HMDP_ID_MODE`).
        seckill: SeckillSettings,
        /// Notes, feed, sign-in, visitors and photo uploads (`HMDP_FEED_*`, `HMDP_UPLOAD_*`, …).
        social: SocialSettings,
    }
}

settings! {
    /// Limits on how often and how many login codes a phone can get and try (see
    /// [`crate::auth::CodeIssuer`] for what a third party can and cannot do with them).
    #[derive(Debug, Clone)]
    pub struct CodePolicy {
        /// login code lifetime (the original's 2 minutes)
        HMDP_CODE_TTL_SECS ttl: Duration as Secs = Duration::from_secs(120), check at_least(1);
        /// minimum time between two codes for one phone
        HMDP_CODE_MIN_INTERVAL_SECS min_interval: Duration as Secs = Duration::from_secs(60);
        /// codes per phone per day from all client addresses together (a fixed 24-hour window
        /// that opens with the phone's first code): the ceiling over
        /// `HMDP_CODE_PHONE_IP_DAILY_LIMIT`, so only many addresses together can use it up
        HMDP_CODE_DAILY_LIMIT daily_limit: u32 = 50, check at_least(1);
        /// codes per phone per day asked for from one client address (an IPv6 /64 counts as one):
        /// nobody can use up a phone's day from one address
        HMDP_CODE_PHONE_IP_DAILY_LIMIT phone_ip_daily_limit: u32 = 10, check at_least(1);
        /// login-code requests per minute from one client address, in bursts of up to that many:
        /// one client cannot make the service text many different phones (`0` = off, e.g. for
        /// benchmarks)
        HMDP_CODE_IP_PER_MIN ip_per_min: u32 = 10;
        /// wrong tries from one client address against a phone's codes, after which that address
        /// must ask for a new code; all addresses together get this × `HMDP_CODE_DAILY_LIMIT` a
        /// day (once per live code tried), after which every wrong try voids the phone's codes
        HMDP_CODE_MAX_ATTEMPTS max_attempts: u32 = 5, check at_least(1);
        /// wrong tries a day from one client address (an IPv6 /64 counts as one) against the codes
        /// of all phones together (a fixed 24-hour window); past it the address is refused with
        /// 429 `too_many_wrong_codes`, even with a right code, so it cannot guess across many
        /// phones
        HMDP_CODE_IP_WRONG_DAILY_LIMIT ip_wrong_daily_limit: u32 = 30, check at_least(1);
    }
}

settings! {
    /// Where login codes go: the log (development) or an SMS gateway over HTTP.
    #[derive(Debug, Clone)]
    pub struct SmsSettings {
        /// where login codes go: `log` (written to the service log: whoever reads it can log in
        /// as anyone; for development) or `http` (POSTed to `HMDP_SMS_URL`). Unset means `log`
        /// on a loopback `HMDP_LISTEN`; on any other address `hmdp serve` refuses to start
        HMDP_SMS mode: Option<SmsMode> = None, unset "`log` on loopback, else required";
        /// `http`: the gateway URL; each code is POSTed there as JSON
        /// `{"id","phone","code","template","ttlSecs"}` (see [SMS gateway](#sms-gateway))
        HMDP_SMS_URL url: Option<String> as Url = None, check scheme("http", "https");
        /// `http`: the header that carries `HMDP_SMS_SECRET`
        HMDP_SMS_HEADER header: String = "authorization".to_owned(), check header_name();
        /// `http`: the header's value, e.g. `Bearer …` (required with `http`)
        HMDP_SMS_SECRET secret: Option<Secret> = None;
        /// `http`: the gateway's template id, passed along as `template`
        HMDP_SMS_TEMPLATE template: String = "login".to_owned();
        /// `http`: how long one try may take
        HMDP_SMS_TIMEOUT_MS timeout: Duration as Millis = Duration::from_secs(2),
            check at_least(1);
        /// `http`: tries after the first when the gateway cannot be reached, times out or
        /// answers 5xx or 429, after 200 ms, 400 ms, … All tries must fit in
        /// `HMDP_REQUEST_TIMEOUT_MS`
        HMDP_SMS_RETRIES retries: u32 = 2, check at_most(10);
        /// login codes sent per hour by the whole service (all instances, a fixed window that
        /// opens with its first code); past it `POST /user/code` answers 503 `sms_budget_spent`
        /// until the hour is over: caps what a flood from many addresses costs (`0` = off)
        HMDP_SMS_HOURLY_LIMIT hourly_limit: u32 = 1_000;
    }
}

settings! {
    /// Cache settings.
    #[derive(Debug, Clone)]
    pub struct CacheSettings {
        /// how `GET /shop/{id}` rebuilds: `mutex` (single-flight + distributed lock; the default:
        /// no warm-up, updates visible at once, unread shops expire), `logical` (logical expiry:
        /// hot shops never miss, stale for one rebuild, entries never leave Redis), `aside` (plain
        /// cache-aside); switching needs no flush (see [The shop cache](#the-shop-cache))
        HMDP_SHOP_CACHE shop_strategy: ShopCacheStrategy = ShopCacheStrategy::Mutex;
        /// cached entry lifetime (the original's 30 min; the logical lifetime with `logical`)
        HMDP_CACHE_TTL_SECS ttl: Duration as Secs = Duration::from_secs(30 * 60),
            check at_least(1);
        /// how long "no such shop" is remembered (the original's 2 min)
        HMDP_CACHE_NULL_TTL_SECS null_ttl: Duration as Secs = Duration::from_secs(120),
            check at_least(1);
        /// every cache TTL is spread by ± this ratio (avalanche protection)
        HMDP_CACHE_JITTER jitter: f64 = 0.1, check between(0.0, 0.5);
        /// in-process L1 lifetime; `0` turns the L1 off
        HMDP_CACHE_L1_TTL_MS l1_ttl: Duration as Millis = Duration::from_millis(1000);
        /// L1 entries
        HMDP_CACHE_L1_CAPACITY l1_capacity: u64 = 10_000;
        /// Bloom filter of shop ids in front of the shop cache
        HMDP_SHOP_BLOOM bloom: bool = true;
        /// with Redis down, at most this many shop loads go to the database at once, concurrent
        /// reads of one shop sharing one (the rest get a fast 503); `0` = always 503
        HMDP_CACHE_FALLBACK_CONCURRENCY fallback_concurrency: usize = 8;
    }
}

settings! {
    /// Flash-sale and order-worker settings.
    #[derive(Debug, Clone)]
    pub struct SeckillSettings {
        /// `async`: one Lua script decides in Redis, a worker writes the order; `sync`: the
        /// database decides under a per-user lock
        HMDP_SECKILL_MODE mode: SeckillMode = SeckillMode::Async;
        /// order streams; on a Redis Cluster each shard is one hash slot. Recorded in Redis on
        /// first use: an instance with another count refuses to take or write orders (see below
        /// for changing it)
        HMDP_SECKILL_SHARDS shards: u32 = 1, check between(1, 1024);
        /// run the order worker inside `hmdp serve` (`hmdp worker` runs it alone)
        HMDP_WORKER worker: bool = true;
        /// orders written per database transaction at most
        HMDP_WORKER_BATCH batch: usize = 200, check between(1, 5000);
        /// an order that fails this often (for reasons other than the database being away or
        /// briefly refusing), over at least 60 s, moves to the dead-letter stream
        HMDP_WORKER_MAX_DELIVERIES max_deliveries: u64 = 5, check at_least(1);
        /// orders left pending this long by a dead worker are taken over
        HMDP_WORKER_CLAIM_IDLE_MS claim_idle: Duration as Millis = Duration::from_secs(30);
        /// the worker's name in the consumer group: a stable name per deployment slot (e.g. a pod
        /// name) lets a restarted worker finish its own pending orders at once; two live workers
        /// must never share one
        HMDP_WORKER_CONSUMER consumer: Option<String> as Trimmed = None,
            unset "random per process";
        /// `hmdp worker` only: serve its `/metrics` and `/health` on this address (no port when
        /// unset)
        HMDP_WORKER_LISTEN listen: Option<SocketAddr> = None;
        /// how accepted orders reach the database: `stream` (the worker reads the Redis order
        /// streams) or `rabbitmq` (a relay publishes them to the exchange `hmdianping.direct`,
        /// routing key `direct.seckill`, with publisher confirms; the worker consumes
        /// `direct.seckill.queue`). Either way the grab appends to the stream first
        HMDP_ORDER_TRANSPORT transport: OrderTransport = OrderTransport::Stream;
        /// RabbitMQ for `HMDP_ORDER_TRANSPORT=rabbitmq`; the path is the vhost (`%2f` is `/`)
        HMDP_AMQP_URL amqp_url: String as Url = DEFAULT_AMQP_URL.to_owned(),
            check scheme("amqp", "amqps");
        /// with `rabbitmq`, what this worker runs: `both`, `relay` (stream to exchange) or
        /// `consumer` (queue to database), to scale or isolate the halves
        HMDP_AMQP_ROLE amqp_role: AmqpRole = AmqpRole::Both;
        /// the relay retries a batch the broker has not confirmed within this long
        HMDP_AMQP_CONFIRM_TIMEOUT_MS confirm_timeout: Duration as Millis = Duration::from_secs(5),
            check at_least(1);
        /// order ids: `compatible` (one `INCR` each, the original) or `segment` (blocks reserved
        /// with `INCRBY`)
        HMDP_ID_MODE id_mode: IdMode = IdMode::Segment;
        /// answer an accepted grab only once this many replicas hold it (Redis `WAIT`), so a
        /// promoted replica cannot forget an acknowledged order; `0` = off. One Redis primary
        /// only (not with a cluster or the managed `redis-server`). Costs about one replication
        /// round trip per accepted grab (BENCHMARKS.md)
        HMDP_REDIS_WAIT_REPLICAS wait_replicas: u32 = 0, check at_most(16);
        /// how long an accepted grab waits for `HMDP_REDIS_WAIT_REPLICAS`; when they do not all
        /// confirm in time it answers 503 `not_replicated` with the order's id (a retry is
        /// refused as a duplicate naming the order while the primary lives)
        HMDP_REDIS_WAIT_TIMEOUT_MS wait_timeout: Duration as Millis = Duration::from_millis(200),
            check between(1, 10_000);
    }
}

settings! {
    /// The social half: notes, the followers' feed, sign-in, unique visitors, photo uploads.
    #[derive(Debug, Clone)]
    pub struct SocialSettings {
        /// authors with more followers than this are not fanned out on publish: their notes are
        /// merged into a follower's feed when it is read (push/pull hybrid); `0` = always pull
        HMDP_FEED_PUSH_MAX_FOLLOWERS feed_push_max_followers: u64 = 5_000;
        /// notes kept in each follower's inbox (`feed:{userId}`), the oldest trimmed first
        HMDP_FEED_INBOX_MAX feed_inbox_max: u64 = 1_000, check at_least(1);
        /// the most users one user may follow; a follow beyond it is refused with `follow_limit`
        /// (it bounds the follow sets, their rebuilds and the common-follows intersection)
        HMDP_FOLLOW_MAX follow_max: u64 = 5_000, check at_least(1);
        /// the time zone of "today" for sign-in days and daily visitor counts (an IANA name)
        HMDP_TIME_ZONE time_zone: TimeZone = TimeZone(chrono_tz::Asia::Shanghai);
        /// shop visits are buffered in memory and sent to Redis at least this often (at most 1 s)
        HMDP_UV_FLUSH_MS uv_flush: Duration as Millis = Duration::from_millis(1000),
            check between(1, 1000);
        /// where uploaded note photos are kept and served from at `/imgs/blogs/…` (never inside
        /// `HMDP_STATIC_DIR`; best on a file system of its own, so photos cannot fill the disk
        /// of the database or Redis)
        HMDP_UPLOAD_DIR upload_dir: Option<PathBuf> = None, unset "`$HMDP_DATA_DIR/uploads`";
        /// largest accepted photo (the upload route's own body limit)
        HMDP_UPLOAD_MAX_BYTES upload_max_bytes: usize = 8 * 1024 * 1024, check at_least(1024);
        /// a photo not used by any note this long after its upload is deleted
        HMDP_UPLOAD_GRACE_SECS upload_grace: Duration as Secs = Duration::from_secs(24 * 3600),
            check at_least(1);
        /// how long a photo upload may take, instead of `HMDP_REQUEST_TIMEOUT_MS` (a large photo
        /// over a slow mobile link)
        HMDP_UPLOAD_TIMEOUT_SECS upload_timeout: Duration as Secs = Duration::from_secs(120),
            check at_least(1);
        /// photos one user may upload a day (in `HMDP_TIME_ZONE`); more are refused (429
        /// `upload_quota`) until midnight. Deleting a photo gives nothing back
        HMDP_UPLOAD_USER_DAILY_COUNT upload_user_daily_count: u64 = 100, check at_least(1);
        /// bytes of photos one user may upload a day, counted as stored; more are refused (429
        /// `upload_quota`) until midnight
        HMDP_UPLOAD_USER_DAILY_BYTES upload_user_daily_bytes: u64 = 200 * 1024 * 1024,
            check at_least(1024);
        /// uploads are refused (507 `disk_full`) while the upload folder's file system has less
        /// free space than this, so photos cannot fill the disk the database or Redis write to
        /// (`0` = off)
        HMDP_UPLOAD_MIN_FREE_BYTES upload_min_free_bytes: u64 = 1024 * 1024 * 1024;
    }
}

/// A time zone by its IANA name (`HMDP_TIME_ZONE`), e.g. `Asia/Shanghai` or `UTC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeZone(pub chrono_tz::Tz);

impl FromStr for TimeZone {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.trim()
            .parse::<chrono_tz::Tz>()
            .map(TimeZone)
            .map_err(|_| format!("`{s}` is not an IANA time zone name (e.g. Asia/Shanghai, UTC)"))
    }
}

impl fmt::Display for TimeZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name())
    }
}

/// The reverse proxies of `HMDP_TRUSTED_PROXIES`: CIDRs, or single addresses (a /32 or /128).
///
/// Parsed once here, so a typo stops the start instead of silently trusting nobody; the client
/// address is resolved from them in [`crate::http`] (`client`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<ipnet::IpNet>);

impl TrustedProxies {
    /// Whether `ip` is one of the proxies (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// No proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromStr for TrustedProxies {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.split([',', ' ', '\t', '\n'])
            .filter(|part| !part.is_empty())
            .map(|part| {
                part.parse::<ipnet::IpNet>()
                    .or_else(|_| part.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    .map(|net| net.trunc())
                    .map_err(|_| {
                        format!("`{part}` is not a CIDR (e.g. 10.0.0.0/8) nor an IP address")
                    })
            })
            .collect::<Result<_, _>>()
            .map(TrustedProxies)
    }
}

impl fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, net) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{net}")?;
        }
        Ok(())
    }
}

fn default_database_url(data_dir: &Path) -> String {
    format!("sqlite://{}/hmdp.db", data_dir.display())
}

impl SmsSettings {
    /// The longest a code can take to go out: every try timing out, with the pauses between.
    pub fn worst_case(&self) -> Duration {
        let pauses: Duration = (0..self.retries).map(sms_backoff).sum();
        self.timeout * (self.retries + 1) + pauses
    }

    /// `http` needs a URL and a secret, and all its tries must fit in a request's time: a
    /// request that times out first leaves the cooldown on a code that never went out.
    fn check(&self, request_timeout: Duration) -> Result<(), ConfigError> {
        if self.mode != Some(SmsMode::Http) {
            return Ok(());
        }
        let missing = |name| ConfigError::Invalid {
            name,
            message: "must be set with HMDP_SMS=http".to_owned(),
        };
        if self.url.is_none() {
            return Err(missing("HMDP_SMS_URL"));
        }
        if self.secret.is_none() {
            return Err(missing("HMDP_SMS_SECRET"));
        }
        if self.worst_case() >= request_timeout {
            return Err(ConfigError::Invalid {
                name: "HMDP_SMS_TIMEOUT_MS",
                message: format!(
                    "{} tries of {} ms with their pauses ({} ms) must be shorter than \
                     HMDP_REQUEST_TIMEOUT_MS ({} ms): lower HMDP_SMS_TIMEOUT_MS or HMDP_SMS_RETRIES",
                    self.retries + 1,
                    self.timeout.as_millis(),
                    self.worst_case().as_millis(),
                    request_timeout.as_millis()
                ),
            });
        }
        Ok(())
    }
}

/// The pause before retry `n` (0-based) of an SMS: 200 ms, doubling, at most 2 s.
pub fn sms_backoff(n: u32) -> Duration {
    Duration::from_millis(200 << n.min(10)).min(Duration::from_secs(2))
}

impl Config {
    /// The photo upload folder: `HMDP_UPLOAD_DIR`, or `uploads` in the data directory.
    pub fn upload_dir(&self) -> PathBuf {
        self.social
            .upload_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("uploads"))
    }

    /// Loads the configuration from an optional TOML file and the process environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let env: HashMap<String, String> = std::env::vars().collect();
        Self::from_sources(file, &env)
    }

    /// Like [`Config::load`], with the environment given explicitly (tests).
    pub fn from_sources(
        file: Option<&Path>,
        env: &HashMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let mut config = Config::default();
        // `HMDP_LOG` falls back to `RUST_LOG`, below the file.
        if let Some(filter) = env.get("RUST_LOG").filter(|v| !v.trim().is_empty()) {
            config.log_filter = filter.clone();
        }
        let rows = config.all_rows();
        let mut given = match file {
            Some(path) => file_values(path, &rows)?,
            None => HashMap::new(),
        };
        // The environment overrides the file, for declared variables only. Empty means unset,
        // except where empty is the default (`HMDP_REDIS_PREFIX=""` overrides the file's prefix).
        given.extend(rows.iter().filter_map(|row| {
            let value = env.get(row.var)?;
            let keep_empty = row.value.as_deref() == Some("");
            let text = if keep_empty { value } else { value.trim() };
            (keep_empty || !text.is_empty()).then(|| (row.var, (text.to_owned(), None)))
        }));
        config.apply(&given)?;
        if !given.contains_key("HMDP_DATABASE_URL") {
            config.database_url = default_database_url(&config.data_dir);
        }
        // A session trusted longer than it lives could outlast its expiry by more than a blink.
        if config.session_cache >= config.session_ttl.min(config.session_max_age) {
            return Err(ConfigError::Invalid {
                name: "HMDP_SESSION_CACHE_MS",
                message: "must be shorter than the session TTL and maximum age".to_owned(),
            });
        }
        // `WAIT` reaches one node; a cluster spreads the grabs over several.
        if config.seckill.wait_replicas > 0 && config.redis_url_or_default().contains(',') {
            return Err(ConfigError::Invalid {
                name: "HMDP_REDIS_WAIT_REPLICAS",
                message: "works with one Redis primary, not with a Redis Cluster (several \
                          HMDP_REDIS_URL addresses)"
                    .to_owned(),
            });
        }
        config.sms.check(config.request_timeout)?;
        Ok(config)
    }

    /// The Redis URL in effect (the configured one or the default).
    pub fn redis_url_or_default(&self) -> &str {
        self.redis_url.as_deref().unwrap_or(DEFAULT_REDIS_URL)
    }

    /// A one-line summary for the start-up log: `key=value` for every setting, in the file's
    /// keys and units, with secrets and passwords redacted.
    pub fn redacted_summary(&self) -> String {
        let shown = self.all_rows().into_iter().map(|row| {
            let key = file_key(row.var);
            match row.value {
                Some(v) if v.is_empty() || v.contains(' ') => format!("{key}={v:?}"),
                Some(v) => format!("{key}={v}"),
                None => format!("{key}=({})", row.unset.replace('`', "")),
            }
        });
        shown.collect::<Vec<_>>().join(" ")
    }

    /// The README's configuration table (variable, default, meaning), one row per setting.
    pub fn markdown_table() -> String {
        let rows = Config::default().all_rows().into_iter().map(|row| {
            let default = match row.value.as_deref() {
                Some("") => "empty".to_owned(),
                Some(v) => format!("`{v}`"),
                None => row.unset,
            };
            let meaning: Vec<&str> = row.doc.iter().map(|line| line.trim()).collect();
            format!("| `{}` | {default} | {} |\n", row.var, meaning.join(" "))
        });
        "| variable | default | meaning |\n|---|---|---|\n".to_owned() + &rows.collect::<String>()
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Config {{ {} }}", self.redacted_summary())
    }
}

/// One setting as declared, with a value (`None` when unset).
struct Row {
    var: &'static str,
    doc: &'static [&'static str],
    /// What an unset value means (Markdown).
    unset: String,
    value: Option<String>,
}

/// The TOML key: the variable in lower case without `HMDP_`.
fn file_key(var: &str) -> String {
    var.trim_start_matches("HMDP_").to_ascii_lowercase()
}

/// The settings given, by variable: the text, and the file it is in (`None`: the environment).
type Given<'a> = HashMap<&'static str, (String, Option<&'a Path>)>;

/// The raw value given for `var`, if any, parsed from its text and checked; a bad one names the
/// variable, or the file and the key when it is the file's and does not parse.
fn parse<R: FromStr<Err: fmt::Display>>(
    given: &Given,
    var: &'static str,
    check: impl Fn(&R) -> Result<(), String>,
) -> Result<Option<R>, ConfigError> {
    let Some((text, file)) = given.get(var) else {
        return Ok(None);
    };
    let raw = text.parse().map_err(|e| match file {
        Some(path) => ConfigError::Parse {
            path: path.to_path_buf(),
            message: format!("{}: {text:?}: {e}", file_key(var)),
        },
        None => ConfigError::Invalid {
            name: var,
            message: format!("{text:?}: {e}"),
        },
    })?;
    check(&raw).map_err(|message| ConfigError::Invalid { name: var, message })?;
    Ok(Some(raw))
}

/// The file's settings by variable, as text (so a number may also be written as a string); an
/// unknown key is a typo.
fn file_values<'a>(path: &'a Path, rows: &[Row]) -> Result<Given<'a>, ConfigError> {
    let bad = |message| ConfigError::Parse {
        path: path.to_owned(),
        message,
    };
    let toml = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let mut values: Dict = Figment::from(Toml::string(&toml))
        .extract()
        .map_err(|e| bad(e.kind.to_string()))?;
    if let Some(key) = values
        .keys()
        .find(|k| !rows.iter().any(|r| file_key(r.var) == **k))
    {
        return Err(bad(format!("unknown key `{key}`")));
    }
    let mut given = HashMap::new();
    for row in rows {
        let key = file_key(row.var);
        let text = match values.remove(&key) {
            None => continue,
            Some(Value::String(_, s)) => s,
            Some(Value::Bool(_, b)) => b.to_string(),
            Some(n @ Value::Num(..)) => n.to_i128().map_or_else(
                || n.to_f64().unwrap_or(f64::NAN).to_string(),
                |i| i.to_string(),
            ),
            Some(_) => {
                return Err(bad(format!(
                    "{key}: expected a number, a string or a boolean"
                )));
            }
        };
        given.insert(row.var, (text, Some(path)));
    }
    Ok(given)
}

/// How a field's type is written in the file and the environment, and shown; `U` is the unit
/// (`as Secs`, `as Millis`, ...) when the type alone does not say.
trait Setting<U = Plain>: Sized {
    /// What the file or the environment holds, parsed from its text.
    type Raw: FromStr<Err: fmt::Display>;
    fn from_raw(raw: Self::Raw) -> Self;
    /// The value as the file would hold it, secrets hidden; `None` when unset.
    fn show(&self) -> Option<String>;
}

/// Units: as written; seconds; milliseconds; a URL whose password is hidden; a trimmed name
/// where empty means unset.
enum Plain {}
enum Secs {}
enum Millis {}
enum Url {}
enum Trimmed {}

/// Implements [`Setting`]: `Unit: Type = Raw, |raw| from raw, |value| shown;`.
macro_rules! setting {
    ($($unit:ty: $ty:ty = $raw:ty, |$r:ident| $from:expr, |$v:ident| $show:expr;)*) => {$(
        impl Setting<$unit> for $ty {
            type Raw = $raw;
            fn from_raw($r: $raw) -> Self {
                $from
            }
            fn show(&self) -> Option<String> {
                let $v = self;
                $show
            }
        }
    )*};
    (as written: $($ty:ty),*) => {
        setting! { $(Plain: $ty = $ty, |raw| raw, |v| Some(v.to_string());)* }
    };
    (one of: $($ty:ty),*) => {
        setting! { $(Plain: $ty = OneOf<$ty>, |raw| raw.0, |v| Some(v.to_string());)* }
    };
}

setting!(as written: u32, u64, usize, f64, bool, String, SocketAddr, TimeZone, TrustedProxies);
setting!(one of: ManagedRedis, AppendFsync, LogFormat, ShopCacheStrategy, SeckillMode, IdMode,
    OrderTransport, AmqpRole, SmsMode);
setting! {
    Plain: PathBuf = PathBuf, |raw| raw, |v| Some(v.display().to_string());
    Plain: Secret = String, |raw| Secret(raw), |_v| Some("***".to_owned());
    Secs: Duration = u64, |raw| Duration::from_secs(raw), |v| Some(v.as_secs().to_string());
    Millis: Duration = u64, |raw| Duration::from_millis(raw), |v| Some(v.as_millis().to_string());
    Url: String = String, |raw| raw, |v| Some(redact_url(v));
    Trimmed: Option<String> = String, |raw| Some(raw.trim().to_owned()).filter(|n| !n.is_empty()),
        |v| v.clone();
}

impl<U, T: Setting<U>> Setting<U> for Option<T> {
    type Raw = T::Raw;
    fn from_raw(raw: T::Raw) -> Self {
        Some(T::from_raw(raw))
    }
    fn show(&self) -> Option<String> {
        self.as_ref().and_then(T::show)
    }
}

/// One of an enum's names, case-insensitive; anything else is refused with the names.
struct OneOf<T>(T);

impl<T: FromStr + VariantNames> FromStr for OneOf<T> {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let expected = || format!("expected one of: {}", T::VARIANTS.join(", "));
        s.parse().map(OneOf).map_err(|_| expected())
    }
}

/// `Ok` if `ok`, else the message: a failed check.
fn ensure(ok: bool, message: impl Into<String>) -> Result<(), String> {
    if ok { Ok(()) } else { Err(message.into()) }
}

fn at_least<T: PartialOrd + fmt::Display>(min: T) -> impl Fn(&T) -> Result<(), String> {
    let message = format!("must be at least {min}");
    move |v| ensure(*v >= min, &message)
}

fn at_most<T: PartialOrd + fmt::Display>(max: T) -> impl Fn(&T) -> Result<(), String> {
    let message = format!("must be at most {max}");
    move |v| ensure(*v <= max, &message)
}

fn between<T: PartialOrd + fmt::Display>(min: T, max: T) -> impl Fn(&T) -> Result<(), String> {
    let message = format!("must be between {min} and {max}");
    move |v| ensure(min <= *v && *v <= max, &message)
}

fn min_len(min: usize) -> impl Fn(&String) -> Result<(), String> {
    let message = format!("must be at least {min} characters long");
    move |v| ensure(v.len() >= min, &message)
}

/// Keys derive their Redis Cluster hash tags from their own parts; braces in the prefix would
/// silently move every key into one slot.
fn no_braces() -> impl Fn(&String) -> Result<(), String> {
    |v| ensure(!v.contains(['{', '}']), "must not contain '{' or '}'")
}

/// A URL of scheme `a` or `b`.
fn scheme(a: &'static str, b: &'static str) -> impl Fn(&String) -> Result<(), String> {
    let message = format!("must be an `{a}://` or `{b}://` URL");
    move |v| {
        let ok = [a, b].iter().any(|s| v.starts_with(&format!("{s}://")));
        ensure(ok, &message)
    }
}

fn header_name() -> impl Fn(&String) -> Result<(), String> {
    |v| {
        let ok = axum::http::HeaderName::from_bytes(v.as_bytes()).is_ok();
        ensure(ok, "must be an HTTP header name")
    }
}

/// Hides what a URL may carry as a credential: the password of every `scheme://user:password@host`
/// (a user name alone, which some gateways take as their key, too), and the query and fragment,
/// where gateways take API keys. `HMDP_REDIS_URL` may list several URLs, separated by `,` before
/// a scheme; any other `,` may be part of a password (RFC 3986 allows it there unencoded).
/// The user information ends at the last `@`, so an unencoded `@`, `/` or `,` in a password is
/// hidden too. When a `?` or `#` comes before that `@`, nothing tells a password containing one
/// (`root:a?b@db`) from a query containing an `@` (`/send?to=a@b`): everything after the scheme
/// is hidden then.
pub fn redact_url(url: &str) -> String {
    static NEXT_URL: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(r",[A-Za-z][A-Za-z0-9+.-]*://").expect("a valid pattern")
    });
    let mut out = String::with_capacity(url.len());
    let mut start = 0;
    let ends = NEXT_URL.find_iter(url).map(|m| m.start());
    for end in ends.chain([url.len()]) {
        if start > 0 {
            out.push(',');
        }
        out.push_str(&redact_one_url(&url[start..end]));
        start = end + 1;
    }
    out
}

/// One URL with its password (or a user name alone) and its query or fragment replaced by `***`.
fn redact_one_url(url: &str) -> String {
    let authority = url.find("://").map_or(0, |i| i + 3);
    let query = url[authority..].find(['?', '#']).map(|i| authority + i);
    let at = url[authority..].rfind('@').map(|i| authority + i);
    let hide_query = |rest: &str| match rest.find(['?', '#']) {
        Some(q) => format!("{}{}***", &rest[..q], &rest[q..q + 1]),
        None => rest.to_owned(),
    };
    match (at, query) {
        (Some(at), Some(q)) if q < at => format!("{}***", &url[..authority]),
        (Some(at), _) => {
            let shown = match url[authority..at].split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None if at == authority => String::new(),
                None => "***".to_owned(),
            };
            format!("{}{shown}{}", &url[..authority], hide_query(&url[at..]))
        }
        (None, _) => hide_query(url),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn no_configuration_gives_the_documented_defaults() {
        let c = Config::from_sources(None, &env(&[])).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8081");
        assert_eq!(c.database_url, "sqlite://data/hmdp.db");
        assert_eq!(c.redis_url_or_default(), "redis://127.0.0.1:6379");
        assert!(c.redis_url.is_none());
        assert_eq!(c.redis_prefix, "");
        assert_eq!(c.data_dir, PathBuf::from("data"));
        assert_eq!(c.session_ttl, Duration::from_secs(1800));
        assert_eq!(c.code.ttl, Duration::from_secs(120));
        assert_eq!(c.code.ip_per_min, 10);
        assert_eq!(
            (c.code.daily_limit, c.code.phone_ip_daily_limit),
            (50, 10),
            "a phone's day cannot be used up from one address"
        );
        assert!(c.trusted_proxies.is_empty(), "no proxy is trusted");
        assert_eq!(c.max_connections, 10_000);
        assert_eq!(c.max_connections_per_ip, 256);
        assert_eq!(c.max_header_bytes, 16 * 1024);
        assert!(c.redacted_summary().contains("trusted_proxies=\"\" "));
        let c = Config::from_sources(None, &env(&[("HMDP_CODE_IP_PER_MIN", "0")])).unwrap();
        assert_eq!(c.code.ip_per_min, 0, "0 turns the per-IP code quota off");
        assert!(c.redacted_summary().contains("code_ip_per_min=0 "));
    }

    #[test]
    fn the_environment_overrides_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hmdp.toml");
        std::fs::write(
            &file,
            "listen = \"0.0.0.0:9000\"\nredis_prefix = \"file:\"\nsession_ttl_secs = 60\n",
        )
        .unwrap();
        let c = Config::from_sources(Some(&file), &env(&[("HMDP_REDIS_PREFIX", "env:")])).unwrap();
        assert_eq!(c.listen.to_string(), "0.0.0.0:9000");
        assert_eq!(c.redis_prefix, "env:");
        assert_eq!(c.session_ttl, Duration::from_secs(60));
    }

    #[test]
    fn the_managed_redis_fsync_policy_comes_from_the_file_or_the_environment() {
        let c = Config::from_sources(None, &env(&[])).unwrap();
        assert_eq!(c.redis_appendfsync, AppendFsync::Everysec);
        assert!(c.redacted_summary().contains("redis_appendfsync=everysec"));

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hmdp.toml");
        std::fs::write(&file, "redis_appendfsync = \"always\"\n").unwrap();
        let c = Config::from_sources(Some(&file), &env(&[])).unwrap();
        assert_eq!(c.redis_appendfsync, AppendFsync::Always);
        assert!(c.redacted_summary().contains("redis_appendfsync=always"));
        let c =
            Config::from_sources(Some(&file), &env(&[("HMDP_REDIS_APPENDFSYNC", "no")])).unwrap();
        assert_eq!(c.redis_appendfsync, AppendFsync::No);

        let err = Config::from_sources(None, &env(&[("HMDP_REDIS_APPENDFSYNC", "sometimes")]))
            .unwrap_err();
        assert!(err.to_string().contains("HMDP_REDIS_APPENDFSYNC"), "{err}");
        assert!(err.to_string().contains("always, everysec, no"), "{err}");
    }

    #[test]
    fn the_worker_consumer_name_is_optional_and_trimmed() {
        let c = Config::from_sources(None, &env(&[])).unwrap();
        assert_eq!(c.seckill.consumer, None);
        assert!(
            c.redacted_summary()
                .contains("worker_consumer=(random per process)")
        );
        let c = Config::from_sources(None, &env(&[("HMDP_WORKER_CONSUMER", " pod-1 ")])).unwrap();
        assert_eq!(c.seckill.consumer.as_deref(), Some("pod-1"));
        let c = Config::from_sources(None, &env(&[("HMDP_WORKER_CONSUMER", "  ")])).unwrap();
        assert_eq!(c.seckill.consumer, None);
    }

    #[test]
    fn the_worker_listener_is_off_unless_set() {
        let c = Config::from_sources(None, &env(&[])).unwrap();
        assert_eq!(c.seckill.listen, None);
        assert!(c.redacted_summary().contains("worker_listen=(unset)"));
        let c =
            Config::from_sources(None, &env(&[("HMDP_WORKER_LISTEN", "127.0.0.1:9464")])).unwrap();
        assert_eq!(c.seckill.listen, Some("127.0.0.1:9464".parse().unwrap()));
        assert!(
            c.redacted_summary()
                .contains("worker_listen=127.0.0.1:9464")
        );
        let err = Config::from_sources(None, &env(&[("HMDP_WORKER_LISTEN", "9464")])).unwrap_err();
        assert!(err.to_string().contains("HMDP_WORKER_LISTEN"), "{err}");
    }

    #[test]
    fn the_session_cache_is_on_by_default_and_bounded() {
        let c = Config::from_sources(None, &env(&[])).unwrap();
        assert_eq!(c.session_cache, Duration::from_secs(5));
        assert!(c.redacted_summary().contains("session_cache_ms=5000 "));
        let c = Config::from_sources(None, &env(&[("HMDP_SESSION_CACHE_MS", "500")])).unwrap();
        assert_eq!(c.session_cache, Duration::from_millis(500));
        for bad in [
            vec![("HMDP_SESSION_CACHE_MS", "60001")],
            vec![
                ("HMDP_SESSION_CACHE_MS", "5000"),
                ("HMDP_SESSION_TTL_SECS", "5"),
            ],
            vec![("HMDP_SESSION_CACHE_MS", "soon")],
        ] {
            let err = Config::from_sources(None, &env(&bad)).unwrap_err();
            assert!(err.to_string().contains("HMDP_SESSION_CACHE_MS"), "{err}");
        }
    }

    #[test]
    fn replica_waits_are_off_by_default_and_refused_on_a_cluster() {
        let c = Config::from_sources(None, &env(&[])).unwrap();
        assert_eq!(c.seckill.wait_replicas, 0);
        let c = Config::from_sources(
            None,
            &env(&[
                ("HMDP_REDIS_WAIT_REPLICAS", "2"),
                ("HMDP_REDIS_WAIT_TIMEOUT_MS", "50"),
            ]),
        )
        .unwrap();
        assert_eq!(c.seckill.wait_replicas, 2);
        assert_eq!(c.seckill.wait_timeout, Duration::from_millis(50));
        for bad in [
            vec![
                ("HMDP_REDIS_WAIT_REPLICAS", "1"),
                ("HMDP_REDIS_URL", "redis://a:7000,redis://b:7001"),
            ],
            vec![("HMDP_REDIS_WAIT_REPLICAS", "17")],
            vec![("HMDP_REDIS_WAIT_TIMEOUT_MS", "0")],
        ] {
            let err = Config::from_sources(None, &env(&bad)).unwrap_err();
            assert!(err.to_string().contains("HMDP_REDIS_WAIT_"), "{err}");
        }
    }

    #[test]
    fn trusted_proxies_are_cidrs_or_addresses() {
        let c = Config::from_sources(
            None,
            &env(&[("HMDP_TRUSTED_PROXIES", "127.0.0.1, 10.1.2.3/8 fd00::/8")]),
        )
        .unwrap();
        assert_eq!(
            c.trusted_proxies.to_string(),
            "127.0.0.1/32,10.0.0.0/8,fd00::/8"
        );
        assert!(
            c.redacted_summary()
                .contains("trusted_proxies=127.0.0.1/32,10.0.0.0/8,fd00::/8 ")
        );
        for (ip, trusted) in [
            ("127.0.0.1", true),
            ("127.0.0.2", false),
            ("10.200.0.1", true),
            ("::ffff:10.0.0.1", true),
            ("fd12::1", true),
            ("2001:db8::1", false),
        ] {
            assert_eq!(
                c.trusted_proxies.contains(ip.parse().unwrap()),
                trusted,
                "{ip}"
            );
        }
        let err = Config::from_sources(None, &env(&[("HMDP_TRUSTED_PROXIES", "10.0.0.0/33")]))
            .unwrap_err();
        assert!(err.to_string().contains("HMDP_TRUSTED_PROXIES"), "{err}");
        assert!(err.to_string().contains("10.0.0.0/33"), "{err}");
    }

    #[test]
    fn the_data_dir_moves_the_default_database() {
        let c = Config::from_sources(None, &env(&[("HMDP_DATA_DIR", "/var/lib/hmdp")])).unwrap();
        assert_eq!(c.database_url, "sqlite:///var/lib/hmdp/hmdp.db");
    }

    #[test]
    fn unknown_file_keys_are_rejected_with_the_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, "lisen = \"x\"\n").unwrap();
        let err = Config::from_sources(Some(&file), &env(&[])).unwrap_err();
        assert!(err.to_string().contains("bad.toml"), "{err}");
    }

    #[test]
    fn bad_values_name_the_variable() {
        let err = Config::from_sources(None, &env(&[("HMDP_LISTEN", "nope")])).unwrap_err();
        assert!(err.to_string().contains("HMDP_LISTEN"), "{err}");
        let err = Config::from_sources(None, &env(&[("HMDP_REDIS_PREFIX", "{x}")])).unwrap_err();
        assert!(err.to_string().contains("HMDP_REDIS_PREFIX"), "{err}");
        let err = Config::from_sources(None, &env(&[("HMDP_ADMIN_TOKEN", "short")])).unwrap_err();
        assert!(err.to_string().contains("HMDP_ADMIN_TOKEN"), "{err}");
    }

    #[test]
    fn secrets_never_show_in_debug_output_or_the_summary() {
        let c = Config::from_sources(
            None,
            &env(&[
                ("HMDP_ADMIN_TOKEN", "super-secret-admin-token"),
                ("HMDP_DATABASE_URL", "mysql://root:hunter2@db:3306/hmdp"),
                ("HMDP_SMS", "http"),
                ("HMDP_SMS_URL", "https://relay:sesame@sms.example/send"),
                ("HMDP_SMS_SECRET", "Bearer gateway-key-42"),
            ]),
        )
        .unwrap();
        let shown = format!("{c:?} {}", c.redacted_summary());
        assert!(!shown.contains("super-secret-admin-token"));
        assert!(!shown.contains("hunter2"));
        assert!(shown.contains("mysql://root:***@db:3306/hmdp"));
        assert!(
            !shown.contains("gateway-key-42") && !shown.contains("sesame"),
            "{shown}"
        );
        assert!(shown.contains("sms_secret=*** "), "{shown}");
    }

    #[test]
    fn the_sms_gateway_needs_a_url_and_a_secret_and_must_fit_in_a_request() {
        let c = Config::from_sources(None, &env(&[])).unwrap();
        assert_eq!(c.sms.mode, None);
        assert!(
            c.redacted_summary()
                .contains("sms=(log on loopback, else required)")
        );
        let c = Config::from_sources(None, &env(&[("HMDP_SMS", "LOG")])).unwrap();
        assert_eq!(c.sms.mode, Some(SmsMode::Log));

        let gateway = [
            ("HMDP_SMS", "http"),
            ("HMDP_SMS_URL", "https://sms.example/send"),
            ("HMDP_SMS_SECRET", "k"),
        ];
        let c = Config::from_sources(None, &env(&gateway)).unwrap();
        assert_eq!(c.sms.header, "authorization");
        assert_eq!(
            c.sms.worst_case(),
            Duration::from_millis(3 * 2000 + 200 + 400)
        );
        for (missing, name) in [(1, "HMDP_SMS_URL"), (2, "HMDP_SMS_SECRET")] {
            let mut given = gateway.to_vec();
            given.remove(missing);
            let err = Config::from_sources(None, &env(&given)).unwrap_err();
            assert!(err.to_string().contains(name), "{err}");
        }
        for (bad, name) in [
            (("HMDP_SMS_URL", "ftp://x"), "HMDP_SMS_URL"),
            (("HMDP_SMS_HEADER", "not a header"), "HMDP_SMS_HEADER"),
            (("HMDP_SMS_RETRIES", "11"), "HMDP_SMS_RETRIES"),
            (("HMDP_SMS_TIMEOUT_MS", "4000"), "HMDP_SMS_TIMEOUT_MS"),
            (("HMDP_SMS", "carrier-pigeon"), "HMDP_SMS"),
        ] {
            let mut given = gateway.to_vec();
            given.push(bad);
            let err = Config::from_sources(None, &env(&given)).unwrap_err();
            assert!(err.to_string().contains(name), "{bad:?}: {err}");
        }
        // Three tries of 4 s fit in a request of 15 s.
        let mut given = gateway.to_vec();
        given.extend([
            ("HMDP_SMS_TIMEOUT_MS", "4000"),
            ("HMDP_REQUEST_TIMEOUT_MS", "15000"),
        ]);
        assert!(Config::from_sources(None, &env(&given)).is_ok());
    }

    #[test]
    fn the_metrics_listener_is_off_unless_set() {
        let c = Config::from_sources(None, &env(&[])).unwrap();
        assert_eq!(c.metrics_listen, None);
        assert!(c.redacted_summary().contains("metrics_listen=(off)"));
        let c =
            Config::from_sources(None, &env(&[("HMDP_METRICS_LISTEN", "10.0.0.5:9464")])).unwrap();
        assert_eq!(c.metrics_listen, Some("10.0.0.5:9464".parse().unwrap()));
    }

    #[test]
    fn passwords_with_commas_and_query_strings_are_hidden() {
        for (url, shown) in [
            ("redis://:p,w@a:1", "redis://:***@a:1"),
            (
                "redis://:p,w@a:1,redis://u:x,redis:y@b:2",
                "redis://:***@a:1,redis://u:***@b:2",
            ),
            (
                "mysql://root:p@ss/w,rd@db:3306/hmdp",
                "mysql://root:***@db:3306/hmdp",
            ),
            (
                "https://sms.example/send?key=k3y&to=a",
                "https://sms.example/send?***",
            ),
            ("https://sms.example/send?key=k3y&to=a@b", "https://***"),
            ("mysql://root:ab?cd@db/hmdp", "mysql://***"),
            ("mysql://root:ab#cd@db/hmdp", "mysql://***"),
            (
                "redis://:a@h:1?k=v,redis://:b@h:2",
                "redis://:***@h:1?***,redis://:***@h:2",
            ),
            (
                "https://sms.example/send#k3y",
                "https://sms.example/send#***",
            ),
            (
                "https://k3y@sms.example/send",
                "https://***@sms.example/send",
            ),
            (
                "https://:k3y@sms.example/send",
                "https://:***@sms.example/send",
            ),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
        let c = Config::from_sources(
            None,
            &env(&[
                ("HMDP_SMS", "http"),
                (
                    "HMDP_SMS_URL",
                    "https://sms.example/send?apikey=gateway-key-42",
                ),
                ("HMDP_SMS_SECRET", "s"),
                ("HMDP_REDIS_URL", "redis://:hunter,2@r:6379"),
                ("HMDP_DATABASE_URL", "mysql://root:a,b@db:3306/hmdp"),
            ]),
        )
        .unwrap();
        let shown = format!("{c:?} {}", c.redacted_summary());
        for secret in ["gateway-key-42", "hunter", ",2@", "a,b"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(
            shown.contains("sms_url=https://sms.example/send?*** "),
            "{shown}"
        );
    }

    #[test]
    fn urls_without_passwords_are_left_alone() {
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        assert_eq!(
            redact_url("redis://:pw@a:1,redis://:pw@b:2"),
            "redis://:***@a:1,redis://:***@b:2"
        );
    }

    #[test]
    fn the_readme_table_is_the_declared_one() {
        let readme = include_str!("../../../README.md");
        let start = readme
            .find("| variable | default | meaning |")
            .expect("README.md has a configuration table");
        let end = readme[start..]
            .find("\n\n")
            .map_or(readme.len(), |i| start + i + 1);
        let generated = Config::markdown_table();
        assert!(
            readme[start..end] == generated,
            "README.md's configuration table differs from the settings declared in config.rs; \
             the declared one is:\n{generated}"
        );
    }

    #[test]
    fn the_summary_shows_every_setting_in_file_keys_and_units() {
        let c =
            Config::from_sources(None, &env(&[("HMDP_REDIS_URL", "redis://:pw@r:6379")])).unwrap();
        let summary = c.redacted_summary();
        let keys: Vec<&str> = summary
            .split(' ')
            .filter_map(|part| part.split_once('=').map(|(k, _)| k))
            .filter(|k| !k.is_empty() && !k.contains(['(', ')']))
            .collect();
        let table = Config::markdown_table();
        assert_eq!(keys.len(), table.lines().count() - 2, "{summary}");
        for (key, row) in keys.iter().zip(table.lines().skip(2)) {
            let var = format!("`HMDP_{}`", key.to_ascii_uppercase());
            assert!(row.starts_with(&format!("| {var} |")), "{key} vs {row}");
        }
        for shown in [
            "listen=127.0.0.1:8081 ",
            "redis_url=redis://:***@r:6379 ",
            "redis_prefix=\"\" ",
            "admin_token=(generated) ",
            "session_ttl_secs=1800 ",
            "cache_l1_ttl_ms=1000 ",
            "shop_cache=mutex ",
            "worker_claim_idle_ms=30000 ",
        ] {
            assert!(summary.contains(shown), "{shown} in {summary}");
        }
    }

    #[test]
    fn every_setting_reads_back_what_the_summary_shows() {
        // Each shown value, written to a file under its key, gives the same configuration.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hmdp.toml");
        let defaults = Config::from_sources(None, &env(&[])).unwrap();
        let toml: String = defaults
            .all_rows()
            .into_iter()
            .filter_map(|row| Some(format!("{} = {:?}\n", file_key(row.var), row.value?)))
            .collect();
        std::fs::write(&file, toml).unwrap();
        let read = Config::from_sources(Some(&file), &env(&[])).unwrap();
        assert_eq!(read.redacted_summary(), defaults.redacted_summary());
    }

    #[test]
    fn empty_variables_are_unset_except_an_empty_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hmdp.toml");
        std::fs::write(
            &file,
            "listen = \"0.0.0.0:9000\"\nredis_prefix = \"file:\"\n",
        )
        .unwrap();
        let c = Config::from_sources(
            Some(&file),
            &env(&[("HMDP_LISTEN", " "), ("HMDP_REDIS_PREFIX", "")]),
        )
        .unwrap();
        assert_eq!(c.listen.to_string(), "0.0.0.0:9000");
        assert_eq!(c.redis_prefix, "");
    }

    #[test]
    fn names_are_case_insensitive_and_numbers_may_be_padded() {
        let c = Config::from_sources(
            None,
            &env(&[
                ("HMDP_SECKILL_MODE", "SYNC"),
                ("HMDP_ID_MODE", "Compatible"),
                ("HMDP_SECKILL_SHARDS", " 4 "),
                ("HMDP_CACHE_JITTER", "0.25"),
            ]),
        )
        .unwrap();
        assert_eq!(c.seckill.mode, SeckillMode::Sync);
        assert_eq!(c.seckill.id_mode, IdMode::Compatible);
        assert_eq!(c.seckill.shards, 4);
        assert_eq!(c.cache.jitter, 0.25);
        let err = Config::from_sources(None, &env(&[("HMDP_SECKILL_MODE", "later")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid value for HMDP_SECKILL_MODE: \"later\": expected one of: async, sync"
        );
    }

    #[test]
    fn the_log_filter_falls_back_to_rust_log_below_the_file() {
        let c = Config::from_sources(None, &env(&[("RUST_LOG", "debug")])).unwrap();
        assert_eq!(c.log_filter, "debug");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hmdp.toml");
        std::fs::write(&file, "log = \"warn\"\n").unwrap();
        let c = Config::from_sources(Some(&file), &env(&[("RUST_LOG", "debug")])).unwrap();
        assert_eq!(c.log_filter, "warn");
        let c = Config::from_sources(
            Some(&file),
            &env(&[("RUST_LOG", "debug"), ("HMDP_LOG", "error")]),
        )
        .unwrap();
        assert_eq!(c.log_filter, "error");
    }

    #[test]
    fn file_values_are_checked_and_bad_ones_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("odd.toml");
        std::fs::write(&file, "seckill_shards = 0\n").unwrap();
        let err = Config::from_sources(Some(&file), &env(&[])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid value for HMDP_SECKILL_SHARDS: must be between 1 and 1024"
        );
        std::fs::write(&file, "session_ttl_secs = \"long\"\n").unwrap();
        let err = Config::from_sources(Some(&file), &env(&[])).unwrap_err();
        assert!(err.to_string().contains("odd.toml"), "{err}");
        assert!(err.to_string().contains("session_ttl_secs"), "{err}");
        let err =
            Config::from_sources(Some(&dir.path().join("missing.toml")), &env(&[])).unwrap_err();
        assert!(err.to_string().contains("missing.toml"), "{err}");
    }
}
