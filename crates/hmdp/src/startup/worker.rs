//! `hmdp worker`: the order worker alone, with its `/metrics` and `/health` on
//! `HMDP_WORKER_LISTEN` when that is set.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use tokio::net::TcpListener;

use super::{
    admin_token::settle_pay_secret,
    banner::{Banner, RedisFacts},
    components,
    connect::{Redis, open_database},
    failover::{FailoverStats, Follower},
    metrics::Exposed,
    ops::OpsListener,
    shutdown_signal,
};
use crate::{config::Config, http, order_stream::StreamMetrics};

/// Runs only the order worker (`hmdp worker`) until SIGINT or SIGTERM, with its `/metrics` and
/// `/health` on `HMDP_WORKER_LISTEN` when that is set.
pub(crate) async fn run_worker(config: Config) -> anyhow::Result<()> {
    let listener = match config.seckill.listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (HMDP_WORKER_LISTEN)"))?,
        ),
        None => None,
    };
    run_worker_with(config, listener, shutdown_signal()).await
}

/// [`run_worker`] with the listener and the shutdown signal given: what tests drive.
///
/// The listener keeps answering until the worker has finished its last batch, so a scrape
/// during shutdown still sees the final counters.
pub async fn run_worker_with(
    config: Config,
    listener: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let (db, migrated) = open_database(&config).await?;
    let redis = Redis::configured(&config).await?;
    let locks = redis.locks()?;
    let seckill = components::seckill(&config, &db, &redis, &locks)?;
    // On Sentinel this process follows the primary too, and may be the one that reconciles.
    let failover_stats = Arc::new(FailoverStats::for_target(&redis.target));
    let follower =
        Follower::of(&redis, &locks, &seckill, failover_stats.clone()).map(Follower::start);
    let (pay_secret, pay_secret_generated) = settle_pay_secret(&config)?;
    let life = components::order_life(&config, &db, &redis, seckill, pay_secret);
    let worker = components::order_worker(&config, db.clone(), &redis, life.clone());
    // Refuse to start on another shard count than the one recorded: the streams of the other
    // shards would never be drained (docs/internals/flash-sale.md, "Changing HMDP_SECKILL_SHARDS").
    worker
        .check_shards()
        .await
        .context("the order worker cannot start")?;
    components::check_broker(&worker, &config).await?;
    let mut banner = Banner::new(format!("hmdp {} worker", env!("CARGO_PKG_VERSION")));
    banner.line(
        "orders",
        format!(
            "from {} shard(s) into the database (HMDP_ORDER_TRANSPORT={})",
            config.seckill.shards, config.seckill.transport
        ),
    );
    if let Some(addr) = listener.as_ref().and_then(|l| l.local_addr().ok()) {
        banner.line("metrics", format!("http://{addr}/metrics and /health"));
    }
    banner
        .database(&config, &db, &migrated)
        .redis(RedisFacts::ask(&config, &redis, None).await)
        .pay_secret(pay_secret_generated.as_deref())
        .settings()
        .log();
    let endpoint = listener.map(|listener| {
        let stream_metrics = StreamMetrics::new(http::health::sale_redis(&config));
        let connections = Arc::new(http::ConnectionStats::default());
        let metrics = Exposed {
            service: None,
            connections: &connections,
            worker: Some(&worker),
            orders: Some(life.stats()),
            streams: &stream_metrics,
            failovers: &failover_stats,
        }
        .registry();
        OpsListener::start(
            listener,
            http::OpsEndpoint {
                db: db.clone(),
                redis: redis.conn,
                keys: redis.keys,
                shards: config.seckill.shards,
                broker: worker.uses_rabbitmq().then(|| worker.amqp_stats().clone()),
                sale_redis: http::health::sale_redis(&config),
                metrics: Arc::new(metrics),
                stream_metrics,
            },
            http::ServeOptions::new(&config, Duration::from_secs(5), connections),
        )
    });
    worker.run_until(shutdown).await;
    if let Some(endpoint) = endpoint {
        endpoint.stop().await;
    }
    drop(follower);
    db.close().await;
    Ok(())
}
