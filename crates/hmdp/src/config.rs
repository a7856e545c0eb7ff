//! Configuration: built-in defaults < optional TOML file (`--config FILE`) < environment.
//!
//! The `HMDP_*` variable names are a contract: scripts, CI and tests outside the code set them, so
//! they never change meaning. Every setting has a default that makes `hmdp` run with no
//! configuration at all (SQLite file under the data directory, Redis on localhost or a managed
//! child `redis-server`).
//!
//! The TOML file uses the same names in lower case without the `HMDP_` prefix
//! (`HMDP_REDIS_URL` → `redis_url`); unknown keys are rejected so typos do not pass silently.

use std::{
    collections::HashMap,
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
    str::FromStr,
    time::Duration,
};

use serde::Deserialize;

/// Errors found while reading the configuration; each names the setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The `--config` file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The `--config` file is not valid TOML or has unknown keys.
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// A value (from the file or the environment) does not parse.
    #[error("invalid value for {name}: {message}")]
    Invalid { name: &'static str, message: String },
}

/// When to start a private `redis-server` child instead of using `redis_url`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
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
/// `fsync` per write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AppendFsync {
    /// `fsync` after every write: nothing acknowledged is lost; slowest.
    Always,
    /// `fsync` once a second (Redis's default): up to a second of writes can be lost.
    Everysec,
    /// Leave flushing to the operating system (typically every 30 s): fastest, least safe.
    No,
}

impl AppendFsync {
    /// The value of Redis's `appendfsync` setting.
    pub fn as_str(self) -> &'static str {
        match self {
            AppendFsync::Always => "always",
            AppendFsync::Everysec => "everysec",
            AppendFsync::No => "no",
        }
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
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

/// Limits on how often and how many login codes a phone can get and try.
#[derive(Debug, Clone)]
pub struct CodePolicy {
    /// How long a code stays valid (the original: 2 minutes).
    pub ttl: Duration,
    /// Minimum time between two codes for one phone.
    pub min_interval: Duration,
    /// Codes per phone per day: the window opens with the phone's first code and lasts 24
    /// hours (a fixed window, not a rolling one).
    pub daily_limit: u32,
    /// Wrong tries after which the code is void.
    pub max_attempts: u32,
    /// `HMDP_CODE_IP_PER_MIN`: code requests per minute from one client IP, in bursts of up to
    /// that many; 0 = off. The per-phone limits cannot stop one client asking for codes for
    /// many different phones (an SMS flood at your expense); this can.
    pub ip_per_min: u32,
}

/// How `GET /shop/{id}` rebuilds a missing or stale entry (`HMDP_SHOP_CACHE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShopCacheStrategy {
    /// Cache-aside with a rebuild mutex (single-flight + distributed lock). The default.
    Mutex,
    /// Logical expiry: never expires in Redis; stale is served while one task rebuilds.
    Logical,
    /// Plain cache-aside with null caching, no lock (the course's first version).
    Aside,
}

/// How flash-sale orders are decided (`HMDP_SECKILL_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SeckillMode {
    /// One Lua script decides in Redis and queues the order on a stream; a worker writes it.
    Async,
    /// The database decides, under a per-user lock (the course's baseline).
    Sync,
}

/// How order ids are drawn (`HMDP_ID_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IdMode {
    /// One `INCR` per id, exactly the original `RedisIdWorker`.
    Compatible,
    /// Blocks of ids reserved with `INCRBY`; most ids need no round trip.
    Segment,
}

