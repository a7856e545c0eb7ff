//! 商户查询缓存: penetration. Reads of shop ids that exist nowhere miss the cache every time;
//! unless something remembers "not found", every one of them is a database query. The course's
//! plain cache-aside stores nothing for a missing shop; caching the empty answer for a short
//! TTL, or a Bloom filter of the ids that exist, stops them.

use std::time::Duration;

use hmdp_cache::{BloomFilter, BloomOptions, ReadOptions, Strategy};

use super::{
    Experiment, Text,
    shops::{ShopDb, cache_aside, cache_client, new_shops},
    version,
};
use crate::{Lab, Outcome};

/// Real shops each version inserts (and reads too, so the cache does work).
const SHOPS: i64 = 5;
/// Shop ids that exist nowhere, each read `ROUNDS` times.
const UNKNOWN: i64 = 20;
/// Rounds of reads; in each, every id is read by `READERS` readers at once.
const ROUNDS: i64 = 5;
const READERS: i64 = 4;
/// The TTL of a cached shop; "not found" is kept for `NULL_TTL`, the service's two minutes.
const TTL: Duration = Duration::from_secs(60);
const NULL_TTL: Duration = Duration::from_secs(120);

pub static EXPERIMENT: Experiment = Experiment {
    name: "cache-penetration",
    chapter: "商户查询缓存",
    invariant: "an id that exists nowhere reaches the database only while its first reads are under way, never once they are answered",
    invariant_zh: "哪里都不存在的 id，只在第一轮读取进行中时打到数据库，得到答复之后再也不会",
    lesson: Text {
        zh: "不存在的数据也要挡在数据库前面：缓存空值，或者在前面放一个布隆过滤器。",
        en: "Keep what does not exist away from the database too: cache the empty answer, or put a Bloom filter in front.",
    },
    versions: &[
        version!(
            "no-null-cache",
            false,
            "cache-aside that stores nothing for a missing shop: every read of it is a query",
            "Cache Aside，查不到的商户什么都不缓存：每次读它都是一次查询",
            no_null_cache
        ),
        version!(
            "null-cache",
            true,
            "hmdp-cache: \"not found\" cached as an empty string for 2 minutes",
            "hmdp-cache：把“不存在”缓存成空字符串，2 分钟",
            null_cache
        ),
        version!(
            "bloom",
            true,
            "hmdp-cache behind a Bloom filter of tb_shop's ids, consulted on a miss: unknown ids are turned away before the database",
            "hmdp-cache 前面加一个 tb_shop id 的布隆过滤器，未命中时先问它：未知 id 到不了数据库",
            bloom
        ),
    ],
};

/// How a version reads one shop.
#[derive(Clone, Copy)]
enum Read {
    Plain,
    NullCache,
    Bloom,
}

async fn no_null_cache(lab: &Lab) -> anyhow::Result<Outcome> {
    reads(lab, "no-null-cache", Read::Plain).await
}

async fn null_cache(lab: &Lab) -> anyhow::Result<Outcome> {
    reads(lab, "null-cache", Read::NullCache).await
}

async fn bloom(lab: &Lab) -> anyhow::Result<Outcome> {
    reads(lab, "bloom", Read::Bloom).await
}

/// `ROUNDS` rounds in which `READERS` readers each read every real and every unknown id at
/// once; the database queries made for the unknown ids are counted. The first round's
/// concurrent readers of an id may each miss before any of them has stored "not found" (the
/// cache's single-flight makes that rare, not impossible): the bound is one query per reader
/// of the first round, and none in the rounds after it. Behind the Bloom filter only the ids
/// it wrongly says might exist (its false positives) may reach the database at all, so the
/// bound there is one query per first-round reader of those.
async fn reads(lab: &Lab, name: &str, how: Read) -> anyhow::Result<Outcome> {
    let real = new_shops(lab, SHOPS, name).await?;
    let unknown_first = real.last().copied().unwrap_or(0) + 1_000_000;
    let unknown: Vec<i64> = (unknown_first..unknown_first + UNKNOWN).collect();
    let cache = cache_client(lab).await?;
    let filter = match how {
        Read::Bloom => {
            let filter = BloomFilter::open(
                lab.redis.clone(),
                &lab.key(&format!("{name}:bloom:{{shop}}")),
            )
            .await?;
            let db = lab.db.clone();
            filter
                .rebuild(BloomOptions::new(10_000, 0.001), move || {
                    let db = db.clone();
                    async move {
                        let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM tb_shop")
                            .fetch_all(&db)
                            .await?;
                        anyhow::Ok(ids.into_iter().map(|id| id.to_string()).collect::<Vec<_>>())
                    }
                })
                .await?;
            Some(filter)
        }
        _ => None,
    };
    let known_db = ShopDb::new(lab, Duration::ZERO);
    let unknown_db = ShopDb::new(lab, Duration::ZERO);
    let opts = ReadOptions::new(Strategy::CacheAside, TTL).null_ttl(NULL_TTL);
    let mut found = 0;
    let mut first_round = 0;
    for round in 0..ROUNDS {
        let mut readers = Vec::new();
        for _ in 0..READERS {
            for &id in real.iter().chain(&unknown) {
                let db = if id >= unknown_first {
                    unknown_db.clone()
                } else {
                    known_db.clone()
                };
                let key = format!("{name}:cache:shop:{id}");
                let (redis, cache, filter, opts) = (
                    lab.redis.clone(),
                    cache.clone(),
                    filter.clone(),
                    opts.clone(),
                );
                let full = lab.key(&key);
                readers.push(tokio::spawn(async move {
                    let shop = match how {
                        Read::Plain => cache_aside(&redis, &full, TTL, &db, id, None).await?,
                        Read::NullCache => {
                            cache
                                .get_or_load(&key, &opts, move || async move { db.shop(id).await })
                                .await?
                        }
                        Read::Bloom => {
                            let filter = filter.expect("a filter for this version");
                            cache
                                .get_or_load_filtered(
                                    &key,
                                    &opts,
                                    move || async move {
                                        filter
                                            .might_contain(id.to_string().as_bytes())
                                            .await
                                            .unwrap_or(true)
                                    },
                                    move || async move { db.shop(id).await },
                                )
                                .await?
                        }
                    };
                    anyhow::Ok(shop.is_some())
                }));
            }
        }
        for r in readers {
            found += i64::from(r.await??);
        }
        if round == 0 {
            first_round = unknown_db.queries();
        }
    }
    let queries = unknown_db.queries();
    let later = queries - first_round;
    // The unknown ids that may reach the database: all of them, or the filter's false positives.
    let passed = match &filter {
        Some(filter) => {
            let mut passed = 0i64;
            for id in &unknown {
                passed += i64::from(filter.might_contain(id.to_string().as_bytes()).await?);
            }
            passed
        }
        None => UNKNOWN,
    };
    let held =
        later == 0 && queries <= (passed * READERS) as u64 && found == SHOPS * ROUNDS * READERS;
    let outcome = Outcome::new(held)
        .metric("unknown_ids", UNKNOWN)
        .metric("reads_of_unknown", UNKNOWN * ROUNDS * READERS)
        .metric("db_queries", queries)
        .metric("db_queries_after_first_round", later)
        .metric("db_queries_for_shops", known_db.queries())
        .metric("shops_found", found);
    Ok(match filter {
        Some(_) => outcome.metric("bloom_false_positives", passed),
        None => outcome,
    })
}
