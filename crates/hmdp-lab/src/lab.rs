//! What a version runs against: the same Redis and database as the service would use. Each
//! run (one `Lab`) has a key prefix of its own, and within it every version uses keys named
//! after itself and vouchers of its own, so versions never see each other's state and their
//! rows can be counted afterwards.

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use redis::{AsyncCommands, aio::ConnectionManager};
use sqlx::{
    AnyPool, Executor,
    any::{AnyPoolOptions, install_default_drivers},
};

use crate::schema;

/// Where the lab runs.
#[derive(Debug, Clone)]
pub struct LabOptions {
    pub redis_url: String,
    /// The RabbitMQ broker of the versions that use one (their names are the run's own).
    pub amqp_url: String,
    /// `mysql://…/<database>` (created when missing) or `sqlite://<file>`; `None`: a SQLite file
    /// in a new temporary folder, kept so its rows can be read afterwards.
    pub database_url: Option<String>,
    /// This binary, for versions that run a second process (`hmdp-lab instance …`).
    pub exe: PathBuf,
    /// Progress lines on stderr.
    pub progress: bool,
}

/// Which database the lab writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    MySql,
}

/// An open lab: Redis, the database with the original's tables, a key prefix of the run's own.
pub struct Lab {
    pub redis: ConnectionManager,
    pub redis_url: String,
    pub amqp_url: String,
    pub db: AnyPool,
    pub database_url: String,
    pub exe: PathBuf,
    prefix: String,
    progress: bool,
}

impl Lab {
    /// Connects to Redis and the database, and creates the lab's tables where missing.
    pub async fn open(options: LabOptions) -> anyhow::Result<Self> {
        install_default_drivers();
        let client = redis::Client::open(options.redis_url.as_str())
            .with_context(|| format!("bad Redis URL {}", options.redis_url))?;
        let redis = client
            .get_connection_manager()
            .await
            .with_context(|| format!("cannot connect to Redis at {}", options.redis_url))?;
        let database_url = match options.database_url {
            Some(url) => url,
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("hmdp-lab-")
                    .tempdir()?
                    .keep();
                format!("sqlite://{}?mode=rwc", dir.join("lab.db").display())
            }
        };
        let backend = if database_url.starts_with("mysql:") {
            create_mysql_database(&database_url).await?;
            Backend::MySql
        } else if database_url.starts_with("sqlite:") {
            Backend::Sqlite
        } else {
            anyhow::bail!("unsupported database URL {database_url}: sqlite:// or mysql://");
        };
        let db = AnyPoolOptions::new()
            .max_connections(if backend == Backend::Sqlite { 8 } else { 32 })
            .acquire_timeout(Duration::from_secs(60))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        // Concurrent writers wait for each other instead of failing at once.
                        conn.execute("PRAGMA busy_timeout = 30000").await?;
                    }
                    Ok(())
                })
            })
            .connect(&database_url)
            .await
            .with_context(|| format!("cannot open the database {database_url}"))?;
        if backend == Backend::Sqlite {
            db.execute("PRAGMA journal_mode = WAL").await?;
        }
        for table in schema::TABLES {
            db.execute(*table).await?;
        }
        let prefix = format!("hmdp-lab:{}:", uuid::Uuid::new_v4().simple());
        Ok(Self {
            redis,
            redis_url: options.redis_url,
            amqp_url: options.amqp_url,
            db,
            database_url,
            exe: options.exe,
            prefix,
            progress: options.progress,
        })
    }

    /// A Redis key of this lab's own.
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The prefix every key of this lab starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether progress lines go to stderr.
    pub fn shows_progress(&self) -> bool {
        self.progress
    }

    /// A progress line on stderr, when asked for.
    pub fn progress(&self, line: impl std::fmt::Display) {
        if self.progress {
            eprintln!("[hmdp-lab] {line}");
        }
    }

    /// A new flash-sale voucher with `stock`, on sale from an hour ago for two hours.
    pub async fn new_voucher(&self, stock: i64) -> anyhow::Result<i64> {
        let id: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) + 1 FROM tb_voucher")
            .fetch_one(&self.db)
            .await?;
        sqlx::query(
            "INSERT INTO tb_voucher (id, shop_id, title, pay_value, actual_value, type) \
             VALUES (?, 1, 'lab', 100, 1000, 1)",
        )
        .bind(id)
        .execute(&self.db)
        .await?;
        let now = sale_window();
        sqlx::query(
            "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time) \
             VALUES (?, ?, ?, ?)",
        )
        .bind(id)
        .bind(stock)
        .bind(now.0)
        .bind(now.1)
        .execute(&self.db)
        .await?;
        Ok(id)
    }

    /// The voucher's stock in `tb_seckill_voucher`.
    pub async fn stock(&self, voucher: i64) -> anyhow::Result<i64> {
        stock_in(&self.db, voucher).await
    }

    /// `(orders written, users holding two or more)` for the voucher, counted in the database.
    pub async fn orders(&self, voucher: i64) -> anyhow::Result<(i64, i64)> {
        orders_in(&self.db, voucher).await
    }

    /// Deletes every Redis key this lab wrote: those that start with its prefix, and those
    /// that start with it inside a cluster hash tag (`{<prefix>…}…`, as the service's Bloom
    /// filter names its keys).
    pub async fn clean_up(&self) -> anyhow::Result<()> {
        let mut keys: Vec<String> = Vec::new();
        for pattern in [format!("{}*", self.prefix), format!("{{{}*", self.prefix)] {
            let mut conn = self.redis.clone();
            let mut iter: redis::AsyncIter<String> = conn.scan_match(pattern).await?;
            while let Some(k) = futures_util::StreamExt::next(&mut iter).await {
                keys.push(k?);
            }
        }
        let mut conn = self.redis.clone();
        for chunk in keys.chunks(500) {
            redis::cmd("DEL")
                .arg(chunk)
                .query_async::<()>(&mut conn)
                .await?;
        }
        Ok(())
    }
}