/// Flash-sale and order-worker settings.
#[derive(Debug, Clone)]
pub struct SeckillSettings {
    /// `HMDP_SECKILL_MODE`: async | sync.
    pub mode: SeckillMode,
    /// `HMDP_SECKILL_SHARDS`: order streams; vouchers are spread over them by id. On a Redis
    /// Cluster each shard is one hash slot, so more shards spread the load over more nodes.
    pub shards: u32,
    /// `HMDP_WORKER`: run the order worker inside `hmdp serve`.
    pub worker: bool,
    /// `HMDP_WORKER_BATCH`: orders written per database transaction at most.
    pub batch: usize,
    /// `HMDP_WORKER_MAX_DELIVERIES`: an entry that failed this often goes to the dead-letter stream.
    pub max_deliveries: u64,
    /// `HMDP_WORKER_CLAIM_IDLE_MS`: entries pending this long with another consumer are taken over.
    pub claim_idle: Duration,
    /// `HMDP_WORKER_CONSUMER`: this worker's name in the consumer group. A stable name (one
    /// per deployment slot, e.g. a StatefulSet pod name) lets a restarted worker finish its own
    /// pending orders at once; unset, each process gets a fresh name and a dead one's orders
    /// are taken over after `claim_idle`. Two live workers must never share a name.
    pub consumer: Option<String>,
    /// `HMDP_WORKER_LISTEN`: where a standalone `hmdp worker` serves its `/metrics` and
    /// `/health` (e.g. `127.0.0.1:9464`); unset, it opens no port. `hmdp serve` ignores it (its
    /// embedded worker's metrics are on the service's own `/metrics`).
    pub listen: Option<SocketAddr>,
    /// `HMDP_ID_MODE`: compatible | segment.
    pub id_mode: IdMode,
}

/// Cache settings.
#[derive(Debug, Clone)]
pub struct CacheSettings {
    /// `HMDP_SHOP_CACHE`: mutex | logical | aside.
    pub shop_strategy: ShopCacheStrategy,
    /// `HMDP_CACHE_TTL_SECS`: lifetime of cached entries (the original's 30 min).
    pub ttl: Duration,
    /// `HMDP_CACHE_NULL_TTL_SECS`: how long "no such shop" is remembered (the original's 2 min).
    pub null_ttl: Duration,
    /// `HMDP_CACHE_JITTER`: every TTL is spread by ± this ratio (0 to 0.5).
    pub jitter: f64,
    /// `HMDP_CACHE_L1_TTL_MS`: lifetime of the in-process L1 copy; 0 turns L1 off.
    pub l1_ttl: Duration,
    /// `HMDP_CACHE_L1_CAPACITY`: entries in the L1.
    pub l1_capacity: u64,
    /// `HMDP_SHOP_BLOOM`: a Bloom filter of shop ids in front of the shop cache.
    pub bloom: bool,
    /// `HMDP_CACHE_FALLBACK_CONCURRENCY`: with Redis down, at most this many database reads at
    /// once serve cache misses; beyond that, reads answer 503 at once. 0 = always 503.
    pub fallback_concurrency: usize,
}

