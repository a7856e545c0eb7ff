//! 商户查询缓存: breakdown (the hot key). A hot shop's entry has just expired and its rebuild is
//! slow; every concurrent reader that misses rebuilds it too, so the database takes the whole
//! burst. The course's fixes: a mutex (one rebuilds, the others wait and read what it stored)
//! or logical expiry (the entry never leaves Redis; whoever sees it stale starts one background
//! rebuild and everyone answers the stale value meanwhile).
//!
//! The readers are spread over two cache clients, two "instances" with a lock client each, so
//! what keeps the rebuild single is the cross-process mutex and not one process's single-flight.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use hmdp_cache::{ReadOptions, Strategy};

use super::{
    Experiment, Text,
    shops::{Shop, ShopDb, cache_aside, cache_client, new_shops},
    version,
};
use crate::{
    Lab, Outcome, Trace,
    trace::{Actor, What},
};

/// Readers of the hot key, all at once.
const READERS: u64 = 60;
/// Instances the readers are spread over.
const INSTANCES: usize = 2;
/// How long a rebuild takes (the course's sleep in its rebuild): the window in which every
/// concurrent reader also misses.
const REBUILD: Duration = Duration::from_millis(200);
const TTL: Duration = Duration::from_secs(60);
/// Readers whose steps the trace shows: the first few to miss, enough to see them all rebuild.
const TRACED_READERS: usize = 4;

pub static EXPERIMENT: Experiment = Experiment {
    name: "cache-breakdown",
    chapter: "商户查询缓存",
    invariant: "when a hot key expires under concurrent reads, the database rebuilds it once",
    invariant_zh: "热点 key 在并发读取下过期时，数据库只重建它一次",
    lesson: Text {
        zh: "热点 key 过期时只让一个请求去重建：互斥锁让其他人等，逻辑过期让其他人先拿旧值。",
        en: "Let one request rebuild an expired hot key: a mutex makes the others wait, logical expiry hands them the old value meanwhile.",
    },
    versions: &[
        version!(
            "no-mutex",
            false,
            "cache-aside: every reader that misses the expired hot key rebuilds it",
            "Cache Aside：每个没命中已过期热点 key 的读者都去重建",
            no_mutex
        ),
        version!(
            "mutex",
            true,
            "hmdp-cache Strategy::Mutex: one rebuild under a Redis lock, the others wait for it",
            "hmdp-cache Strategy::Mutex：拿到 Redis 锁的那一个去重建，其余的等它",
            mutex
        ),
        version!(
            "logical-expiry",
            true,
            "hmdp-cache Strategy::LogicalExpiry: the stale value answered at once, one background rebuild",
            "hmdp-cache Strategy::LogicalExpiry：立刻返回旧值，后台只重建一次",
            logical_expiry
        ),
    ],
};

#[derive(Clone, Copy, PartialEq)]
enum Read {
    Plain,
    Mutex,
    Logical,
}

async fn no_mutex(lab: &Lab) -> anyhow::Result<Outcome> {
    burst(lab, "no-mutex", Read::Plain).await
}

async fn mutex(lab: &Lab) -> anyhow::Result<Outcome> {
    burst(lab, "mutex", Read::Mutex).await
}

async fn logical_expiry(lab: &Lab) -> anyhow::Result<Outcome> {
    burst(lab, "logical-expiry", Read::Logical).await
}

