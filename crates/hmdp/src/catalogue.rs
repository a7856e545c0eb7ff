//! The catalogue service: shops and shop types behind the cache, the Bloom filter of shop ids
//! and the GEO index of shop positions.
//!
//! ## Why these defaults
//! - **`GET /shop/{id}` uses the mutex strategy** (`HMDP_SHOP_CACHE=mutex`, the default): it
//!   needs no warm-up, an update is visible on the next read (the write deletes the entry),
//!   entries of shops nobody reads expire, and a stampede on a cold or just-expired shop
//!   costs one database query across all instances (single-flight in each process, a
//!   distributed lock between them). Logical expiry (`logical`) never lets a hot shop miss,
//!   at the price of serving a stale shop for one background rebuild after it turns stale,
//!   and of never expiring anything in Redis (every shop ever read stays there): pick it for
//!   a catalogue of few, very hot shops. `aside` is the course's unprotected first version,
//!   kept for comparison.
//! - **Switching `HMDP_SHOP_CACHE`** needs no flush: an entry in the other strategy's format
//!   is a miss for the new one (logged, deleted, reloaded once). While old and new instances
//!   run side by side they keep replacing each other's entries, one locked load each time.
//! - **The shop-type list is always cached with the mutex strategy**, whatever
//!   `HMDP_SHOP_CACHE` says: it is one key that every page load reads, so its expiry is
//!   exactly the breakdown case the mutex is for; it has no ids to guess (no Bloom filter, no
//!   null marker needed) and no write path in the API, so logical expiry's stale window would
//!   buy nothing. The strategy choice is about shop pages, where the trade-off is real.
//! - **The list endpoints (`/shop/of/type`, `/shop/of/name`) are not cached**, as in the
//!   original: their keys multiply (type × page × position, any name fragment × page), so
//!   hits would be rare, and every shop write would have to find and drop the pages it
//!   appears on. They are cheap instead: a page by type is an indexed five-row query; the
//!   nearby search is answered by the GEO index in Redis, the database only fetching at most
//!   five shops by primary key; a name search is bounded by the page size and the rate
//!   limits. The GEO index of a type is loaded from the database once across callers and
//!   instances (single-flight and lock, through the cache client), and a type without shops
//!   is remembered for the null TTL, so a flood of nearby searches for unknown types costs
//!   Redis reads only.
//! - **A Bloom filter of shop ids** sits in front: an id that was never created is answered
//!   "店铺不存在！" without touching the cache keys or the database, so a flood of random ids
//!   cannot fill Redis with null markers either. Ids it lets through (or all ids, when it is
//!   off) are still protected by null caching. Its parameters live in Redis and every
//!   instance adopts them (see [`hmdp_cache::BloomFilter`]); an instance that finds the shops
//!   have outgrown the filter builds a bigger one beside it and switches all instances over
//!   atomically.
//! - **Redis down**: shop reads fall back to the database, at most
//!   `HMDP_CACHE_FALLBACK_CONCURRENCY` loads at a time, concurrent reads of one shop sharing
//!   one load; the rest get a fast 503. Serving some reads beats serving none, and the limit
//!   keeps the database from taking the whole load.
//! - **Writes** go to the database first, then delete the cache entry (cache-aside). A new
//!   shop's id goes into the Bloom filter, then its cache entry is deleted too: a null marker
//!   (or an L1 copy of one) left by an earlier read of that id would hide it otherwise. A
//!   failed delete is retried in the background; the TTL bounds the staleness in the worst
//!   case.

use std::{sync::Arc, time::Duration};

use hmdp_cache::{BloomFilter, BloomOptions, CacheClient, Membership, ReadOptions, Strategy};

use crate::{
    config::{CacheSettings, ShopCacheStrategy},
    domain::{Answer, Answered, ErrorCode, Refused, ShopId},
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
    /// No shop with this id.
    #[error("no such shop")]
    ShopNotFound,
    /// A shop update that names no shop.
    #[error("a shop update without an id")]
    ShopIdRequired,
}