/// The effective configuration of one `hmdp` process.
///
/// `Debug` prints [`Config::redacted_summary`], so logging a `Config` never leaks a secret.
#[derive(Clone)]
pub struct Config {
    /// `HMDP_LISTEN`: address to serve on.
    pub listen: SocketAddr,
    /// `HMDP_DATABASE_URL`: `sqlite://FILE` or `mysql://…`. Defaults to `sqlite://{data_dir}/hmdp.db`.
    pub database_url: String,
    /// `HMDP_DB_MAX_CONNECTIONS`: database pool size.
    pub db_max_connections: u32,
    /// `HMDP_REDIS_URL`: one `redis://` URL, or several comma-separated for a Redis Cluster.
    /// `None` means "the default", which may be replaced by a managed child (see `redis_managed`).
    pub redis_url: Option<String>,
    /// `HMDP_REDIS_PREFIX`: prepended to every Redis key.
    pub redis_prefix: String,
    /// `HMDP_REDIS_MANAGED`: auto | always | never.
    pub redis_managed: ManagedRedis,
    /// `HMDP_REDIS_APPENDFSYNC`: always | everysec | no, for a managed `redis-server` (a Redis
    /// of your own keeps its own setting).
    pub redis_appendfsync: AppendFsync,
    /// `HMDP_ADMIN_TOKEN`: admin credential; generated and stored under `data_dir` when unset.
    pub admin_token: Option<Secret>,
    /// `HMDP_STATIC_DIR`: a folder served at `/` (e.g. the original front-end pages).
    pub static_dir: Option<PathBuf>,
    /// `HMDP_DATA_DIR`: where the embedded defaults keep their files.
    pub data_dir: PathBuf,
    /// `HMDP_SESSION_TTL_SECS`: sliding session lifetime.
    pub session_ttl: Duration,
    /// `HMDP_SESSION_CACHE_MS`: how long an instance trusts a session it read from Redis
    /// without asking again; 0 (the default) asks Redis on every request, as the original.
    /// See `auth::session` for the trade.
    pub session_cache: Duration,
    /// `HMDP_CODE_TTL_SECS`, `HMDP_CODE_MIN_INTERVAL_SECS`, `HMDP_CODE_DAILY_LIMIT`,
    /// `HMDP_CODE_MAX_ATTEMPTS`, `HMDP_CODE_IP_PER_MIN`.
    pub code: CodePolicy,
    /// Cache settings (`HMDP_SHOP_CACHE`, `HMDP_CACHE_*`, `HMDP_SHOP_BLOOM`).
    pub cache: CacheSettings,
    /// Flash sale and order worker (`HMDP_SECKILL_*`, `HMDP_WORKER*`, `HMDP_ID_MODE`).
    pub seckill: SeckillSettings,
    /// `HMDP_RATE_LIMIT_IP`: requests per second per client IP (bursts of twice that); 0 = off.
    pub rate_limit_ip: u32,
    /// `HMDP_RATE_LIMIT_USER`: requests per second per logged-in user; 0 = off.
    pub rate_limit_user: u32,
    /// `HMDP_BODY_LIMIT_BYTES`: largest accepted request body.
    pub body_limit: usize,
    /// `HMDP_REQUEST_TIMEOUT_MS`: a request taking longer is answered 503.
    pub request_timeout: Duration,
    /// `HMDP_IDLE_TIMEOUT_SECS`: how long a connection may take to send a request head, which
    /// is also how long an idle keep-alive connection stays open.
    pub idle_timeout: Duration,
    /// `HMDP_LOG`: a tracing filter such as `info` or `hmdp=debug` (falls back to `RUST_LOG`).
    pub log_filter: String,
    /// `HMDP_LOG_FORMAT`: text | json.
    pub log_format: LogFormat,
}

/// The default Redis URL, used when `HMDP_REDIS_URL` is unset.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

impl Default for Config {
    fn default() -> Self {
        let data_dir = PathBuf::from("data");
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            database_url: default_database_url(&data_dir),
            db_max_connections: 10,
            redis_url: None,
            redis_prefix: String::new(),
            redis_managed: ManagedRedis::Auto,
            redis_appendfsync: AppendFsync::Everysec,
            admin_token: None,
            static_dir: None,
            data_dir,
            session_ttl: Duration::from_secs(30 * 60),
            session_cache: Duration::ZERO,
            code: CodePolicy {
                ttl: Duration::from_secs(120),
                min_interval: Duration::from_secs(60),
                daily_limit: 10,
                max_attempts: 5,
                ip_per_min: 10,
            },
            cache: CacheSettings {
                shop_strategy: ShopCacheStrategy::Mutex,
                ttl: Duration::from_secs(30 * 60),
                null_ttl: Duration::from_secs(120),
                jitter: 0.1,
                l1_ttl: Duration::from_millis(1000),
                l1_capacity: 10_000,
                bloom: true,
                fallback_concurrency: 8,
            },
            seckill: SeckillSettings {
                mode: SeckillMode::Async,
                shards: 1,
                worker: true,
                batch: 200,
                max_deliveries: 5,
                claim_idle: Duration::from_secs(30),
                consumer: None,
                listen: None,
                id_mode: IdMode::Segment,
            },
            rate_limit_ip: 200,
            rate_limit_user: 20,
            body_limit: 64 * 1024,
            request_timeout: Duration::from_secs(10),
            idle_timeout: crate::http::HEADER_READ_TIMEOUT,
            log_filter: "info".to_owned(),
            log_format: LogFormat::Text,
        }
    }
}