/// The voucher's stock in `tb_seckill_voucher` of `db` (the lab's, or the service's own).
pub(crate) async fn stock_in(db: &AnyPool, voucher: i64) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar::<_, i64>(
        "SELECT CAST(stock AS SIGNED) FROM tb_seckill_voucher WHERE voucher_id = ?",
    )
    .bind(voucher)
    .fetch_one(db)
    .await?)
}

/// `(orders written, users holding two or more)` for the voucher in `db` (the lab's, or the
/// service's own).
pub(crate) async fn orders_in(db: &AnyPool, voucher: i64) -> anyhow::Result<(i64, i64)> {
    let orders: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ?")
            .bind(voucher)
            .fetch_one(db)
            .await?;
    let doubled: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT user_id FROM tb_voucher_order WHERE voucher_id = ? \
         GROUP BY user_id HAVING COUNT(*) > 1) AS t",
    )
    .bind(voucher)
    .fetch_one(db)
    .await?;
    Ok((orders, doubled))
}

/// `(an hour ago, an hour from now)` as `YYYY-MM-DD HH:MM:SS`, which both databases read.
fn sale_window() -> (String, String) {
    let now = chrono::Local::now().naive_local();
    let text = |t: chrono::NaiveDateTime| t.format("%Y-%m-%d %H:%M:%S").to_string();
    (
        text(now - chrono::Duration::hours(1)),
        text(now + chrono::Duration::hours(1)),
    )
}

/// Creates the database a `mysql://…/<name>` URL names, if it does not exist.
async fn create_mysql_database(url: &str) -> anyhow::Result<()> {
    let (server, name) = url
        .rsplit_once('/')
        .filter(|(s, n)| !n.is_empty() && s.contains("//") && !s.ends_with('/'))
        .context("a MySQL URL for the lab names its database: mysql://user@host:3306/hmdp_lab")?;
    let name = name.split('?').next().unwrap_or(name);
    anyhow::ensure!(
        name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "database name {name:?}: letters, digits and _ only"
    );
    let pool = AnyPoolOptions::new()
        .max_connections(1)
        .connect(server)
        .await?;
    pool.execute(format!("CREATE DATABASE IF NOT EXISTS `{name}`").as_str())
        .await?;
    pool.close().await;
    Ok(())
}