impl Answered for CatalogueError {
    fn answer(&self) -> Answer {
        use CatalogueError as E;
        if let Some(storage) = self.storage() {
            return storage.answer();
        }
        match self {
            E::ShopNotFound => Refused::new(ErrorCode::ShopNotFound, "店铺不存在！").into(),
            E::ShopIdRequired => Refused::new(ErrorCode::ShopIdRequired, "店铺id不能为空").into(),
            E::Cache(c) if c.is_redis_unavailable() || c.is_overloaded() => {
                Answer::Unavailable("redis")
            }
            E::Redis(r) => r.answer(),
            _ => Answer::Internal,
        }
    }
}

impl CatalogueError {
    /// The database error behind this one, if the database failed (directly or in a loader).
    pub fn storage(&self) -> Option<&StorageError> {
        match self {
            CatalogueError::Storage(e) => Some(e),
            CatalogueError::Cache(e) => e.loader_error().and_then(|e| {
                e.downcast_ref::<StorageError>().or_else(|| {
                    e.downcast_ref::<CatalogueError>()
                        .and_then(CatalogueError::storage)
                })
            }),
            CatalogueError::Redis(_)
            | CatalogueError::ShopNotFound
            | CatalogueError::ShopIdRequired => None,
        }
    }
}

/// Page sizes of the original (`DEFAULT_PAGE_SIZE`, `MAX_PAGE_SIZE`).
pub(crate) const TYPE_PAGE_SIZE: i64 = 5;
pub(crate) const NAME_PAGE_SIZE: i64 = 10;
/// Deepest page of a name search: a `LIKE '%…%'` cannot use an index, so a deep `OFFSET` makes
/// the database scan and skip that many matching rows per request. Past it the answer is an
/// empty page (what a scrolling page takes for "no more"), without a query.
pub const NAME_MAX_PAGE: i64 = 50;
/// The original's nearby radius.
pub(crate) const NEARBY_METRES: f64 = 5000.0;
/// How long "the GEO index of this type was just loaded" is remembered. It only matters when
/// the index is missing again (deleted alone, without its marker): the marker keeps a burst
/// to one load, and expires soon so a lost index is reloaded.
const GEO_LOADED_TTL: Duration = Duration::from_secs(5);