fn default_database_url(data_dir: &Path) -> String {
    format!("sqlite://{}/hmdp.db", data_dir.display())
}

/// The TOML file's shape: every field optional, unknown keys rejected.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    database_url: Option<String>,
    db_max_connections: Option<u32>,
    redis_url: Option<String>,
    redis_prefix: Option<String>,
    redis_managed: Option<ManagedRedis>,
    redis_appendfsync: Option<AppendFsync>,
    admin_token: Option<String>,
    static_dir: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    session_ttl_secs: Option<u64>,
    session_cache_ms: Option<u64>,
    code_ttl_secs: Option<u64>,
    code_min_interval_secs: Option<u64>,
    code_daily_limit: Option<u32>,
    code_max_attempts: Option<u32>,
    code_ip_per_min: Option<u32>,
    shop_cache: Option<ShopCacheStrategy>,
    cache_ttl_secs: Option<u64>,
    cache_null_ttl_secs: Option<u64>,
    cache_jitter: Option<f64>,
    cache_l1_ttl_ms: Option<u64>,
    cache_l1_capacity: Option<u64>,
    shop_bloom: Option<bool>,
    cache_fallback_concurrency: Option<usize>,
    seckill_mode: Option<SeckillMode>,
    seckill_shards: Option<u32>,
    worker: Option<bool>,
    worker_batch: Option<usize>,
    worker_max_deliveries: Option<u64>,
    worker_claim_idle_ms: Option<u64>,
    worker_consumer: Option<String>,
    worker_listen: Option<SocketAddr>,
    id_mode: Option<IdMode>,
    rate_limit_ip: Option<u32>,
    rate_limit_user: Option<u32>,
    body_limit_bytes: Option<usize>,
    request_timeout_ms: Option<u64>,
    idle_timeout_secs: Option<u64>,
    log: Option<String>,
    log_format: Option<LogFormat>,
}

