//! Reaching the stores, each in one place: the database (brought up to date), and Redis (the
//! configured one, or a managed `redis-server` that `hmdp serve` starts when asked or needed).

use anyhow::Context;
use hmdp_lock::LockClient;

use crate::{
    config::{Config, DEFAULT_REDIS_URL, ManagedMode, redact_url},
    kv::{
        Keys, RedisConn, RedisTarget, SentinelPrimary,
        managed::{ManagedRedis, answers_ping},
    },
    storage::{self, Db, MigrationReport},
};

/// Connects to the configured database and brings its schema up to date.
pub(crate) async fn connect_database(config: &Config) -> anyhow::Result<Db> {
    let (db, report) = open_database(config).await?;
    let applied = report.applied;
    if applied.is_empty() {
        tracing::info!(backend = ?db.backend(), "database schema is up to date");
    } else {
        tracing::info!(backend = ?db.backend(), ?applied, "database migrated");
    }
    Ok(db)
}

/// [`connect_database`] for a process whose start-up banner tells what the migrations did
/// instead of lines of their own.
pub(super) async fn open_database(config: &Config) -> anyhow::Result<(Db, MigrationReport)> {
    let db = Db::connect(&config.database_url, config.db_max_connections)
        .await
        .with_context(|| {
            format!(
                "cannot open the database {}",
                redact_url(&config.database_url)
            )
        })?;
    let report = storage::migrate(&db)
        .await
        .context("database migration failed")?;
    tracing::debug!(backend = ?db.backend(), applied = ?report.applied, "database schema up to date");
    Ok((db, report))
}

/// The embedded order worker's own pool (one connection per shard loop, one for the RabbitMQ
/// consumer): requests that hold every connection of the service's pool (a flood of costly
/// reads, say) cannot stop orders from being written, and the worker cannot starve them.
pub(super) async fn worker_database(config: &Config) -> anyhow::Result<Db> {
    Db::connect(&config.database_url, config.seckill.shards + 1)
        .await
        .with_context(|| {
            format!(
                "cannot open the order worker's database {}",
                redact_url(&config.database_url)
            )
        })
}

/// A process's Redis: where it is (for the connections that cannot be shared: the worker's
/// blocking reads, the replica waits, pub/sub), the shared connection, and the key names.
#[derive(Clone)]
pub(super) struct Redis {
    pub target: RedisTarget,
    pub conn: RedisConn,
    pub keys: Keys,
}

impl Redis {
    /// The configured Redis (`HMDP_REDIS_SENTINELS`, else `HMDP_REDIS_URL` or the default);
    /// never starts one.
    pub(super) async fn configured(config: &Config) -> anyhow::Result<Self> {
        let target = match config.redis_sentinel() {
            Some(spec) => {
                let what = format!(
                    "master `{}` of the Redis Sentinels {}",
                    spec.master, spec.sentinels
                );
                let primary = SentinelPrimary::discover(spec)
                    .await
                    .with_context(|| format!("cannot find the Redis primary: {what}"))?;
                tracing::debug!(primary = %primary.address(), "Redis primary named by the Sentinels: {what}");
                RedisTarget::Sentinel(primary)
            }
            None => RedisTarget::from_url(config.redis_url_or_default()),
        };
        Self::connect(target, config).await
    }

    /// The Redis of `hmdp serve`: a managed `redis-server` when `HMDP_REDIS_MANAGED` asks for
    /// one or (`auto`) nothing answers at the default URL, else the configured one.
    pub(super) async fn resolve(config: &Config) -> anyhow::Result<(Self, Option<ManagedRedis>)> {
        let managed = start_managed(config).await?;
        let redis = match &managed {
            Some(managed) => Self::connect(RedisTarget::from_url(managed.url()), config).await?,
            None => Self::configured(config).await?,
        };
        Ok((redis, managed))
    }

    async fn connect(target: RedisTarget, config: &Config) -> anyhow::Result<Self> {
        let conn = target
            .connect()
            .await
            .with_context(|| format!("cannot connect to Redis at {}", target.describe()))?;
        Ok(Self {
            conn,
            target,
            keys: Keys::new(config.redis_prefix.clone()),
        })
    }

    /// The distributed locks, waiting for a release by pub/sub.
    pub(super) fn locks(&self) -> anyhow::Result<LockClient<RedisConn>> {
        LockClient::builder(self.conn.clone())
            .subscriber(self.target.clone())
            .key_prefix(self.keys.prefix())
            .build()
            .context("cannot set up the lock client")
    }
}

/// Starts a managed `redis-server` when the configuration asks for one or needs it.
async fn start_managed(config: &Config) -> anyhow::Result<Option<ManagedRedis>> {
    if config.redis_sentinels.is_some() {
        return Ok(None);
    }
    let start = match (config.redis_managed, &config.redis_url) {
        (ManagedMode::Always, _) => true,
        (ManagedMode::Never, _) | (ManagedMode::Auto, Some(_)) => false,
        (ManagedMode::Auto, None) => {
            let up = answers_ping(DEFAULT_REDIS_URL, std::time::Duration::from_secs(1)).await;
            if !up {
                tracing::debug!(
                    "no Redis answers at {DEFAULT_REDIS_URL}; starting a managed redis-server"
                );
            }
            !up
        }
    };
    if !start {
        return Ok(None);
    }
    // Beside the admin token, mode 600: any local user could otherwise connect and forge a
    // session (`HSET login:token:…`).
    let (password, _) = crate::secret_files::settle(
        &config.data_dir.join("redis-password"),
        "managed Redis password",
    )?;
    let managed = ManagedRedis::start_with(
        &config.data_dir.join("redis"),
        config.redis_appendfsync,
        &password,
    )
    .await?;
    Ok(Some(managed))
}
