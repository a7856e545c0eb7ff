//! Configuration: built-in defaults < optional TOML file (`--config FILE`) < environment.
//!
//! The `HMDP_*` variable names are a contract: scripts, CI and tests outside the code set them, so
//! they never change meaning. Every setting has a default that makes `hmdp` run with no
//! configuration at all (SQLite file under the data directory, Redis on localhost or a managed
//! child `redis-server`).
//!
//! This file lists the settings, each declared once in a `settings!` block: variable, field,
//! type, default, docs and check. Everything else comes from that entry (`load.rs`): the TOML
//! key (the variable in lower case without `HMDP_`: `HMDP_REDIS_URL` → `redis_url`), how the
//! stacked file and environment are read into the struct, the listing of `hmdp config` and the
//! configuration table of docs/configuration.md. Unknown file keys are rejected so typos do not
//! pass silently. Rules between settings are in `rules.rs`. A setting's value type belongs to
//! the feature it steers (`SeckillMode` in [`crate::seckill`], ...), defined there on nothing but
//! the standard library and parsing crates, so these declarations can name it without reaching
//! above this layer.

mod choices;
mod load;
mod redact;
mod rules;
#[cfg(test)]
mod tests;
mod values;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

pub use load::{Choice, ConfigError, Listed, Source};
pub use redact::redact_url;
pub use values::{Secret, SentinelAddrs, SentinelSpec, TimeZone, TrustedProxies};

use load::{
    Millis, Secs, Trimmed, Url, at_least, at_most, between, header_name, min_len, no_braces,
    scheme, settings,
};

pub use choices::{
    AmqpRole, AppendFsync, IdMode, LogFormat, ManagedMode, OrderTransport, SeckillMode,
    ShopCacheStrategy, SmsMode,
};

