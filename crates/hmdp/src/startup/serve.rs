//! `hmdp serve`: the HTTP service, with the order worker inside unless `HMDP_WORKER=false`.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use tokio::net::TcpListener;

use super::{
    admin_token::{settle_admin_token, settle_pay_secret},
    banner::{Banner, RedisFacts},
    components,
    connect::{Redis, open_database},
    failover::{FailoverStats, Follower},
    limits::check_open_files_limit,
    metrics::{Exposed, ServiceStats},
    ops::OpsListener,
    shutdown_signal,
};
use crate::{
    activity::{Activity, Clock},
    auth::{CodeIssuer, SmsSender, sender_for},
    config::Config,
    http::{self, AppState, AppStateInner},
    kv::managed::ManagedRedis,
    order_stream::StreamMetrics,
    social::Social,
    uploads::Uploads,
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
    /// Reconciles the sales after a Redis promotion (Sentinel only).
    follower: Option<Follower>,
    /// What the log opens with once the service runs.
    banner: Banner,
}

impl Application {
    /// Builds the service with the dependencies the configuration asks for.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        let deps = Dependencies::from_config(&config)?;
        Self::build_with(config, deps).await
    }

    /// Builds the service: connects and migrates the database, connects Redis (starting a
    /// managed `redis-server` if so configured), settles the admin token, builds each part and
    /// binds the listener.
    pub async fn build_with(config: Config, deps: Dependencies) -> anyhow::Result<Self> {
        check_open_files_limit(&config);
        let (db, migrated) = open_database(&config).await?;
        let (redis, managed_redis) = Redis::resolve(&config).await?;
        let (admin_token, admin_token_file) = settle_admin_token(&config)?;
        let (pay_secret, pay_secret_generated) = settle_pay_secret(&config)?;
        let locks = redis.locks()?;
        let catalogue = components::catalogue(&config, &db, &redis, &locks).await?;
        let seckill =
            components::serving_seckill(&config, &db, &redis, &locks, managed_redis.is_some())
                .await?;
        let life = components::order_life(&config, &db, &redis, seckill.clone(), pay_secret);
        let worker = components::embedded_worker(&config, &redis, life.clone()).await?;
        let sessions = components::sessions(&config, &redis).await?;
        let social = Social::new(
            db.clone(),
            redis.conn.clone(),
            redis.keys.clone(),
            config.social.clone(),
            catalogue.clone(),
        );
        let activity = Activity::new(
            redis.conn.clone(),
            redis.keys.clone(),
            config.social.clone(),
            Clock::system(),
        );
        let uploads = Uploads::new(
            config.upload_dir(),
            config.static_dir.as_deref(),
            db.clone(),
            redis.conn.clone(),
            redis.keys.clone(),
            config.social.clone(),
        )
        .context("the photo uploads cannot start")?;
        let http_metrics = Arc::new(http::HttpMetrics::default());
        let connections = Arc::new(http::ConnectionStats::default());
        let stream_metrics = StreamMetrics::new(http::health::sale_redis(&config));
        let failover_stats = Arc::new(FailoverStats::for_target(&redis.target));
        let registry = Exposed {
            service: Some(ServiceStats {
                http: &http_metrics,
                seckill: seckill.stats(),
                cache: catalogue.cache(),
                locks: &locks,
                visits: activity.uv_stats(),
            }),
            connections: &connections,
            worker: worker.as_ref(),
            orders: Some(life.stats()),
            streams: &stream_metrics,
            failovers: &failover_stats,
        }
        .registry();
        let follower = Follower::of(&redis, &locks, &seckill, failover_stats);
        let redis_facts = RedisFacts::ask(&config, &redis, managed_redis.as_ref()).await;
        let Redis { conn, keys, .. } = redis;
        let state = AppState::new(AppStateInner {
            catalogue,
            seckill,
            orders: life,
            social,
            activity,
            uploads,
            #[cfg(feature = "test-util")]
            worker: worker.as_ref().map(|w| w.stats().clone()),
            broker: worker
                .as_ref()
                .filter(|w| w.uses_rabbitmq())
                .map(|w| w.amqp_stats().clone()),
            http_metrics,
            metrics: Arc::new(registry),
            stream_metrics,
            limits: Arc::new(http::Limits::new(
                config.rate_limit_ip,
                config.rate_limit_user,
            )),
            sessions,
            codes: CodeIssuer::new(
                conn.clone(),
                keys.clone(),
                config.code.clone(),
                config.sms.hourly_limit,
            ),
            db,
            redis: conn,
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
        let mut banner = Banner::new(format!("hmdp {} serving", env!("CARGO_PKG_VERSION")));
        banner.listening(listener.local_addr().context("the bound address")?);
        if let Some(addr) = metrics_listener.as_ref().and_then(|l| l.local_addr().ok()) {
            banner.line("metrics", format!("http://{addr}/metrics and /health"));
        }
        let config = &state.config;
        banner
            .admin_token(
                admin_token_file
                    .as_ref()
                    .map(|(f, new)| (f.as_path(), *new)),
            )
            .login_codes(config)
            .database(config, &state.db, &migrated)
            .redis(redis_facts)
            .pay_secret(pay_secret_generated.as_deref())
            .settings();
        Ok(Self {
            router: http::app(state.clone()),
            listener,
            metrics_listener,
            state,
            connections,
            managed_redis,
            worker,
            follower,
            banner,
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
    #[cfg(feature = "test-util")]
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` completes, then drains in-flight requests and releases
    /// everything (database pool, managed Redis).
    pub async fn run_until(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        self.banner.log();
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
        let follower = self.follower.map(Follower::start);
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
        drop(follower);
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