/// The Bloom filter's sizing for `shops` shops: room to double (re-sizing means a rebuild),
/// at least 100k ids (~180 KiB), 0.1 % false positives.
fn bloom_options(shops: usize) -> BloomOptions {
    BloomOptions::new((shops as u64).saturating_mul(2).max(100_000), 0.001)
}

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
    geo_opts: ReadOptions,
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
        // Always the mutex strategy, whatever the shop pages use: see the module docs.
        let types_opts = ReadOptions::new(Strategy::Mutex, settings.ttl).jitter(settings.jitter);
        let geo_opts = ReadOptions::new(Strategy::Mutex, GEO_LOADED_TTL)
            .null_ttl(settings.null_ttl)
            .jitter(settings.jitter);
        let mut me = Self {
            db,
            redis,
            keys,
            cache,
            bloom: None,
            shop_opts,
            types_opts,
            geo_opts,
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
        if let Err(e) = me.load_geo().await {
            tracing::warn!(error = %e, "cannot load the shop GEO index yet; it is rebuilt on demand");
        }
        Ok(me)
    }

    /// The cache client (tests and metrics read its counters).
    pub fn cache(&self) -> &CacheClient<RedisConn> {
        &self.cache
    }

    /// The Bloom filter of shop ids, if it is on (tests look at it).
    #[cfg(feature = "test-util")]
    pub fn bloom(&self) -> Option<&BloomFilter<RedisConn>> {
        self.bloom.as_ref()
    }

    async fn open_bloom(&self) -> Result<BloomFilter<RedisConn>, CatalogueError> {
        let bloom = BloomFilter::open(self.redis.clone(), &self.keys.shop_bloom()).await?;
        self.prepare_bloom(&bloom).await?;
        Ok(bloom)
    }

    /// Makes the installed filter hold every shop id. With none in Redis (first start,
    /// flushed, evicted), or one the shops have outgrown, it builds one sized for today's
    /// shops and installs it for every instance; otherwise it adds every id again (cheap,
    /// idempotent, and covers shops created while no instance was running).
    async fn prepare_bloom(&self, bloom: &BloomFilter<RedisConn>) -> Result<(), CatalogueError> {
        let ids = id_strings(catalogue::shop_ids(&self.db).await?);
        let outgrown = bloom.capacity().is_none_or(|c| c < ids.len() as u64);
        if outgrown || bloom.is_missing().await? {
            let db = self.db.clone();
            let installed = bloom
                .rebuild(bloom_options(ids.len()), move || {
                    let db = db.clone();
                    async move { catalogue::shop_ids(&db).await.map(id_strings) }
                })
                .await?;
            if installed {
                tracing::debug!(shops = ids.len(), size = ?bloom.size(), "built the shop Bloom filter");
                return Ok(());
            }
            // Another instance installed one first: make sure it has our ids too.
        }
        bloom.add_many(ids.iter().map(|s| s.as_bytes())).await?;
        tracing::debug!(shops = ids.len(), size = ?bloom.size(), "shop Bloom filter ready");
        Ok(())
    }

    /// Whether the shop exists, read as [`Catalogue::shop_json`] reads it.
    pub async fn shop_exists(&self, id: ShopId) -> Result<bool, CatalogueError> {
        Ok(self.shop_json(id).await?.is_some())
    }

    /// One shop as the JSON the API answers, through the cache (a read the L1 answers neither
    /// decodes nor encodes it); on a miss the Bloom filter is asked before the database.
    pub async fn shop_json(&self, id: ShopId) -> Result<Option<Arc<str>>, CatalogueError> {
        let db = self.db.clone();
        Ok(self
            .cache
            .get_or_load_json_filtered(
                &Keys::cache_shop(id),
                &self.shop_opts,
                || async move {
                    match &self.bloom {
                        Some(bloom) => self.bloom_admits(bloom, id).await,
                        None => true,
                    }
                },
                move || async move { catalogue::shop(&db, id).await },
            )
            .await?)
    }

    /// False only when the installed filter is certain the id never existed.
    async fn bloom_admits(&self, bloom: &BloomFilter<RedisConn>, id: ShopId) -> bool {
        match bloom.check(id.to_string().as_bytes()).await {
            Ok(Membership::Absent) => false,
            Ok(Membership::Missing) => {
                // Redis lost the filter (flushed, failed over): do not trust it until rebuilt.
                self.refill_bloom_in_background(bloom.clone());
                true
            }
            Ok(_) => true,
            Err(e) => {
                // Redis trouble: let the cache client's Redis-down policy decide.
                tracing::debug!(error = %e, "bloom check failed; skipping it");
                true
            }
        }
    }

    fn refill_bloom_in_background(&self, bloom: BloomFilter<RedisConn>) {
        let me = self.clone();
        tokio::spawn(async move {
            let Ok(_only_one) = me.refilling.try_lock() else {
                return;
            };
            match me.prepare_bloom(&bloom).await {
                Ok(()) => tracing::warn!("the shop Bloom filter was missing in Redis; rebuilt"),
                Err(e) => tracing::warn!(error = %e, "rebuilding the shop Bloom filter failed"),
            }
        });
    }

    /// Creates a shop: database, then Bloom filter, cache entry and GEO index.
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
        // A read of this id before the insert may have left a null marker (Bloom filter off,
        // or a false positive) or an L1 copy of one: drop it, after the filter knows the id.
        self.drop_cached_shop(id, "delete the new shop's cache entry")
            .await;
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

    /// Deletes the shop's cache entry everywhere (Redis and every instance's L1), retrying in
    /// the background while Redis is away; `what` names the attempt in the logs.
    async fn drop_cached_shop(&self, id: ShopId, what: &'static str) {
        let cache = self.cache.clone();
        retry_in_background(what, move || {
            let cache = cache.clone();
            async move {
                cache
                    .invalidate(&Keys::cache_shop(id))
                    .await
                    .map_err(CatalogueError::from)
            }
        })
        .await;
    }

    /// Updates a shop: database first, then the cache entry is deleted (never the other way
    /// round: a read between the two would put the old row back for a whole TTL).
    pub async fn update_shop(&self, id: ShopId, input: &ShopInput) -> Result<bool, CatalogueError> {
        let before = catalogue::shop(&self.db, id).await?;
        if !catalogue::update_shop(&self.db, id, input).await? {
            return Ok(false);
        }
        self.drop_cached_shop(id, "delete the updated shop from the cache")
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
        let (exists, mut hits) = geo_search(&mut self.redis.clone(), &key, x, y, end).await?;
        // No index: gone (Redis flushed) or never there (a type without shops). Load it,
        // once, and search again.
        if !exists && self.load_geo_type(type_id).await? {
            hits = geo_search(&mut self.redis.clone(), &key, x, y, end)
                .await?
                .1;
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
        if page > NAME_MAX_PAGE {
            return Ok(Vec::new());
        }
        let offset = (page - 1) * NAME_PAGE_SIZE;
        Ok(catalogue::shops_by_name(&self.db, name, offset, NAME_PAGE_SIZE).await?)
    }

    /// Loads one type's GEO index from the database through the cache client: concurrent
    /// callers share one load (single-flight), instances take turns (distributed lock, double
    /// check), and the answer is remembered under `cache:shop-geo:{typeId}` — for a moment if
    /// the type has shops, for the null TTL if it has none. True when the type has shops.
    async fn load_geo_type(&self, type_id: i64) -> Result<bool, CatalogueError> {
        let (db, redis, key) = (
            self.db.clone(),
            self.redis.clone(),
            self.keys.shop_geo(type_id),
        );
        let loaded: Option<usize> = self
            .cache
            .get_or_load(
                &Keys::cache_shop_geo_loaded(type_id),
                &self.geo_opts,
                move || async move {
                    let shops = catalogue::shop_positions(&db, Some(type_id)).await?;
                    if shops.is_empty() {
                        return Ok::<_, CatalogueError>(None);
                    }
                    let members: Vec<(i64, f64, f64)> =
                        shops.iter().map(|s| (s.id, s.x, s.y)).collect();
                    let mut redis = redis;
                    for chunk in members.chunks(1000) {
                        // NX: a position written meanwhile by a shop write is newer than ours.
                        geo_add_nx(&mut redis, &key, chunk).await?;
                    }
                    tracing::info!(
                        type_id,
                        shops = members.len(),
                        "loaded a shop type into the GEO index"
                    );
                    Ok(Some(members.len()))
                },
            )
            .await?;
        Ok(loaded.is_some())
    }

    /// Fills the GEO sets (of all types) that do not exist; returns how many shops were added.
    async fn load_geo(&self) -> Result<usize, CatalogueError> {
        let shops = catalogue::shop_positions(&self.db, None).await?;
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
            tracing::debug!(shops = added, "loaded shop positions into the GEO index");
        }
        Ok(added)
    }
}