/// The default Redis URL, used when `HMDP_REDIS_URL` is unset.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
/// The RabbitMQ of `HMDP_AMQP_URL` when unset: a local broker's default account and vhost.
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// The default `HMDP_DATA_DIR`.
const DEFAULT_DATA_DIR: &str = "data";

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
        /// Redis; several comma-separated `redis://` URLs mean a Redis Cluster. A password goes
        /// in the URL (`redis://:PASSWORD@host:6379`). Not with `HMDP_REDIS_SENTINELS`
        HMDP_REDIS_URL redis_url: Option<String> as Url = None,
            unset format!("`{DEFAULT_REDIS_URL}` (none with `HMDP_REDIS_SENTINELS`)");
        /// Redis Sentinel: the Sentinels' `host:port`, comma-separated (three or more). The
        /// service asks them all for the primary of `HMDP_REDIS_SENTINEL_MASTER`, takes the one a
        /// majority of the listed Sentinels names, and follows every promotion by itself
        /// (commands, subscriptions, replica waits, the worker's reads), then reconciles the
        /// live sales once per promotion. While a Sentinel announces a failover
        /// (`+try-failover`) until the primary moved, grabs that wait for replicas answer 503
        /// `unavailable`. Instead of `HMDP_REDIS_URL`; never a managed `redis-server`
        HMDP_REDIS_SENTINELS redis_sentinels: Option<SentinelAddrs> = None;
        /// the master name the Sentinels monitor (`sentinel monitor <name> …`); required with
        /// `HMDP_REDIS_SENTINELS`
        HMDP_REDIS_SENTINEL_MASTER redis_sentinel_master: Option<String> as Trimmed = None;
        /// the Sentinels' own password (their `requirepass`); required unless every Sentinel is
        /// on loopback (Sentinel access is Redis admin)
        HMDP_REDIS_SENTINEL_PASSWORD redis_sentinel_password: Option<Secret> = None;
        /// with `HMDP_REDIS_SENTINELS`: the password of the primary and its replicas
        /// (`requirepass`/`masterauth`), if they have one. With `HMDP_REDIS_URL` the password is
        /// in the URL instead
        HMDP_REDIS_PASSWORD redis_password: Option<Secret> = None;
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
        HMDP_REDIS_MANAGED redis_managed: ManagedMode = ManagedMode::Auto;
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
        /// on a loopback `HMDP_LISTEN`; on any other address `hmdp serve` refuses to start. With
        /// `HMDP_TRUSTED_PROXIES` set (a public service behind a proxy) it must be set, whatever
        /// the address
        HMDP_SMS mode: Option<SmsMode> = None,
            unset "`log` on loopback without proxies, else required";
        /// `http`: the gateway URL; each code is POSTed there as JSON
        /// `{"id","phone","code","template","ttlSecs"}` (see [SMS gateway](internals/operations.md#sms-gateway))
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
        /// cache-aside); switching needs no flush (see [The shop cache](internals/request-path.md#the-shop-cache))
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
        /// batches of `HMDP_WORKER_BATCH` each shard's relay may have sent and not yet seen
        /// confirmed; each is acknowledged in the stream only after its own confirm and those
        /// of every batch sent before it
        HMDP_AMQP_BATCHES_IN_FLIGHT batches_in_flight: usize = 4, check between(1, 64);
        /// order ids: `compatible` (one `INCR` each, the original) or `segment` (blocks reserved
        /// with `INCRBY`)
        HMDP_ID_MODE id_mode: IdMode = IdMode::Segment;
        /// answer an accepted grab only once this many replicas hold it (Redis `WAIT`), so a
        /// promoted replica cannot forget an acknowledged order; `0` = off. One Redis primary
        /// (`HMDP_REDIS_URL` of one node, or `HMDP_REDIS_SENTINELS`), not a cluster nor the
        /// managed `redis-server`. Costs about one replication round trip per accepted grab
        /// (BENCHMARKS.md)
        HMDP_REDIS_WAIT_REPLICAS wait_replicas: u32 = 0, check at_most(16);
        /// how long an accepted grab waits for `HMDP_REDIS_WAIT_REPLICAS`; when they do not all
        /// confirm in time it answers 503 `not_replicated` with the order's id (a retry is
        /// refused as a duplicate naming the order while the primary lives)
        HMDP_REDIS_WAIT_TIMEOUT_MS wait_timeout: Duration as Millis = Duration::from_millis(200),
            check between(1, 10_000);
        /// an order still unpaid this long after its grab is closed (status 4) and its unit
        /// returns to the sale. The deadline is the second in the order's id plus this; on
        /// both transports it waits in a Redis sorted set per shard (on RabbitMQ, what earlier
        /// versions put in the delay queue named after it still closes)
        HMDP_ORDER_PAY_TIMEOUT_SECS pay_timeout: Duration as Secs = Duration::from_secs(900),
            check between(1, 7 * 24 * 3600);
        /// the secret the payment gateway signs its notices with (`x-pay-signature`, lower-case
        /// hex HMAC-SHA256 of the raw body); at least 16 characters
        HMDP_PAY_SECRET pay_secret: Option<Secret> = None,
            unset "generated into $HMDP_DATA_DIR/pay-secret", check min_len(16);
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
        /// comments one user may post a day (in `HMDP_TIME_ZONE`); more are refused (429
        /// `comment_quota`) until midnight. Deleting a comment gives nothing back
        HMDP_COMMENT_USER_DAILY_COUNT comment_user_daily_count: u64 = 200, check at_least(1);
        /// the time zone of "today" for sign-in days, daily visitor counts and daily caps (an
        /// IANA name)
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

/// `HMDP_DATABASE_URL` when unset: a SQLite file in the data directory.
fn default_database_url(data_dir: &Path) -> String {
    format!("sqlite://{}/hmdp.db", data_dir.display())
}

/// What the settings whose default depends on another one mean when unset.
impl Config {
    /// The photo upload folder: `HMDP_UPLOAD_DIR`, or `uploads` in the data directory.
    pub fn upload_dir(&self) -> PathBuf {
        self.social
            .upload_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("uploads"))
    }

    /// The Redis URL in effect (the configured one or the default); unused with
    /// `HMDP_REDIS_SENTINELS`.
    pub fn redis_url_or_default(&self) -> &str {
        self.redis_url.as_deref().unwrap_or(DEFAULT_REDIS_URL)
    }

    /// The Sentinels, master name and passwords, when Redis is found through Sentinel (the
    /// configuration's rules guarantee the master name then).
    pub fn redis_sentinel(&self) -> Option<SentinelSpec> {
        let sentinels = self.redis_sentinels.clone()?;
        Some(SentinelSpec {
            sentinels,
            master: self.redis_sentinel_master.clone().unwrap_or_default(),
            sentinel_password: self.redis_sentinel_password.clone(),
            password: self.redis_password.clone(),
        })
    }
}
