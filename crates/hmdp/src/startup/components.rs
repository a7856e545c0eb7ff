//! The service's parts, each built from its settings: the shop catalogue behind its cache, the
//! flash sale, the order worker, the sessions. The processes compose these; none of them reads
//! the settings a part is made from.

use std::time::Duration;

use anyhow::Context;
use hmdp_cache::{CacheClient, L1Options, RedisDown};
use hmdp_id::{IdGenerator, SegmentOptions};
use hmdp_lock::LockClient;

use super::connect::{Redis, worker_database};
use crate::{
    auth::SessionStore,
    catalogue::Catalogue,
    config::{Config, IdMode, SeckillMode, Secret, redact_url},
    kv::{RedisConn, RedisTarget, ReplicaWait},
    order_life::OrderLife,
    seckill::Seckill,
    storage::Db,
    worker::OrderWorker,
};

/// Sessions an instance trusts from memory at most (`HMDP_SESSION_CACHE_MS`): about 30 MB.
const SESSIONS_IN_MEMORY: u64 = 100_000;

/// The order id generator in the configured mode (`HMDP_ID_MODE`).
pub fn order_id_generator(
    redis: RedisConn,
    config: &Config,
) -> anyhow::Result<IdGenerator<RedisConn>> {
    let builder = IdGenerator::builder(redis, "order").key_prefix(config.redis_prefix.clone());
    let builder = match config.seckill.id_mode {
        IdMode::Compatible => builder.compatible(),
        IdMode::Segment => builder.segment(SegmentOptions::new()),
    };
    builder
        .build()
        .context("cannot set up the order id generator")
}

/// Shops and shop types behind the shop cache (`HMDP_SHOP_CACHE`, `HMDP_CACHE_*`,
/// `HMDP_SHOP_BLOOM`).
pub(super) async fn catalogue(
    config: &Config,
    db: &Db,
    redis: &Redis,
    locks: &LockClient<RedisConn>,
) -> anyhow::Result<Catalogue> {
    let settings = &config.cache;
    let mut cache = CacheClient::builder(redis.conn.clone())
        .key_prefix(config.redis_prefix.clone())
        .locks(locks.clone())
        .on_redis_down(if settings.fallback_concurrency > 0 {
            RedisDown::FallbackToLoader {
                max_concurrent: settings.fallback_concurrency,
                max_wait: Duration::from_millis(100),
            }
        } else {
            RedisDown::Fail
        });
    if !settings.l1_ttl.is_zero() {
        cache = cache
            .l1(
                L1Options::new(settings.l1_capacity, settings.l1_ttl),
                redis.target.clone(),
                &redis.keys.cache_l1_channel(),
            )
            .await
            .context("cannot subscribe for L1 cache invalidations")?;
    }
    let catalogue = Catalogue::start(
        db.clone(),
        redis.conn.clone(),
        redis.keys.clone(),
        cache.build(),
        settings,
    )
    .await?;
    Ok(catalogue)
}

/// The flash sale (`HMDP_SECKILL_*`, `HMDP_ID_MODE`), announcing its sale loads to the other
/// instances (a repair by `hmdp reconcile` reloads sales: the running instances must hear it).
pub(super) fn seckill(
    config: &Config,
    db: &Db,
    redis: &Redis,
    locks: &LockClient<RedisConn>,
) -> anyhow::Result<Seckill> {
    let ids = order_id_generator(redis.conn.clone(), config)?;
    let seckill = Seckill::new(
        db.clone(),
        redis.conn.clone(),
        redis.keys.clone(),
        locks.clone(),
        ids,
        config.seckill.clone(),
    );
    // On a cluster, PUBLISH counts the subscribers of one node only: announce on the node
    // the instances subscribe through. Elsewhere the shared connection is that node.
    Ok(if redis.target.is_cluster() {
        seckill.with_publisher(redis.target.client()?)
    } else {
        seckill
    })
}

/// The flash sale of `hmdp serve`, which takes orders: waiting for replicas
/// (`HMDP_REDIS_WAIT_REPLICAS`), repeating refusals from memory, and in `async` mode refusing
/// to start on another shard count than the recorded one.
pub(super) async fn serving_seckill(
    config: &Config,
    db: &Db,
    redis: &Redis,
    locks: &LockClient<RedisConn>,
    managed: bool,
) -> anyhow::Result<Seckill> {
    let mut seckill = seckill(config, db, redis, locks)?;
    if config.seckill.wait_replicas > 0 {
        seckill = seckill.with_replica_wait(replica_wait(config, &redis.target, managed).await?);
    }
    if seckill.mode() == SeckillMode::Async {
        seckill
            .remember_refusals(redis.target.clone())
            .await
            .context("cannot subscribe for flash-sale load announcements")?;
        // A service on another shard count than the one recorded in Redis would strand
        // orders and could oversell: refuse to start (the error says how to change it).
        seckill
            .check_shards()
            .await
            .context("the flash sale cannot start")?;
    }
    Ok(seckill)
}