impl Config {
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
        let f = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                toml::from_str::<FileConfig>(&text).map_err(|e| ConfigError::Parse {
                    path: path.to_owned(),
                    message: e.message().to_owned(),
                })?
            }
            None => FileConfig::default(),
        };
        let d = Config::default();
        // Each setting: the environment wins over the file, which wins over the default.
        let s = Sources { env };
        let data_dir = s.get("HMDP_DATA_DIR", f.data_dir)?.unwrap_or(d.data_dir);
        let secs = |name, file: Option<u64>, dflt: Duration| -> Result<Duration, ConfigError> {
            Ok(s.get(name, file)?.map(Duration::from_secs).unwrap_or(dflt))
        };
        let c = Config {
            listen: s.get("HMDP_LISTEN", f.listen)?.unwrap_or(d.listen),
            database_url: s
                .get("HMDP_DATABASE_URL", f.database_url)?
                .unwrap_or_else(|| default_database_url(&data_dir)),
            db_max_connections: s
                .get("HMDP_DB_MAX_CONNECTIONS", f.db_max_connections)?
                .unwrap_or(d.db_max_connections),
            redis_url: s.get("HMDP_REDIS_URL", f.redis_url)?,
            // An explicitly empty prefix is a value, not "unset".
            redis_prefix: env
                .get("HMDP_REDIS_PREFIX")
                .cloned()
                .or(f.redis_prefix)
                .unwrap_or_default(),
            redis_managed: s
                .get("HMDP_REDIS_MANAGED", f.redis_managed)?
                .unwrap_or(d.redis_managed),
            redis_appendfsync: s
                .get("HMDP_REDIS_APPENDFSYNC", f.redis_appendfsync)?
                .unwrap_or(d.redis_appendfsync),
            admin_token: s.get("HMDP_ADMIN_TOKEN", f.admin_token)?.map(Secret::new),
            static_dir: s.get("HMDP_STATIC_DIR", f.static_dir)?,
            session_ttl: secs("HMDP_SESSION_TTL_SECS", f.session_ttl_secs, d.session_ttl)?,
            session_cache: s
                .get("HMDP_SESSION_CACHE_MS", f.session_cache_ms)?
                .map(Duration::from_millis)
                .unwrap_or(d.session_cache),
            code: CodePolicy {
                ttl: secs("HMDP_CODE_TTL_SECS", f.code_ttl_secs, d.code.ttl)?,
                min_interval: secs(
                    "HMDP_CODE_MIN_INTERVAL_SECS",
                    f.code_min_interval_secs,
                    d.code.min_interval,
                )?,
                daily_limit: s
                    .get("HMDP_CODE_DAILY_LIMIT", f.code_daily_limit)?
                    .unwrap_or(d.code.daily_limit),
                max_attempts: s
                    .get("HMDP_CODE_MAX_ATTEMPTS", f.code_max_attempts)?
                    .unwrap_or(d.code.max_attempts),
                ip_per_min: s
                    .get("HMDP_CODE_IP_PER_MIN", f.code_ip_per_min)?
                    .unwrap_or(d.code.ip_per_min),
            },
            cache: CacheSettings {
                shop_strategy: s
                    .get("HMDP_SHOP_CACHE", f.shop_cache)?
                    .unwrap_or(d.cache.shop_strategy),
                ttl: secs("HMDP_CACHE_TTL_SECS", f.cache_ttl_secs, d.cache.ttl)?,
                null_ttl: secs(
                    "HMDP_CACHE_NULL_TTL_SECS",
                    f.cache_null_ttl_secs,
                    d.cache.null_ttl,
                )?,
                jitter: s
                    .get("HMDP_CACHE_JITTER", f.cache_jitter)?
                    .unwrap_or(d.cache.jitter),
                l1_ttl: s
                    .get("HMDP_CACHE_L1_TTL_MS", f.cache_l1_ttl_ms)?
                    .map(Duration::from_millis)
                    .unwrap_or(d.cache.l1_ttl),
                l1_capacity: s
                    .get("HMDP_CACHE_L1_CAPACITY", f.cache_l1_capacity)?
                    .unwrap_or(d.cache.l1_capacity),
                bloom: s
                    .get("HMDP_SHOP_BLOOM", f.shop_bloom)?
                    .unwrap_or(d.cache.bloom),
                fallback_concurrency: s
                    .get(
                        "HMDP_CACHE_FALLBACK_CONCURRENCY",
                        f.cache_fallback_concurrency,
                    )?
                    .unwrap_or(d.cache.fallback_concurrency),
            },
            seckill: SeckillSettings {
                mode: s
                    .get("HMDP_SECKILL_MODE", f.seckill_mode)?
                    .unwrap_or(d.seckill.mode),
                shards: s
                    .get("HMDP_SECKILL_SHARDS", f.seckill_shards)?
                    .unwrap_or(d.seckill.shards),
                worker: s.get("HMDP_WORKER", f.worker)?.unwrap_or(d.seckill.worker),
                batch: s
                    .get("HMDP_WORKER_BATCH", f.worker_batch)?
                    .unwrap_or(d.seckill.batch),
                max_deliveries: s
                    .get("HMDP_WORKER_MAX_DELIVERIES", f.worker_max_deliveries)?
                    .unwrap_or(d.seckill.max_deliveries),
                claim_idle: s
                    .get("HMDP_WORKER_CLAIM_IDLE_MS", f.worker_claim_idle_ms)?
                    .map(Duration::from_millis)
                    .unwrap_or(d.seckill.claim_idle),
                consumer: s
                    .get("HMDP_WORKER_CONSUMER", f.worker_consumer)?
                    .map(|c: String| c.trim().to_owned())
                    .filter(|c| !c.is_empty()),
                listen: s.get("HMDP_WORKER_LISTEN", f.worker_listen)?,
                id_mode: s
                    .get("HMDP_ID_MODE", f.id_mode)?
                    .unwrap_or(d.seckill.id_mode),
            },
            rate_limit_ip: s
                .get("HMDP_RATE_LIMIT_IP", f.rate_limit_ip)?
                .unwrap_or(d.rate_limit_ip),
            rate_limit_user: s
                .get("HMDP_RATE_LIMIT_USER", f.rate_limit_user)?
                .unwrap_or(d.rate_limit_user),
            body_limit: s
                .get("HMDP_BODY_LIMIT_BYTES", f.body_limit_bytes)?
                .unwrap_or(d.body_limit),
            request_timeout: s
                .get("HMDP_REQUEST_TIMEOUT_MS", f.request_timeout_ms)?
                .map(Duration::from_millis)
                .unwrap_or(d.request_timeout),
            idle_timeout: s
                .get("HMDP_IDLE_TIMEOUT_SECS", f.idle_timeout_secs)?
                .map(Duration::from_secs)
                .unwrap_or(d.idle_timeout),
            log_filter: s
                .get("HMDP_LOG", f.log)?
                .or_else(|| {
                    env.get("RUST_LOG")
                        .filter(|v| !v.trim().is_empty())
                        .cloned()
                })
                .unwrap_or(d.log_filter),
            log_format: s
                .get("HMDP_LOG_FORMAT", f.log_format)?
                .unwrap_or(d.log_format),
            data_dir,
        };
        c.check()?;
        Ok(c)
    }

    /// Rejects combinations that cannot work, naming the setting.
    fn check(&self) -> Result<(), ConfigError> {
        if self.db_max_connections == 0 {
            return Err(invalid("HMDP_DB_MAX_CONNECTIONS", "must be at least 1"));
        }
        if self.redis_prefix.contains(['{', '}']) {
            // Keys derive their Redis Cluster hash tags from their own parts; braces in the prefix
            // would silently move every key into one slot.
            return Err(invalid("HMDP_REDIS_PREFIX", "must not contain '{' or '}'"));
        }
        if self
            .admin_token
            .as_ref()
            .is_some_and(|t| t.expose().len() < 16)
        {
            return Err(invalid(
                "HMDP_ADMIN_TOKEN",
                "must be at least 16 characters long",
            ));
        }
        if self.session_ttl.is_zero() {
            return Err(invalid("HMDP_SESSION_TTL_SECS", "must be at least 1"));
        }
        // A session trusted longer than it lives could outlast its expiry by more than a blink.
        if self.session_cache > Duration::from_secs(60) || self.session_cache >= self.session_ttl {
            return Err(invalid(
                "HMDP_SESSION_CACHE_MS",
                "must be at most 60000 and shorter than the session TTL",
            ));
        }
        if self.code.ttl.is_zero() || self.code.daily_limit == 0 || self.code.max_attempts == 0 {
            return Err(invalid(
                "HMDP_CODE_*",
                "code TTL, daily limit and max attempts must be at least 1",
            ));
        }
        if self.request_timeout.is_zero() {
            return Err(invalid("HMDP_REQUEST_TIMEOUT_MS", "must be at least 1"));
        }
        if self.idle_timeout.is_zero() {
            return Err(invalid("HMDP_IDLE_TIMEOUT_SECS", "must be at least 1"));
        }
        if !(0.0..=0.5).contains(&self.cache.jitter) {
            return Err(invalid("HMDP_CACHE_JITTER", "must be between 0 and 0.5"));
        }
        if self.cache.ttl.is_zero() || self.cache.null_ttl.is_zero() {
            return Err(invalid(
                "HMDP_CACHE_TTL_SECS",
                "cache TTLs must be at least 1 second",
            ));
        }
        if self.seckill.shards == 0 || self.seckill.shards > 1024 {
            return Err(invalid("HMDP_SECKILL_SHARDS", "must be between 1 and 1024"));
        }
        if self.seckill.batch == 0 || self.seckill.batch > 5000 {
            return Err(invalid("HMDP_WORKER_BATCH", "must be between 1 and 5000"));
        }
        if self.seckill.max_deliveries == 0 {
            return Err(invalid("HMDP_WORKER_MAX_DELIVERIES", "must be at least 1"));
        }
        Ok(())
    }

    /// The Redis URL in effect (the configured one or the default).
    pub fn redis_url_or_default(&self) -> &str {
        self.redis_url.as_deref().unwrap_or(DEFAULT_REDIS_URL)
    }

    /// A one-line summary for the start-up log, with secrets and passwords redacted.
    pub fn redacted_summary(&self) -> String {
        format!(
            "listen={} database_url={} redis_url={} redis_prefix={:?} redis_managed={:?} \
             redis_appendfsync={} admin_token={} static_dir={} data_dir={} session_ttl={}s session_cache={}ms \
             code_ttl={}s code_min_interval={}s code_daily_limit={} code_max_attempts={} \
             code_ip_per_min={}/min body_limit={}B \
             request_timeout={}ms idle_timeout={}s db_max_connections={} shop_cache={:?} cache_ttl={}s \
             cache_null_ttl={}s cache_jitter={} l1_ttl={}ms bloom={} fallback_concurrency={} \
             seckill_mode={:?} seckill_shards={} worker={} worker_batch={} worker_consumer={} worker_listen={} id_mode={:?} \
             rate_limit_ip={}/s rate_limit_user={}/s",
            self.listen,
            redact_url(&self.database_url),
            self.redis_url
                .as_deref()
                .map(redact_url)
                .unwrap_or_else(|| format!("{DEFAULT_REDIS_URL} (default)")),
            self.redis_prefix,
            self.redis_managed,
            self.redis_appendfsync.as_str(),
            if self.admin_token.is_some() {
                "set"
            } else {
                "generated"
            },
            self.static_dir
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "-".into()),
            self.data_dir.display(),
            self.session_ttl.as_secs(),
            self.session_cache.as_millis(),
            self.code.ttl.as_secs(),
            self.code.min_interval.as_secs(),
            self.code.daily_limit,
            self.code.max_attempts,
            self.code.ip_per_min,
            self.body_limit,
            self.request_timeout.as_millis(),
            self.idle_timeout.as_secs(),
            self.db_max_connections,
            self.cache.shop_strategy,
            self.cache.ttl.as_secs(),
            self.cache.null_ttl.as_secs(),
            self.cache.jitter,
            self.cache.l1_ttl.as_millis(),
            self.cache.bloom,
            self.cache.fallback_concurrency,
            self.seckill.mode,
            self.seckill.shards,
            self.seckill.worker,
            self.seckill.batch,
            self.seckill.consumer.as_deref().unwrap_or("(random)"),
            self.seckill
                .listen
                .map(|a| a.to_string())
                .unwrap_or_else(|| "-".into()),
            self.seckill.id_mode,
            self.rate_limit_ip,
            self.rate_limit_user,
        )
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Config {{ {} }}", self.redacted_summary())
    }
}

