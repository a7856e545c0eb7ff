//! What the cache experiments share: shops of their own in `tb_shop`, the query that loads one
//! (counted, so a version's database load is measured rather than guessed), and the cache
//! clients built on the lab's Redis. The course's cache code is a cache-aside read in front of
//! that query; each experiment writes its broken versions by hand and takes its fixed ones from
//! `hmdp-cache`, the service's cache client.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use hmdp_cache::CacheClient;
use hmdp_lock::LockClient;
use redis::aio::ConnectionManager;
use sqlx::AnyPool;

use crate::{
    Lab, Trace,
    trace::{Actor, What},
};

/// A shop as the cache keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Shop {
    pub id: i64,
    pub name: String,
}

/// `n` new shops named `name-<i>`; their ids, above every id already in `tb_shop`.
pub(crate) async fn new_shops(lab: &Lab, n: i64, name: &str) -> anyhow::Result<Vec<i64>> {
    let first: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) + 1 FROM tb_shop")
        .fetch_one(&lab.db)
        .await?;
    let ids: Vec<i64> = (first..first + n).collect();
    for (i, id) in ids.iter().enumerate() {
        sqlx::query("INSERT INTO tb_shop (id, name, type_id) VALUES (?, ?, 1)")
            .bind(id)
            .bind(format!("{name}-{i}"))
            .execute(&lab.db)
            .await?;
    }
    Ok(ids)
}

/// The database behind a cache: `SELECT … FROM tb_shop WHERE id = ?`, every call counted with
/// the moment it was made, after an optional pause that stands for an expensive rebuild.
#[derive(Clone)]
pub(crate) struct ShopDb {
    db: AnyPool,
    pause: Duration,
    queries: Arc<AtomicU64>,
    started: Instant,
    at: Arc<std::sync::Mutex<Vec<Duration>>>,
}

impl ShopDb {
    pub(crate) fn new(lab: &Lab, pause: Duration) -> Self {
        Self {
            db: lab.db.clone(),
            pause,
            queries: Arc::default(),
            started: Instant::now(),
            at: Arc::default(),
        }
    }

    /// The shop, or `None` where there is none; one counted database query.
    pub(crate) async fn shop(&self, id: i64) -> anyhow::Result<Option<Shop>> {
        self.queries.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut at) = self.at.lock() {
            at.push(self.started.elapsed());
        }
        if !self.pause.is_zero() {
            tokio::time::sleep(self.pause).await;
        }
        let name: Option<String> = sqlx::query_scalar("SELECT name FROM tb_shop WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.db)
            .await?;
        Ok(name.map(|name| Shop { id, name }))
    }

    /// Database queries made so far.
    pub(crate) fn queries(&self) -> u64 {
        self.queries.load(Ordering::Relaxed)
    }

    /// When each query was made, since this counter was created.
    pub(crate) fn times(&self) -> Vec<Duration> {
        self.at.lock().map(|at| at.clone()).unwrap_or_default()
    }
}

/// The course's cache-aside read, by hand: `GET`; on a miss the query, and `SET … PX ttl` of
/// what it found. Nothing is stored for a shop that does not exist, and concurrent misses each
/// run the query: what the penetration and breakdown chapters start from. With `traced`, a
/// miss, its query and its store go into that trace as the actor's.
pub(crate) async fn cache_aside(
    redis: &ConnectionManager,
    key: &str,
    ttl: Duration,
    db: &ShopDb,
    id: i64,
    traced: Option<(&Trace, Actor)>,
) -> anyhow::Result<Option<Shop>> {
    let record = |what| {
        if let Some((trace, who)) = traced {
            trace.record(who, what);
        }
    };
    let mut conn = redis.clone();
    let cached: Option<String> = redis::cmd("GET").arg(key).query_async(&mut conn).await?;
    if let Some(json) = cached {
        return Ok(Some(serde_json::from_str(&json)?));
    }
    record(What::CacheMiss);
    record(What::Rebuild {
        ms: db.pause.as_millis() as u64,
    });
    let shop = db.shop(id).await?;
    if let Some(shop) = &shop {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(serde_json::to_string(shop)?)
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async(&mut conn)
            .await?;
        record(What::CacheSet {
            value: shop.name.clone(),
        });
    }
    Ok(shop)
}

/// A cache client as the service builds one: keys under the lab's prefix, and a lock client
/// of its own (one per "instance") for the rebuild mutex and the logical-expiry rebuild.
pub(crate) async fn cache_client(lab: &Lab) -> anyhow::Result<CacheClient<ConnectionManager>> {
    let locks = LockClient::builder(lab.redis.clone())
        .subscriber(redis::Client::open(lab.redis_url.as_str())?)
        .key_prefix(lab.prefix())
        .build()?;
    Ok(CacheClient::builder(lab.redis.clone())
        .key_prefix(lab.prefix())
        .locks(locks)
        .build())
}