/// The writers of `HMDP_REDIS_WAIT_REPLICAS`: one primary with replicas (the configuration
/// refuses a cluster), so never the managed `redis-server` (it has no replica: every grab would
/// time out). Fewer replicas connected than asked is worth a warning, not a refusal: they may
/// be starting.
async fn replica_wait(
    config: &Config,
    target: &RedisTarget,
    managed: bool,
) -> anyhow::Result<ReplicaWait> {
    let wanted = config.seckill.wait_replicas;
    if managed {
        anyhow::bail!(
            "HMDP_REDIS_WAIT_REPLICAS={wanted} needs a Redis primary with replicas \
             (HMDP_REDIS_URL or HMDP_REDIS_SENTINELS); the managed redis-server has none"
        );
    }
    let replicas = ReplicaWait::new(target.clone(), wanted, config.seckill.wait_timeout)?;
    match replicas.connected_replicas().await {
        Ok(n) if n >= wanted => {}
        Ok(n) => tracing::warn!(
            connected = n,
            wanted,
            "fewer Redis replicas connected than HMDP_REDIS_WAIT_REPLICAS: accepted grabs answer \
             503 not_replicated until they are"
        ),
        Err(e) => tracing::warn!(error = %e, "cannot read the Redis replication state"),
    }
    Ok(replicas)
}

/// The order life cycle after the grab (`HMDP_ORDER_PAY_TIMEOUT_SECS`, `HMDP_PAY_SECRET`),
/// giving units back through `seckill`.
pub(super) fn order_life(
    config: &Config,
    db: &Db,
    redis: &Redis,
    seckill: Seckill,
    pay_secret: Secret,
) -> OrderLife {
    OrderLife::new(
        db.clone(),
        redis.conn.clone(),
        redis.keys.clone(),
        seckill,
        config.seckill.pay_timeout,
        config.seckill.shards,
        pay_secret,
    )
}

/// The order worker (`HMDP_WORKER*`, `HMDP_ORDER_TRANSPORT`, `HMDP_AMQP_*`) writing with `db`,
/// closing unpaid orders through `life`.
pub(super) fn order_worker(config: &Config, db: Db, redis: &Redis, life: OrderLife) -> OrderWorker {
    OrderWorker::new(
        db,
        redis.conn.clone(),
        redis.target.clone(),
        redis.keys.clone(),
        config.seckill.clone(),
        config.seckill.consumer.clone(),
    )
    .with_life(life)
}

/// The order worker inside `hmdp serve` (`HMDP_WORKER`), on a pool of its own, its broker
/// checked.
pub(super) async fn embedded_worker(
    config: &Config,
    redis: &Redis,
    life: OrderLife,
) -> anyhow::Result<Option<OrderWorker>> {
    if !config.seckill.worker {
        return Ok(None);
    }
    let worker = order_worker(config, worker_database(config).await?, redis, life);
    check_broker(&worker, config).await?;
    Ok(Some(worker))
}

/// With `HMDP_ORDER_TRANSPORT=rabbitmq`, connects once and declares the topology, so a wrong
/// URL, refused credentials or a conflicting queue stop the start with one line.
pub(super) async fn check_broker(worker: &OrderWorker, config: &Config) -> anyhow::Result<()> {
    if worker.uses_rabbitmq() {
        let url = &config.seckill.amqp_url;
        crate::amqp::check(url, config.seckill.pay_timeout)
            .await
            .with_context(|| {
                format!("cannot use RabbitMQ at {} (HMDP_AMQP_URL)", redact_url(url))
            })?;
    }
    Ok(())
}

/// The sessions (`HMDP_SESSION_*`), trusted from memory for `HMDP_SESSION_CACHE_MS`; a logout
/// reaches every instance by pub/sub.
pub(super) async fn sessions(config: &Config, redis: &Redis) -> anyhow::Result<SessionStore> {
    SessionStore::new(
        redis.conn.clone(),
        redis.keys.clone(),
        config.session_ttl,
        config.session_max_age,
    )
    .with_cache(
        config.session_cache,
        SESSIONS_IN_MEMORY,
        redis.target.clone(),
        redis.keys.session_channel(),
    )
    .await
    .context("cannot subscribe for session invalidations")
}
