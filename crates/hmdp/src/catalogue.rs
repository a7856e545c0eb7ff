//! The catalogue service: shops and shop types behind the cache, the Bloom filter of shop ids
//! and the GEO index of shop positions.
//!
//! ## Why these defaults
//! - **`GET /shop/{id}` uses the mutex strategy** (`HMDP_SHOP_CACHE=mutex`): it needs no
//!   warm-up, an update is visible on the next read (the write deletes the entry), and a
//!   stampede on a cold or just-expired shop costs one database query across all instances
//!   (single-flight in each process, a distributed lock between them). Logical expiry
//!   (`logical`) never lets a hot shop miss, at the price of serving a stale shop for one
//!   rebuild after it expires; pick it for a few pre-warmed, very hot shops. `aside` is the
//!   course's unprotected first version, kept for comparison.
//! - **A Bloom filter of shop ids** sits in front: an id that was never created is answered
//!   "店铺不存在！" without touching the cache keys or the database, so a flood of random ids
//!   cannot fill Redis with null markers either. Ids it lets through (or all ids, when it is
//!   off) are still protected by null caching.
//! - **Redis down**: shop reads fall back to the database, at most
//!   `HMDP_CACHE_FALLBACK_CONCURRENCY` at a time; the rest get a fast 503. Serving some reads
//!   beats serving none, and the limit keeps the database from taking the whole load.
//! - **Writes** go to the database first, then delete the cache entry (cache-aside). A failed
//!   delete is retried in the background; the TTL bounds the staleness in the worst case.

use std::{sync::Arc, time::Duration};

use hmdp_cache::{BloomFilter, BloomOptions, CacheClient, ReadOptions, Strategy};

use crate::{
    config::{CacheSettings, ShopCacheStrategy},
    domain::ShopId,
    kv::{Keys, RedisConn},
    storage::{
        Db, StorageError,
        catalogue::{self, Shop, ShopInput, ShopType},
    },
};