/// Shop ids as the Bloom filter's items.
fn id_strings(ids: Vec<i64>) -> Vec<String> {
    ids.into_iter().map(|id| id.to_string()).collect()
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

/// `GEOADD key NX …`: adds members that are not there, leaves the others' positions alone.
async fn geo_add_nx(
    redis: &mut RedisConn,
    key: &str,
    members: &[(i64, f64, f64)],
) -> Result<(), CatalogueError> {
    let mut cmd = redis::cmd("GEOADD");
    cmd.arg(key).arg("NX");
    for (id, x, y) in members {
        cmd.arg(*x).arg(*y).arg(*id);
    }
    let _: i64 = cmd.query_async(redis).await?;
    Ok(())
}

/// `GEOSEARCH key FROMLONLAT x y BYRADIUS 5000 m ASC COUNT n WITHDIST` → (id, metres), in
/// one transaction with `EXISTS key`: an empty answer from an existing index means "nothing
/// near", from a missing one "not loaded" — read together, so a load finishing in between
/// cannot make the first look like the second.
async fn geo_search(
    redis: &mut RedisConn,
    key: &str,
    x: f64,
    y: f64,
    count: i64,
) -> Result<(bool, Vec<(i64, f64)>), CatalogueError> {
    let mut search = redis::cmd("GEOSEARCH");
    search
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
        .arg("WITHDIST");
    let (exists, rows): (bool, Vec<(String, f64)>) = redis::pipe()
        .atomic()
        .exists(key)
        .add_command(search)
        .query_async(redis)
        .await?;
    let hits = rows
        .into_iter()
        .filter_map(|(id, d)| id.parse().ok().map(|id| (id, d)))
        .collect();
    Ok((exists, hits))
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
