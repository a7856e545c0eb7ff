//! Building and running the service: configuration → database → Redis → HTTP.
//!
//! [`Application::build`] does all the fallible set-up and binds the listener, so tests can
//! start the real service on port 0 and read [`Application::local_addr`] before it runs.

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use std::time::Duration;

use anyhow::Context;
use hmdp_cache::{CacheClient, L1Options, RedisDown};
use hmdp_id::{IdGenerator, SegmentOptions};
use tokio::net::TcpListener;

use crate::{
    auth::{CodeIssuer, SessionStore, SmsSender, sender_for},
    catalogue::Catalogue,
    config::{Config, DEFAULT_REDIS_URL, Secret},
    http::{self, AppState, AppStateInner},
    kv::{
        Keys, RedisConn,
        managed::{ManagedMode, ManagedRedis, answers_ping},
    },
    metrics::{CacheCollector, LockCollector, Registry},
    order_stream::StreamMetrics,
    seckill::{IdMode, Seckill},
    storage::{self, Db},
    worker::OrderWorker,
};

/// Things a deployment (or a test) may swap out.
#[derive(Clone)]
pub struct Dependencies {
    pub sms: Arc<dyn SmsSender>,
}

impl Dependencies {
    /// What the configuration asks for: the SMS sender of `HMDP_SMS` ([`sender_for`], which
    /// refuses login codes in the log on a public address unless chosen on purpose).
    pub fn from_config(config: &Config) -> anyhow::Result<Self> {
        let sms = sender_for(&config.sms, config.listen, config.code.ttl)?;
        Ok(Self { sms })
    }
}

/// A built, bound, not yet running service.
pub struct Application {
    listener: TcpListener,
    /// `HMDP_METRICS_LISTEN`: `/metrics` and `/health` for the scraper.
    metrics_listener: Option<TcpListener>,
    router: axum::Router,
    state: AppState,
    connections: Arc<http::ConnectionStats>,
    managed_redis: Option<ManagedRedis>,
    worker: Option<OrderWorker>,
}