/// Reads one setting from the environment, else takes the file's value.
struct Sources<'a> {
    env: &'a HashMap<String, String>,
}

impl Sources<'_> {
    fn get<T: FromStr>(&self, name: &'static str, file: Option<T>) -> Result<Option<T>, ConfigError>
    where
        T::Err: fmt::Display,
    {
        match self.env.get(name).filter(|v| !v.trim().is_empty()) {
            Some(v) => parse_value(name, v).map(Some),
            None => Ok(file),
        }
    }
}

macro_rules! from_str_lowercase {
    ($ty:ty { $($text:literal => $variant:expr),* $(,)? }) => {
        impl FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s.to_ascii_lowercase().as_str() {
                    $($text => Ok($variant),)*
                    _ => Err(format!("expected one of: {}", [$($text),*].join(", "))),
                }
            }
        }
    };
}

from_str_lowercase!(ManagedRedis { "auto" => ManagedRedis::Auto, "always" => ManagedRedis::Always, "never" => ManagedRedis::Never });
from_str_lowercase!(AppendFsync {
    "always" => AppendFsync::Always,
    "everysec" => AppendFsync::Everysec,
    "no" => AppendFsync::No,
});
from_str_lowercase!(LogFormat { "text" => LogFormat::Text, "json" => LogFormat::Json });
from_str_lowercase!(SeckillMode { "async" => SeckillMode::Async, "sync" => SeckillMode::Sync });
from_str_lowercase!(IdMode { "compatible" => IdMode::Compatible, "segment" => IdMode::Segment });
from_str_lowercase!(ShopCacheStrategy {
    "mutex" => ShopCacheStrategy::Mutex,
    "logical" => ShopCacheStrategy::Logical,
    "aside" => ShopCacheStrategy::Aside,
});