/// Errors of the catalogue service.
#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("cache: {0}")]
    Cache(#[from] hmdp_cache::Error),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

impl CatalogueError {
    /// The database error behind this one, if the database failed (directly or in a loader).
    pub fn storage(&self) -> Option<&StorageError> {
        match self {
            CatalogueError::Storage(e) => Some(e),
            CatalogueError::Cache(e) => e.loader_error().and_then(|e| e.downcast_ref()),
            CatalogueError::Redis(_) => None,
        }
    }
}

/// Page sizes of the original (`DEFAULT_PAGE_SIZE`, `MAX_PAGE_SIZE`).
pub const TYPE_PAGE_SIZE: i64 = 5;
pub const NAME_PAGE_SIZE: i64 = 10;
/// The original's nearby radius.
pub const NEARBY_METRES: f64 = 5000.0;

/// Shops and shop types, cached.
#[derive(Clone)]
pub struct Catalogue {
    db: Db,
    redis: RedisConn,
    keys: Keys,
    cache: CacheClient<RedisConn>,
    bloom: Option<BloomFilter<RedisConn>>,
    shop_opts: ReadOptions,
    types_opts: ReadOptions,
    /// Guards the background refill of the Bloom filter after Redis lost it.
    refilling: Arc<tokio::sync::Mutex<()>>,
}

impl Catalogue {
    /// Builds the service and prepares Redis: the Bloom filter holds every shop id and each
    /// shop type's GEO set exists. Preparation failures are logged, not fatal: reads still
    /// work (the filter is bypassed when missing, GEO sets are rebuilt on demand).
    pub async fn start(
        db: Db,
        redis: RedisConn,
        keys: Keys,
        cache: CacheClient<RedisConn>,
        settings: &CacheSettings,
    ) -> Result<Self, CatalogueError> {
        let strategy = match settings.shop_strategy {
            ShopCacheStrategy::Mutex => Strategy::Mutex,
            ShopCacheStrategy::Logical => Strategy::LogicalExpiry,
            ShopCacheStrategy::Aside => Strategy::CacheAside,
        };
        let shop_opts = ReadOptions::new(strategy, settings.ttl)
            .null_ttl(settings.null_ttl)
            .jitter(settings.jitter);
        let types_opts = ReadOptions::new(Strategy::Mutex, settings.ttl).jitter(settings.jitter);
        let mut me = Self {
            db,
            redis,
            keys,
            cache,
            bloom: None,
            shop_opts,
            types_opts,
            refilling: Arc::default(),
        };
        if settings.bloom {
            match me.open_bloom().await {
                Ok(b) => me.bloom = Some(b),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot prepare the shop Bloom filter; running without it");
                }
            }
        }
        if let Err(e) = me.load_geo(None).await {
            tracing::warn!(error = %e, "cannot load the shop GEO index yet; it is rebuilt on demand");
        }
        Ok(me)
    }

    /// The cache client (tests and metrics read its counters).
    pub fn cache(&self) -> &CacheClient<RedisConn> {
        &self.cache
    }

    async fn open_bloom(&self) -> Result<BloomFilter<RedisConn>, CatalogueError> {
        let ids = catalogue::shop_positions(&self.db, None).await?;
        // Room to grow: re-sizing means a rebuild, so start generous (~180 KiB at 100k ids).
        let expected = (ids.len() as u64 * 2).max(100_000);
        let (bloom, _) = BloomFilter::open_or_reset(
            self.redis.clone(),
            &self.keys.shop_bloom(),
            BloomOptions::new(expected, 0.001),
        )
        .await?;
        // Always (re)add every id: cheap, idempotent, and covers shops created while no
        // instance was running.
        fill_bloom(&bloom, &ids).await?;
        tracing::info!(shops = ids.len(), "shop Bloom filter ready");
        Ok(bloom)
    }

    /// One shop, through the cache; on a miss the Bloom filter is asked before the database.
    pub async fn shop(&self, id: ShopId) -> Result<Option<Shop>, CatalogueError> {
        let db = self.db.clone();
        let bloom = self.bloom.clone();
        let me = self.clone();
        Ok(self
            .cache
            .get_or_load_filtered(
                &Keys::cache_shop(id),
                &self.shop_opts,
                move || async move {
                    match bloom {
                        Some(bloom) => me.bloom_admits(&bloom, id).await,
                        None => true,
                    }
                },
                move || async move { catalogue::shop(&db, id).await },
            )
            .await?)
    }

    /// False only when the filter is certain the id never existed.
    async fn bloom_admits(&self, bloom: &BloomFilter<RedisConn>, id: ShopId) -> bool {
        match bloom.might_contain(id.to_string().as_bytes()).await {
            Ok(true) => true,
            Ok(false) => {
                if self.bloom_present(bloom).await {
                    return false;
                }
                // Redis lost the filter (flushed, failed over): do not trust it until refilled.
                self.refill_bloom_in_background(bloom.clone());
                true
            }
            Err(e) => {
                // Redis trouble: let the cache client's Redis-down policy decide.
                tracing::debug!(error = %e, "bloom check failed; skipping it");
                true
            }
        }
    }

    async fn bloom_present(&self, bloom: &BloomFilter<RedisConn>) -> bool {
        redis::cmd("EXISTS")
            .arg(bloom.key())
            .query_async::<bool>(&mut self.redis.clone())
            .await
            .unwrap_or(true)
    }

    fn refill_bloom_in_background(&self, bloom: BloomFilter<RedisConn>) {
        let me = self.clone();
        tokio::spawn(async move {
            let Ok(_only_one) = me.refilling.try_lock() else {
                return;
            };
            match catalogue::shop_positions(&me.db, None).await {
                Ok(ids) => match fill_bloom(&bloom, &ids).await {
                    Ok(()) => tracing::warn!(
                        shops = ids.len(),
                        "the shop Bloom filter was missing in Redis; refilled"
                    ),
                    Err(e) => tracing::warn!(error = %e, "refilling the shop Bloom filter failed"),
                },
                Err(e) => tracing::warn!(error = %e, "refilling the shop Bloom filter failed"),
            }
        });
    }

    /// Creates a shop: database, then Bloom filter and GEO index.
    pub async fn create_shop(&self, input: &ShopInput) -> Result<ShopId, CatalogueError> {
        let id = catalogue::insert_shop(&self.db, input).await?;
        if let Some(bloom) = &self.bloom {
            let bloom = bloom.clone();
            retry_in_background("add the new shop to the Bloom filter", move || {
                let bloom = bloom.clone();
                async move {
                    bloom
                        .add(id.to_string().as_bytes())
                        .await
                        .map_err(CatalogueError::from)
                }
            })
            .await;
        }
        let (redis, key, pos) = (
            self.redis.clone(),
            self.keys.shop_geo(input.type_id),
            (input.x, input.y),
        );
        retry_in_background("add the new shop to the GEO index", move || {
            let (mut redis, key) = (redis.clone(), key.clone());
            async move { geo_add(&mut redis, &key, &[(id.get(), pos.0, pos.1)]).await }
        })
        .await;
        Ok(id)
    }

    /// Updates a shop: database first, then the cache entry is deleted (never the other way
    /// round: a read between the two would put the old row back for a whole TTL).
    pub async fn update_shop(&self, id: ShopId, input: &ShopInput) -> Result<bool, CatalogueError> {
        let before = catalogue::shop(&self.db, id).await?;
        if !catalogue::update_shop(&self.db, id, input).await? {
            return Ok(false);
        }
        let cache = self.cache.clone();
        retry_in_background("delete the updated shop from the cache", move || {
            let cache = cache.clone();
            async move {
                cache
                    .invalidate(&Keys::cache_shop(id))
                    .await
                    .map_err(CatalogueError::from)
            }
        })
        .await;
        if let Some(old) = before
            && (old.type_id != input.type_id || old.x != input.x || old.y != input.y)
        {
            let (redis, old_key, new_key) = (
                self.redis.clone(),
                self.keys.shop_geo(old.type_id),
                self.keys.shop_geo(input.type_id),
            );
            let pos = (input.x, input.y);
            retry_in_background("move the shop in the GEO index", move || {
                let (mut redis, old_key, new_key) =
                    (redis.clone(), old_key.clone(), new_key.clone());
                async move {
                    let _: i64 = redis::cmd("ZREM")
                        .arg(&old_key)
                        .arg(id.get())
                        .query_async(&mut redis)
                        .await?;
                    geo_add(&mut redis, &new_key, &[(id.get(), pos.0, pos.1)]).await
                }
            })
            .await;
        }
        Ok(true)
    }

    /// All shop types by `sort`, cached.
    pub async fn shop_types(&self) -> Result<Vec<ShopType>, CatalogueError> {
        let db = self.db.clone();
        let types = self
            .cache
            .get_or_load(
                Keys::cache_shop_types(),
                &self.types_opts,
                move || async move { catalogue::shop_types(&db).await.map(Some) },
            )
            .await?;
        Ok(types.unwrap_or_default())
    }

    /// A page of a type's shops; with a position, the shops within 5 km sorted by distance
    /// with `distance` set (the original's nearby search).
    pub async fn shops_of_type(
        &self,
        type_id: i64,
        page: i64,
        position: Option<(f64, f64)>,
    ) -> Result<Vec<Shop>, CatalogueError> {
        let offset = (page - 1) * TYPE_PAGE_SIZE;
        let Some((x, y)) = position else {
            return Ok(catalogue::shops_of_type(&self.db, type_id, offset, TYPE_PAGE_SIZE).await?);
        };
        let key = self.keys.shop_geo(type_id);
        let end = offset + TYPE_PAGE_SIZE;
        let mut hits = geo_search(&mut self.redis.clone(), &key, x, y, end).await?;
        if hits.is_empty() {
            // An empty answer may mean the index is gone (Redis flushed): rebuild and retry once.
            let exists: bool = redis::cmd("EXISTS")
                .arg(&key)
                .query_async(&mut self.redis.clone())
                .await?;
            if !exists && self.load_geo(Some(type_id)).await? > 0 {
                hits = geo_search(&mut self.redis.clone(), &key, x, y, end).await?;
            }
        }
        let page: Vec<(i64, f64)> = hits.into_iter().skip(offset as usize).collect();
        if page.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = page.iter().map(|(id, _)| *id).collect();
        let mut shops = catalogue::shops_by_ids(&self.db, &ids).await?;
        for shop in &mut shops {
            shop.distance = page.iter().find(|(id, _)| *id == shop.id).map(|(_, d)| *d);
        }
        Ok(shops)
    }

    /// A page of shops whose name contains `name`.
    pub async fn shops_by_name(&self, name: &str, page: i64) -> Result<Vec<Shop>, CatalogueError> {
        let offset = (page - 1) * NAME_PAGE_SIZE;
        Ok(catalogue::shops_by_name(&self.db, name, offset, NAME_PAGE_SIZE).await?)
    }

    /// Fills the GEO sets (of one type, or of all types) that do not exist; returns how many
    /// shops were added.
    async fn load_geo(&self, type_id: Option<i64>) -> Result<usize, CatalogueError> {
        let shops = catalogue::shop_positions(&self.db, type_id).await?;
        let mut by_type: std::collections::BTreeMap<i64, Vec<(i64, f64, f64)>> = Default::default();
        for s in shops {
            by_type.entry(s.type_id).or_default().push((s.id, s.x, s.y));
        }
        let mut added = 0;
        let mut redis = self.redis.clone();
        for (t, members) in by_type {
            let key = self.keys.shop_geo(t);
            let exists: bool = redis::cmd("EXISTS")
                .arg(&key)
                .query_async(&mut redis)
                .await?;
            if !exists {
                for chunk in members.chunks(1000) {
                    geo_add(&mut redis, &key, chunk).await?;
                }
                added += members.len();
            }
        }
        if added > 0 {
            tracing::info!(shops = added, "loaded shop positions into the GEO index");
        }
        Ok(added)
    }
}