impl Application {
    /// Builds the service with the dependencies the configuration asks for.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        let deps = Dependencies::from_config(&config)?;
        Self::build_with(config, deps).await
    }

    /// Builds the service: connects and migrates the database, connects Redis (starting a
    /// managed `redis-server` if so configured), settles the admin token and binds the
    /// listener.
    pub async fn build_with(config: Config, deps: Dependencies) -> anyhow::Result<Self> {
        check_open_files_limit(&config);
        let db = connect_database(&config).await?;
        let (redis_url, managed_redis) = resolve_redis(&config).await?;
        let redis = RedisConn::connect(&redis_url).await.with_context(|| {
            format!(
                "cannot connect to Redis at {}",
                crate::config::redact_url(&redis_url)
            )
        })?;
        let admin_token = settle_admin_token(&config)?;
        let keys = Keys::new(config.redis_prefix.clone());
        // Pub/sub (lock wake-ups, L1 invalidation) needs a plain client; on a cluster any node
        // will do, because PUBLISH reaches every node.
        let first_node = redis_url
            .split(',')
            .next()
            .unwrap_or(&redis_url)
            .trim()
            .to_owned();
        let subscriber = redis::Client::open(first_node.as_str())?;
        let locks = hmdp_lock::LockClient::builder(redis.clone())
            .subscriber(subscriber.clone())
            .key_prefix(config.redis_prefix.clone())
            .build()
            .context("cannot set up the lock client")?;
        let mut cache = CacheClient::builder(redis.clone())
            .key_prefix(config.redis_prefix.clone())
            .locks(locks.clone())
            .on_redis_down(if config.cache.fallback_concurrency > 0 {
                RedisDown::FallbackToLoader {
                    max_concurrent: config.cache.fallback_concurrency,
                    max_wait: Duration::from_millis(100),
                }
            } else {
                RedisDown::Fail
            });
        if !config.cache.l1_ttl.is_zero() {
            cache = cache
                .l1(
                    L1Options::new(config.cache.l1_capacity, config.cache.l1_ttl),
                    subscriber.clone(),
                    &keys.cache_l1_channel(),
                )
                .await
                .context("cannot subscribe for L1 cache invalidations")?;
        }
        let catalogue = Catalogue::start(
            db.clone(),
            redis.clone(),
            keys.clone(),
            cache.build(),
            &config.cache,
        )
        .await?;
        let ids = order_id_generator(redis.clone(), &config)?;
        let seckill = Seckill::new(
            db.clone(),
            redis.clone(),
            keys.clone(),
            locks.clone(),
            ids,
            config.seckill.clone(),
        );
        let mut seckill = match config.seckill.wait_replicas {
            0 => seckill,
            _ => seckill.with_replica_wait(
                replica_wait(&config, &redis_url, managed_redis.is_some()).await?,
            ),
        }
        .with_publisher(subscriber.clone());
        if seckill.mode() == crate::seckill::SeckillMode::Async {
            seckill
                .remember_refusals(subscriber.clone())
                .await
                .context("cannot subscribe for flash-sale load announcements")?;
            // A service on another shard count than the one recorded in Redis would strand
            // orders and could oversell: refuse to start (the error says how to change it).
            seckill
                .check_shards()
                .await
                .context("the flash sale cannot start")?;
            if crate::kv::orders_at_risk(&redis, config.seckill.wait_replicas).await {
                tracing::warn!(
                    "Redis has no append-only file and HMDP_REDIS_WAIT_REPLICAS is 0: if Redis \
                     restarts, every accepted order not yet written to the database is lost and \
                     its stock sold again; set appendonly yes (appendfsync always loses none) or \
                     HMDP_REDIS_WAIT_REPLICAS"
                );
            }
        }
        let worker_db = if config.seckill.worker {
            Some(worker_database(&config).await?)
        } else {
            None
        };
        let worker = worker_db.map(|worker_db| {
            OrderWorker::new(
                worker_db,
                redis.clone(),
                redis_url.clone(),
                keys.clone(),
                config.seckill.clone(),
                config.seckill.consumer.clone(),
            )
        });
        if let Some(w) = &worker {
            check_broker(w, &config).await?;
        }
        let sessions = SessionStore::new(
            redis.clone(),
            keys.clone(),
            config.session_ttl,
            config.session_max_age,
        )
        .with_cache(
            config.session_cache,
            SESSIONS_IN_MEMORY,
            subscriber.clone(),
            keys.session_channel(),
        )
        .await
        .context("cannot subscribe for session invalidations")?;
        let http_metrics = Arc::new(crate::http::HttpMetrics::default());
        let connections = Arc::new(http::ConnectionStats::default());
        let stream_metrics = StreamMetrics::default();
        let mut registry = Registry::default();
        http_metrics.register(&mut registry);
        connections.register(&mut registry);
        seckill.stats().register(&mut registry);
        registry.register_collector(Box::new(CacheCollector(catalogue.cache().clone())));
        registry.register_collector(Box::new(LockCollector(locks.clone())));
        if let Some(w) = &worker {
            w.stats().register(&mut registry);
            if w.uses_rabbitmq() {
                w.amqp_stats().register(&mut registry);
            }
        }
        stream_metrics.register(&mut registry);
        let social = crate::social::Social::new(
            db.clone(),
            redis.clone(),
            keys.clone(),
            config.social.clone(),
            catalogue.clone(),
        );
        let activity = crate::activity::Activity::new(
            redis.clone(),
            keys.clone(),
            config.social.clone(),
            crate::activity::Clock::system(),
        );
        activity.uv_stats().register(&mut registry);
        let uploads = crate::uploads::Uploads::new(
            config.upload_dir(),
            config.static_dir.as_deref(),
            db.clone(),
            redis.clone(),
            keys.clone(),
            config.social.clone(),
        )
        .context("the photo uploads cannot start")?;
        let state = AppState::new(AppStateInner {
            catalogue,
            seckill,
            social,
            activity,
            uploads,
            worker: worker.as_ref().map(|w| w.stats().clone()),
            broker: worker
                .as_ref()
                .filter(|w| w.uses_rabbitmq())
                .map(|w| w.amqp_stats().clone()),
            http_metrics,
            metrics: Arc::new(registry),
            stream_metrics,
            limits: Arc::new(crate::http::Limits::new(
                config.rate_limit_ip,
                config.rate_limit_user,
            )),
            locks,
            sessions,
            codes: CodeIssuer::new(
                redis.clone(),
                keys.clone(),
                config.code.clone(),
                config.sms.hourly_limit,
            ),
            db,
            redis,
            keys,
            sms: deps.sms,
            admin_token: Arc::new(admin_token),
            config: Arc::new(config),
        });
        let listener = TcpListener::bind(state.config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", state.config.listen))?;
        let metrics_listener = match state.config.metrics_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr} (HMDP_METRICS_LISTEN)"))?,
            ),
            None => None,
        };
        Ok(Self {
            router: http::app(state.clone()),
            listener,
            metrics_listener,
            state,
            connections,
            managed_redis,
            worker,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// The address of the `HMDP_METRICS_LISTEN` listener, when there is one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .map(|l| l.local_addr().expect("a bound listener has an address"))
    }

    /// The shared state (tests reach the database and Redis through it).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` completes, then drains in-flight requests and releases
    /// everything (database pool, managed Redis).
    pub async fn run_until(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        tracing::info!(addr = %self.local_addr(), "hmdp listening");
        let ops = self.metrics_listener.map(|listener| {
            let state = &self.state;
            OpsListener::start(
                listener,
                http::OpsEndpoint {
                    db: state.db.clone(),
                    redis: state.redis.clone(),
                    keys: state.keys.clone(),
                    shards: state.config.seckill.shards,
                    broker: state.broker.clone(),
                    sale_redis: http::health::sale_redis(&state.config),
                    metrics: state.metrics.clone(),
                    stream_metrics: state.stream_metrics.clone(),
                },
                // Its own connection count: the scraper's connections are not the service's.
                http::ServeOptions::new(
                    &state.config,
                    Duration::from_secs(5),
                    Arc::new(http::ConnectionStats::default()),
                ),
            )
        });
        let (stop_worker, worker_stopped) = tokio::sync::oneshot::channel::<()>();
        let worker = self.worker.map(|w| {
            tokio::spawn(w.run_until(async {
                let _ = worker_stopped.await;
            }))
        });
        // Like sets from before the likes table (or from the original) go into it now, not
        // when their note is next opened, so a Redis that loses its data later loses none.
        self.state.social.adopt_likes_in_background();
        // In-flight requests get their own time limit plus a second to finish on shutdown.
        let drain = self.state.config.request_timeout + Duration::from_secs(1);
        let options = http::ServeOptions::new(&self.state.config, drain, self.connections);
        let served = http::serve(self.listener, self.router, shutdown, options).await;
        tracing::info!("http server stopped; finishing the order worker's current batch");
        let _ = stop_worker.send(());
        if let Some(w) = worker {
            let _ = w.await;
        }
        // The scraper sees the final counters until here.
        if let Some(ops) = ops {
            ops.stop().await;
        }
        // Background work of the social half: fan-outs in flight, buffered visits, clean-up.
        self.state.social.shutdown().await;
        self.state.activity.shutdown().await;
        self.state.uploads.shutdown().await;
        let db = self.state.db.clone();
        // Dropping the state stops its background listeners (the L1 invalidation subscription)
        // before a managed Redis goes away, so they do not report a lost connection.
        drop(self.state);
        db.close().await;
        if let Some(redis) = self.managed_redis {
            redis.stop().await;
        }
        served.context("http server failed")
    }

    /// Serves until SIGINT or SIGTERM.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        self.run_until(shutdown_signal()).await
    }
}

