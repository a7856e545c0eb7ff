//! The service itself, in this process, for the `hmdp` versions: `hmdp::Application` built on
//! port 0, its Redis keys under the lab's prefix, its embedded order worker running. The sale
//! is created through the admin route, as an operator would; buyers go through the service's
//! `Seckill::grab`, what the order route runs; the worker writes the orders.
//!
//! Its database is its own, beside the lab's ([`database_url`]): the service's migrations add
//! the unique key on `(user_id, voucher_id)`, which must not reach the lab's tables, where its
//! absence is what lets the course's races show.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use hmdp::{
    Application, Config, Dependencies,
    config::{ManagedMode, Secret},
    testing::{
        FlashSale,
        auth::CapturingSms,
        domain::{StockBuckets, UserId, VoucherId},
        kv::{Keys, RedisConn},
        seckill::{Seckill, voucher_hash},
    },
};
use sqlx::{AnyPool, any::AnyPoolOptions};

use crate::{Lab, lab};

/// How long the worker may take to write the accepted orders.
const WRITE_PATIENCE: Duration = Duration::from_secs(60);

/// The service's database beside the lab's `lab_url`: `<file>-hmdp.db` next to a SQLite file,
/// `<database>_hmdp` on the same MySQL server.
pub fn database_url(lab_url: &str) -> anyhow::Result<String> {
    if let Some(rest) = lab_url.strip_prefix("sqlite:") {
        let path = rest.trim_start_matches("//");
        let path = std::path::Path::new(path.split('?').next().unwrap_or(path));
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .context("a SQLite URL for the lab names a file")?;
        Ok(format!(
            "sqlite://{}",
            path.with_file_name(format!("{stem}-hmdp.db")).display()
        ))
    } else {
        let (server, rest) = lab_url
            .rsplit_once('/')
            .context("a MySQL URL for the lab names its database")?;
        let (name, query) = match rest.split_once('?') {
            Some((name, query)) => (name, format!("?{query}")),
            None => (rest, String::new()),
        };
        Ok(format!("{server}/{name}_hmdp{query}"))
    }
}

/// The service, running.
pub(crate) struct Service {
    seckill: Seckill,
    /// Its Redis connection and key names, for reading a sale's buckets as the scripts left them.
    redis: RedisConn,
    keys: Keys,
    shards: u32,
    base_url: String,
    admin_token: String,
    /// The service's database, for counting what it wrote.
    pub db: AnyPool,
    pub database_url: String,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Service {
    /// Builds and starts the service on the lab's Redis (keys under a prefix of its own inside
    /// the lab's) and its own database beside the lab's.
    pub(crate) async fn start(lab: &Lab) -> anyhow::Result<Self> {
        Self::start_on(lab, &lab.redis_url, 1).await
    }

    /// The same on the Redis at `redis_url` (several comma-separated URLs: a cluster), its
    /// orders on `shards` order streams.
    pub(crate) async fn start_on(lab: &Lab, redis_url: &str, shards: u32) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let database_url = database_url(&lab.database_url)?;
        let admin_token = format!("hmdp-lab-{}", uuid::Uuid::new_v4().simple());
        let mut config = Config {
            listen: ([127, 0, 0, 1], 0).into(),
            database_url: database_url.clone(),
            redis_url: Some(redis_url.to_owned()),
            redis_managed: ManagedMode::Never,
            redis_prefix: lab.key(&format!("service-{}:", uuid::Uuid::new_v4().simple())),
            admin_token: Some(Secret::new(admin_token.clone())),
            data_dir: dir.path().to_owned(),
            ..Config::default()
        };
        config.seckill.shards = shards;
        let deps = Dependencies {
            sms: Arc::new(CapturingSms::default()),
        };
        let app = Application::build_with(config, deps)
            .await
            .context("the service does not start")?;
        let base_url = format!("http://{}", app.local_addr());
        let state = app.state();
        let (seckill, redis, keys) = (
            state.seckill.clone(),
            state.redis.clone(),
            state.keys.clone(),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until(async {
            let _ = stopped.await;
        }));
        let db = AnyPoolOptions::new()
            .max_connections(2)
            .connect(&database_url)
            .await
            .with_context(|| format!("cannot open the service's database {database_url}"))?;
        Ok(Self {
            seckill,
            redis,
            keys,
            shards,
            base_url,
            admin_token,
            db,
            database_url,
            stop,
            server,
            _dir: dir,
        })
    }

    /// A flash sale of `stock` vouchers, created through the admin route: its voucher id.
    pub(crate) async fn new_sale(&self, stock: i64) -> anyhow::Result<i64> {
        self.create(FlashSale::new(stock)).await
    }

    /// A flash sale of `stock` vouchers split over `buckets` (`stockBuckets`): its voucher id.
    pub(crate) async fn new_split_sale(
        &self,
        stock: i64,
        buckets: StockBuckets,
    ) -> anyhow::Result<i64> {
        self.create(FlashSale::new(stock).buckets(i64::from(buckets.get())))
            .await
    }

    async fn create(&self, sale: FlashSale) -> anyhow::Result<i64> {
        let client = reqwest::Client::builder().no_proxy().build()?;
        sale.create(&client, &self.base_url, &self.admin_token)
            .await
    }

    /// The stock each bucket of `voucher` holds in Redis now, bucket 0 first.
    pub(crate) async fn bucket_stock(
        &self,
        voucher: i64,
        buckets: StockBuckets,
    ) -> anyhow::Result<Vec<i64>> {
        let mut redis = self.redis.clone();
        let mut left = Vec::new();
        for b in 0..buckets.get() {
            let shard = Keys::seckill_bucket_shard(voucher, b, self.shards);
            let stock: Option<i64> = redis::cmd("HGET")
                .arg(self.keys.seckill_bucket(shard, voucher, b))
                .arg(voucher_hash::FIELD_STOCK)
                .query_async(&mut redis)
                .await?;
            left.push(stock.unwrap_or(0));
        }
        Ok(left)
    }

    /// Who buys: cheap to clone into each buyer's task.
    pub(crate) fn buyer(&self) -> Buyer {
        Buyer(self.seckill.clone())
    }

    /// Waits until the worker has written `n` orders of `voucher`: `(orders, users holding two
    /// or more)` then, or an error when it has not within [`WRITE_PATIENCE`].
    pub(crate) async fn written(&self, voucher: i64, n: i64) -> anyhow::Result<(i64, i64)> {
        let deadline = tokio::time::Instant::now() + WRITE_PATIENCE;
        loop {
            let (orders, doubled) = lab::orders_in(&self.db, voucher).await?;
            if orders >= n {
                return Ok((orders, doubled));
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the service's worker wrote {orders} of {n} accepted orders in {WRITE_PATIENCE:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The voucher's stock in the service's database.
    pub(crate) async fn stock(&self, voucher: i64) -> anyhow::Result<i64> {
        lab::stock_in(&self.db, voucher).await
    }

    /// Stops the service gracefully (the worker finishes its batch) and waits for it.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        self.db.close().await;
        let _ = self.stop.send(());
        self.server.await?
    }
}

/// One buyer's way into the service's decision.
#[derive(Clone)]
pub(crate) struct Buyer(Seckill);

impl Buyer {
    /// Asks the service for `voucher` as `user`: whether it accepted.
    pub(crate) async fn buy(&self, user: i64, voucher: i64) -> anyhow::Result<bool> {
        let decided = self
            .0
            .grab(UserId::new(user)?, VoucherId::new(voucher)?)
            .await?;
        Ok(decided.is_ok())
    }
}