/// `READERS` readers at once of a hot shop whose entry has just expired: gone from Redis, or
/// (logical expiry) still there with its old name and an expiry time in the past. The shop's
/// name in the database is the new one, so an answer with the old name is a stale answer.
async fn burst(lab: &Lab, name: &str, how: Read) -> anyhow::Result<Outcome> {
    let id = new_shops(lab, 1, name).await?[0];
    let fresh: String = sqlx::query_scalar("SELECT name FROM tb_shop WHERE id = ?")
        .bind(id)
        .fetch_one(&lab.db)
        .await?;
    let key = format!("{name}:cache:shop:{id}");
    let mut instances = Vec::new();
    for _ in 0..INSTANCES {
        instances.push(cache_client(lab).await?);
    }
    let opts = ReadOptions::new(
        if how == Read::Logical {
            Strategy::LogicalExpiry
        } else {
            Strategy::Mutex
        },
        TTL,
    );
    if how == Read::Logical {
        let old = Shop {
            id,
            name: format!("{fresh} (old)"),
        };
        instances[0]
            .set_logical(&key, &old, Duration::ZERO, 0.0)
            .await?;
    }
    let db = ShopDb::new(lab, REBUILD);
    let trace = Trace::start();
    let stale = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut readers = Vec::new();
    for n in 0..READERS {
        let cache = instances[n as usize % INSTANCES].clone();
        let (redis, full, key, opts, db, stale, fresh, trace) = (
            lab.redis.clone(),
            lab.key(&key),
            key.clone(),
            opts.clone(),
            db.clone(),
            stale.clone(),
            fresh.clone(),
            trace.clone(),
        );
        let me = Actor::Reader {
            shop: id,
            n: n as u32 + 1,
            instance: Some((n as usize % INSTANCES) as u8),
        };
        readers.push(tokio::spawn(async move {
            let t = Instant::now();
            let shop = match how {
                Read::Plain => cache_aside(&redis, &full, TTL, &db, id, Some((&trace, me))).await?,
                Read::Mutex | Read::Logical => {
                    cache
                        .get_or_load(&key, &opts, move || async move {
                            // The cache client calls this only to rebuild.
                            trace.record(
                                me,
                                What::Rebuild {
                                    ms: REBUILD.as_millis() as u64,
                                },
                            );
                            db.shop(id).await
                        })
                        .await?
                }
            };
            let shop = shop.ok_or_else(|| anyhow::anyhow!("the hot shop was not found"))?;
            if shop.name != fresh {
                stale.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(t.elapsed())
        }));
    }
    let mut slowest = Duration::ZERO;
    for r in readers {
        slowest = slowest.max(r.await??);
    }
    // Logical expiry answers before its background rebuild is done: wait for it to store the
    // new value, so that every rebuild it started is counted.
    if how == Read::Logical {
        let mut conn = lab.redis.clone();
        let full = lab.key(&key);
        let mut done = false;
        let until = Instant::now() + REBUILD * 20;
        while !done && Instant::now() < until {
            let raw: Option<String> = redis::cmd("GET").arg(&full).query_async(&mut conn).await?;
            done = raw.is_some_and(|raw| raw.contains(&format!("\"{fresh}\"")));
            if !done {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // A second rebuild could only start after this one let its lock go, and would find
        // the entry fresh: what is counted now is every rebuild there will be.
        anyhow::ensure!(done, "the background rebuild did not store the new value");
    }
    let rebuilds = db.queries();
    trace.record(
        Actor::Lab,
        What::Rebuilds {
            count: rebuilds,
            readers: READERS,
        },
    );
    // The first readers to act, and the lab's count.
    let mut shown: Vec<Actor> = Vec::new();
    for e in trace.events() {
        if e.actor != Actor::Lab && !shown.contains(&e.actor) && shown.len() < TRACED_READERS {
            shown.push(e.actor);
        }
    }
    let timeline = trace.timeline(|e| e.actor == Actor::Lab || shown.contains(&e.actor), 64);
    Ok(Outcome::new(rebuilds == 1)
        .metric("readers", READERS)
        .metric("instances", INSTANCES as u64)
        .metric("rebuild_ms", REBUILD.as_millis() as u64)
        .metric("db_rebuilds", rebuilds)
        .metric("stale_answers", stale.load(Ordering::Relaxed))
        .metric("slowest_read_ms", slowest.as_millis() as u64)
        .metric("elapsed_ms", started.elapsed().as_millis() as u64)
        .traced(timeline))
}