/// The order id generator in the configured mode.
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

/// `hmdp reconcile`: checks (and with `repair` fixes) each sale's Redis state against the
/// database and the order streams, on the configured Redis (never a managed one it would start).
pub async fn reconcile(
    config: &Config,
    only: Option<crate::domain::VoucherId>,
    repair: bool,
) -> anyhow::Result<Vec<crate::seckill::SaleCheck>> {
    let db = connect_database(config).await?;
    let url = config.redis_url_or_default();
    let redis = RedisConn::connect(url).await.with_context(|| {
        format!(
            "cannot connect to Redis at {}",
            crate::config::redact_url(url)
        )
    })?;
    let first_node = redis::Client::open(url.split(',').next().unwrap_or(url).trim())?;
    let locks = hmdp_lock::LockClient::builder(redis.clone())
        .subscriber(first_node.clone())
        .key_prefix(config.redis_prefix.clone())
        .build()
        .context("cannot set up the lock client")?;
    let seckill = Seckill::new(
        db,
        redis.clone(),
        Keys::new(config.redis_prefix.clone()),
        locks,
        order_id_generator(redis, config)?,
        config.seckill.clone(),
    )
    // A repair reloads sales: the running instances must hear it.
    .with_publisher(first_node);
    seckill
        .check_shards()
        .await
        .context("cannot read the order streams")?;
    Ok(seckill.reconcile(only, repair).await?)
}