async fn fill_bloom(
    bloom: &BloomFilter<RedisConn>,
    shops: &[catalogue::ShopPosition],
) -> Result<(), CatalogueError> {
    let ids: Vec<String> = shops.iter().map(|s| s.id.to_string()).collect();
    for chunk in ids.chunks(10_000) {
        bloom.add_many(chunk.iter().map(|s| s.as_bytes())).await?;
    }
    Ok(())
}

async fn geo_add(
    redis: &mut RedisConn,
    key: &str,
    members: &[(i64, f64, f64)],
) -> Result<(), CatalogueError> {
    let mut cmd = redis::cmd("GEOADD");
    cmd.arg(key);
    for (id, x, y) in members {
        cmd.arg(*x).arg(*y).arg(*id);
    }
    let _: i64 = cmd.query_async(redis).await?;
    Ok(())
}

/// `GEOSEARCH key FROMLONLAT x y BYRADIUS 5000 m ASC COUNT n WITHDIST` → (id, metres).
async fn geo_search(
    redis: &mut RedisConn,
    key: &str,
    x: f64,
    y: f64,
    count: i64,
) -> Result<Vec<(i64, f64)>, CatalogueError> {
    let rows: Vec<(String, f64)> = redis::cmd("GEOSEARCH")
        .arg(key)
        .arg("FROMLONLAT")
        .arg(x)
        .arg(y)
        .arg("BYRADIUS")
        .arg(NEARBY_METRES)
        .arg("m")
        .arg("ASC")
        .arg("COUNT")
        .arg(count.max(1))
        .arg("WITHDIST")
        .query_async(redis)
        .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(id, d)| id.parse().ok().map(|id| (id, d)))
        .collect())
}

/// Runs `op` now; if it fails, keeps retrying in the background (with backoff, for about a
/// minute) instead of failing a request whose database write already succeeded.
async fn retry_in_background<F, Fut>(what: &'static str, op: F)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), CatalogueError>> + Send + 'static,
{
    let Err(first) = op().await else {
        return;
    };
    tracing::warn!(error = %first, "could not {what}; retrying in the background");
    tokio::spawn(async move {
        let mut delay = Duration::from_millis(200);
        for _ in 0..10 {
            tokio::time::sleep(delay).await;
            match op().await {
                Ok(()) => {
                    tracing::info!("managed to {what} on retry");
                    return;
                }
                Err(e) => tracing::debug!(error = %e, "retrying: {what}"),
            }
            delay = (delay * 2).min(Duration::from_secs(10));
        }
        tracing::error!("gave up trying to {what}");
    });
}