fn invalid(name: &'static str, message: &str) -> ConfigError {
    ConfigError::Invalid {
        name,
        message: message.to_owned(),
    }
}

fn parse_value<T: std::str::FromStr>(name: &'static str, v: &str) -> Result<T, ConfigError>
where
    T::Err: fmt::Display,
{
    v.trim().parse().map_err(|e: T::Err| ConfigError::Invalid {
        name,
        message: format!("{v:?}: {e}"),
    })
}

/// Replaces the password of every `scheme://user:password@host` part with `***`.
pub fn redact_url(url: &str) -> String {
    url.split(',')
        .map(|part| {
            let Some(scheme_end) = part.find("://") else {
                return part.to_owned();
            };
            let rest = &part[scheme_end + 3..];
            let authority_end = rest.find('/').unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => {
                    let userinfo = &rest[..at];
                    let user = userinfo.split(':').next().unwrap_or("");
                    let masked = if userinfo.contains(':') {
                        format!("{user}:***")
                    } else {
                        user.to_owned()
                    };
                    format!("{}{}{}", &part[..scheme_end + 3], masked, &rest[at..])
                }
                None => part.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
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
        let c = Config::from_sources(None, &env(&[("HMDP_CODE_IP_PER_MIN", "0")])).unwrap();
        assert_eq!(c.code.ip_per_min, 0, "0 turns the per-IP code quota off");
        assert!(c.redacted_summary().contains("code_ip_per_min=0/min"));
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
        assert!(c.redacted_summary().contains("worker_consumer=(random)"));
        let c = Config::from_sources(None, &env(&[("HMDP_WORKER_CONSUMER", " pod-1 ")])).unwrap();
        assert_eq!(c.seckill.consumer.as_deref(), Some("pod-1"));
        let c = Config::from_sources(None, &env(&[("HMDP_WORKER_CONSUMER", "  ")])).unwrap();
        assert_eq!(c.seckill.consumer, None);
    }

    #[test]
    fn the_worker_listener_is_off_unless_set() {
        let c = Config::from_sources(None, &env(&[])).unwrap();
        assert_eq!(c.seckill.listen, None);
        assert!(c.redacted_summary().contains("worker_listen=-"));
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
    fn the_session_cache_is_off_by_default_and_bounded() {
        let c = Config::from_sources(None, &env(&[])).unwrap();
        assert_eq!(c.session_cache, Duration::ZERO);
        assert!(c.redacted_summary().contains("session_cache=0ms"));
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
            ]),
        )
        .unwrap();
        let shown = format!("{c:?} {}", c.redacted_summary());
        assert!(!shown.contains("super-secret-admin-token"));
        assert!(!shown.contains("hunter2"));
        assert!(shown.contains("mysql://root:***@db:3306/hmdp"));
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
}