/// Runs only the order worker (`hmdp worker`) until SIGINT or SIGTERM, with its `/metrics` and
/// `/health` on `HMDP_WORKER_LISTEN` when that is set.
pub async fn run_worker(config: Config) -> anyhow::Result<()> {
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
    let db = connect_database(&config).await?;
    let url = config.redis_url_or_default().to_owned();
    let redis = RedisConn::connect(&url).await.with_context(|| {
        format!(
            "cannot connect to Redis at {}",
            crate::config::redact_url(&url)
        )
    })?;
    let keys = Keys::new(config.redis_prefix.clone());
    let worker = OrderWorker::new(
        db.clone(),
        redis.clone(),
        url,
        keys.clone(),
        config.seckill.clone(),
        config.seckill.consumer.clone(),
    );
    // Refuse to start on another shard count than the one recorded: the streams of the other
    // shards would never be drained (README, "Changing HMDP_SECKILL_SHARDS").
    worker
        .check_shards()
        .await
        .context("the order worker cannot start")?;
    check_broker(&worker, &config).await?;
    let endpoint = listener.map(|listener| {
        let stream_metrics = StreamMetrics::default();
        let connections = Arc::new(http::ConnectionStats::default());
        let mut metrics = Registry::default();
        connections.register(&mut metrics);
        worker.stats().register(&mut metrics);
        if worker.uses_rabbitmq() {
            worker.amqp_stats().register(&mut metrics);
        }
        stream_metrics.register(&mut metrics);
        OpsListener::start(
            listener,
            http::OpsEndpoint {
                db: db.clone(),
                redis,
                keys,
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
    db.close().await;
    Ok(())
}

/// The scraper's listener (`HMDP_METRICS_LISTEN`, `HMDP_WORKER_LISTEN`) serving in the
/// background until [`OpsListener::stop`].
struct OpsListener {
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl OpsListener {
    fn start(
        listener: TcpListener,
        endpoint: http::OpsEndpoint,
        options: http::ServeOptions,
    ) -> Self {
        let addr = listener.local_addr().ok();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(http::serve(
            listener,
            http::ops_app(endpoint),
            async {
                let _ = stopped.await;
            },
            options,
        ));
        if let Some(addr) = addr {
            tracing::info!(%addr, "metrics at http://{addr}/metrics");
        }
        Self { stop, server }
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        match self.server.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "the metrics listener ended with an error"),
            Err(e) => tracing::warn!(error = %e, "the metrics listener task failed"),
            Ok(Ok(())) => {}
        }
    }
}

/// With `HMDP_ORDER_TRANSPORT=rabbitmq`, connects once and declares the topology, so a wrong
/// URL, refused credentials or a conflicting queue stop the start with one line.
async fn check_broker(worker: &OrderWorker, config: &Config) -> anyhow::Result<()> {
    if worker.uses_rabbitmq() {
        let url = &config.seckill.amqp_url;
        crate::amqp::check(url).await.with_context(|| {
            format!(
                "cannot use RabbitMQ at {} (HMDP_AMQP_URL)",
                crate::config::redact_url(url)
            )
        })?;
    }
    Ok(())
}

/// Raises the soft limit on open files to the hard limit, and returns `(before, after)`.
///
/// Every connection is a file descriptor, and the usual soft limit (1024) is far below what
/// `HMDP_MAX_CONNECTIONS` allows; the hard limit is what the administrator granted, the soft one
/// only a default for programs that never ask.
pub fn raise_open_files_limit() -> std::io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: setrlimit only reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok((before, limit.rlim_cur))
}

/// Raises the open-files limit ([`raise_open_files_limit`]) and says whether
/// `HMDP_MAX_CONNECTIONS` fits under it.
fn check_open_files_limit(config: &Config) {
    // Descriptors that are not client connections: database pool, Redis, SQLite files, logs.
    const RESERVE: u64 = 256;
    let limit = match raise_open_files_limit() {
        Ok((before, after)) => {
            if before < after {
                tracing::info!(
                    before,
                    after,
                    "raised the open-files limit to its hard limit"
                );
            }
            after
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-files limit");
            return;
        }
    };
    let max = config.max_connections as u64;
    if max > 0 && max + RESERVE > limit {
        tracing::warn!(
            open_files = limit,
            max_connections = max,
            "HMDP_MAX_CONNECTIONS does not leave {RESERVE} of the open-files limit for the rest \
             of the service: with that many connections, accepting may fail (raise the hard \
             limit, e.g. `ulimit -Hn` or systemd's LimitNOFILE, or lower HMDP_MAX_CONNECTIONS)"
        );
    }
}

/// Connects to the configured database and brings its schema up to date.
pub async fn connect_database(config: &Config) -> anyhow::Result<Db> {
    let db = Db::connect(&config.database_url, config.db_max_connections)
        .await
        .with_context(|| {
            format!(
                "cannot open the database {}",
                crate::config::redact_url(&config.database_url)
            )
        })?;
    let report = storage::migrate(&db)
        .await
        .context("database migration failed")?;
    if report.applied.is_empty() {
        tracing::info!(backend = ?db.backend(), "database schema is up to date");
    } else {
        tracing::info!(backend = ?db.backend(), applied = ?report.applied, "database migrated");
    }
    Ok(db)
}

/// The embedded order worker's own pool (one connection per shard loop, one for the RabbitMQ
/// consumer): requests that hold every connection of the service's pool (a flood of costly
/// reads, say) cannot stop orders from being written, and the worker cannot starve them.
async fn worker_database(config: &Config) -> anyhow::Result<Db> {
    Db::connect(&config.database_url, config.seckill.shards + 1)
        .await
        .with_context(|| {
            format!(
                "cannot open the order worker's database {}",
                crate::config::redact_url(&config.database_url)
            )
        })
}

/// Decides which Redis to use, starting a managed one when configured or needed.
/// Sessions an instance trusts from memory at most (`HMDP_SESSION_CACHE_MS`): about 30 MB.
const SESSIONS_IN_MEMORY: u64 = 100_000;

/// The writers of `HMDP_REDIS_WAIT_REPLICAS`: one primary with replicas (the configuration
/// refuses a cluster), so never the managed `redis-server` (it has no replica: every grab would
/// time out). Fewer replicas connected than asked is
/// worth a warning, not a refusal: they may be starting.
async fn replica_wait(
    config: &Config,
    redis_url: &str,
    managed: bool,
) -> anyhow::Result<crate::kv::ReplicaWait> {
    let wanted = config.seckill.wait_replicas;
    if managed {
        anyhow::bail!(
            "HMDP_REDIS_WAIT_REPLICAS={wanted} needs a Redis primary with replicas \
             (HMDP_REDIS_URL); the managed redis-server has none"
        );
    }
    let replicas = crate::kv::ReplicaWait::new(redis_url, wanted, config.seckill.wait_timeout)?;
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

async fn resolve_redis(config: &Config) -> anyhow::Result<(String, Option<ManagedRedis>)> {
    let start_managed = match (config.redis_managed, &config.redis_url) {
        (ManagedMode::Always, _) => true,
        (ManagedMode::Never, _) | (ManagedMode::Auto, Some(_)) => false,
        (ManagedMode::Auto, None) => {
            let up = answers_ping(DEFAULT_REDIS_URL, std::time::Duration::from_secs(1)).await;
            if !up {
                tracing::info!(
                    "no Redis answers at {DEFAULT_REDIS_URL}; starting a managed redis-server"
                );
            }
            !up
        }
    };
    if start_managed {
        // Beside the admin token, mode 600: any local user could otherwise connect and forge
        // a session (`HSET login:token:…`).
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
        Ok((managed.url().to_owned(), Some(managed)))
    } else {
        Ok((config.redis_url_or_default().to_owned(), None))
    }
}

/// The admin token: configured, or read from / generated into `$HMDP_DATA_DIR/admin-token`.
///
/// A generated token is never printed: the log says which file holds it (logs are shipped,
/// kept and read by more people than the data directory).
fn settle_admin_token(config: &Config) -> anyhow::Result<Secret> {
    if let Some(t) = &config.admin_token {
        return Ok(t.clone());
    }
    let path = config.data_dir.join("admin-token");
    let (token, generated) = crate::secret_files::settle(&path, "admin token")?;
    let file = std::fs::canonicalize(&path).unwrap_or(path);
    if generated {
        tracing::warn!(
            file = %file.display(),
            "HMDP_ADMIN_TOKEN is unset: generated an admin token into this file (mode 600); \
             send its content as the x-admin-token header"
        );
    } else {
        tracing::info!(file = %file.display(), "admin token read from file (HMDP_ADMIN_TOKEN unset)");
    }
    Ok(token)
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("SIGINT received; shutting down"),
        _ = term => tracing::info!("SIGTERM received; shutting down"),
    }
}

/// Where the data directory is, for messages.
pub fn data_dir_display(config: &Config) -> PathBuf {
    std::fs::canonicalize(&config.data_dir).unwrap_or_else(|_| config.data_dir.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn an_admin_token_file_readable_by_others_is_restricted() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().to_owned(),
            ..Config::default()
        };
        let path = dir.path().join("admin-token");
        std::fs::write(&path, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let token = settle_admin_token(&config).unwrap();
        assert_eq!(token.expose(), "0123456789abcdef0123");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
