//! 商户查询缓存: keeping the cache and the database in step on writes. Three orders of a
//! writer's two steps, under the same workload: readers doing cache-aside reads all along, and
//! two writers per shop, the first of which pauses between its two steps (a slow database
//! write, a GC pause) while the second one runs start to end. Entries have no TTL, so nothing
//! repairs a stale entry while it is measured.
//!
//! - update the cache, then the database: the writers' steps interleave, the cache keeps the
//!   second writer's value and the database the first's;
//! - delete the cache, then write the database: a reader refills the entry with the old value
//!   during the pause, and nothing deletes it after the write;
//! - write the database, then delete the cache: the pause only delays the delete.
//!
//! The last order has a narrow window of its own: a reader that read the database before a
//! write and stores what it read after that write's delete. The workload rules it out: a
//! reader's miss (its query and its store) and a database write of the same shop never
//! overlap, as if reads were always far quicker than a write's pause.
//!
//! The writers are ordered by events, not timers, so the interleaving happens on every run:
//! the second writer starts when the first has done its first step, and the first's pause
//! lasts until the second is done and a reader has cached the shop again.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use redis::aio::ConnectionManager;
use sqlx::AnyPool;
use tokio::sync::{Notify, RwLock};

use super::{Experiment, Text, shops::new_shops, version};
use crate::{
    Lab, Outcome, Trace,
    trace::{Actor, What},
};

/// Shops written and read, each its own race.
const SHOPS: i64 = 5;
/// Readers per shop, reading round and round until the writers are done.
const READERS: usize = 4;
/// How often each reader reads: many times within any pause.
const BETWEEN_READS: Duration = Duration::from_millis(1);
/// How long the first writer's pause waits for the second writer and a reader, at most.
const PAUSE_PATIENCE: Duration = Duration::from_secs(5);
/// Events the trace shows at most: one shop's writers and the misses of its readers.
const TRACED_EVENTS: usize = 40;

pub static EXPERIMENT: Experiment = Experiment {
    name: "cache-consistency",
    chapter: "商户查询缓存",
    invariant: "after concurrent writes settle, no cached shop differs from the database",
    invariant_zh: "并发写入平息之后，没有哪个缓存的商户和数据库不一致",
    lesson: Text {
        zh: "更新时先写数据库、再删缓存；先删缓存或者直接改缓存，都会把旧值留在缓存里。",
        en: "On update, write the database first and delete the cache entry after; deleting first or setting the cache leaves old values cached.",
    },
    versions: &[
        version!(
            "update-cache-then-db",
            false,
            "SET the cache to the new value, then UPDATE the database",
            "先把缓存 SET 成新值，再 UPDATE 数据库",
            update_cache_then_db
        ),
        version!(
            "delete-cache-then-db",
            false,
            "DEL the cache entry, then UPDATE the database",
            "先 DEL 缓存，再 UPDATE 数据库",
            delete_cache_then_db
        ),
        version!(
            "db-then-delete-cache",
            true,
            "UPDATE the database, then DEL the cache entry (a reader's miss never overlaps a write here, \
             which rules out this order's narrow window)",
            "先 UPDATE 数据库，再 DEL 缓存（这里读者的未命中不会和写交叠，排除了这个顺序仅剩的小窗口）",
            db_then_delete_cache
        ),
    ],
};

/// A writer's two steps, in order.
#[derive(Clone, Copy)]
enum Order {
    UpdateCacheThenDb,
    DeleteCacheThenDb,
    DbThenDeleteCache,
}

async fn update_cache_then_db(lab: &Lab) -> anyhow::Result<Outcome> {
    writes(lab, "update-cache-then-db", Order::UpdateCacheThenDb).await
}

async fn delete_cache_then_db(lab: &Lab) -> anyhow::Result<Outcome> {
    writes(lab, "delete-cache-then-db", Order::DeleteCacheThenDb).await
}

async fn db_then_delete_cache(lab: &Lab) -> anyhow::Result<Outcome> {
    writes(lab, "db-then-delete-cache", Order::DbThenDeleteCache).await
}

/// One shop's cache entry, its row, and the gate that keeps a reader's miss and a database
/// write of the shop apart.
#[derive(Clone)]
struct Entry {
    id: i64,
    key: String,
    redis: ConnectionManager,
    db: AnyPool,
    gate: Arc<RwLock<()>>,
    trace: Trace,
}

impl Entry {
    async fn set_cache(&self, name: &str) -> anyhow::Result<()> {
        let _: () = redis::cmd("SET")
            .arg(&self.key)
            .arg(name)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(())
    }

    async fn delete_cache(&self) -> anyhow::Result<()> {
        let _: () = redis::cmd("DEL")
            .arg(&self.key)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(())
    }

    async fn cached(&self) -> anyhow::Result<Option<String>> {
        Ok(redis::cmd("GET")
            .arg(&self.key)
            .query_async(&mut self.redis.clone())
            .await?)
    }

    async fn stored(&self) -> anyhow::Result<String> {
        Ok(sqlx::query_scalar("SELECT name FROM tb_shop WHERE id = ?")
            .bind(self.id)
            .fetch_one(&self.db)
            .await?)
    }

    async fn update_db(&self, name: &str) -> anyhow::Result<()> {
        let _gate = self.gate.write().await;
        sqlx::query("UPDATE tb_shop SET name = ? WHERE id = ?")
            .bind(name)
            .bind(self.id)
            .execute(&self.db)
            .await?;
        Ok(())
    }

    /// A cache-aside read: the entry, or on a miss the row, stored without a TTL. A miss
    /// goes into the trace as `who`'s, when given (hits change nothing and are not recorded).
    async fn read(&self, who: Option<Actor>) -> anyhow::Result<String> {
        if let Some(name) = self.cached().await? {
            return Ok(name);
        }
        let record = |what| {
            if let Some(who) = who {
                self.trace.record(who, what);
            }
        };
        record(What::CacheMiss);
        let _gate = self.gate.read().await;
        let name = self.stored().await?;
        record(What::DbRead {
            value: name.clone(),
        });
        self.set_cache(&name).await?;
        record(What::CacheSet {
            value: name.clone(),
        });
        Ok(name)
    }

    /// A writer's two steps in `order`: `between` runs after the first step (and tells the
    /// other writer), `pause` before the second.
    async fn write(
        &self,
        order: Order,
        name: &str,
        who: Actor,
        between: impl FnOnce(),
        pause: impl std::future::Future<Output = anyhow::Result<()>>,
    ) -> anyhow::Result<()> {
        let value = name.to_owned();
        match order {
            Order::UpdateCacheThenDb => {
                self.set_cache(name).await?;
                self.trace.record(who, What::CacheSet { value });
            }
            Order::DeleteCacheThenDb => {
                self.delete_cache().await?;
                self.trace.record(who, What::CacheDel);
            }
            Order::DbThenDeleteCache => {
                self.update_db(name).await?;
                self.trace.record(who, What::DbUpdate { value });
            }
        }
        between();
        pause.await?;
        let value = name.to_owned();
        match order {
            Order::UpdateCacheThenDb | Order::DeleteCacheThenDb => {
                self.update_db(name).await?;
                self.trace.record(who, What::DbUpdate { value });
            }
            Order::DbThenDeleteCache => {
                self.delete_cache().await?;
                self.trace.record(who, What::CacheDel);
            }
        }
        Ok(())
    }

    /// Polls the entry until it is cached, for at most `wait`.
    async fn until_cached(&self, wait: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + wait;
        while self.cached().await?.is_none() {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "no reader cached {} within {wait:?}",
                self.key
            );
            tokio::time::sleep(BETWEEN_READS).await;
        }
        Ok(())
    }
}

/// For each of `SHOPS` shops, cached and read all along by `READERS` readers: a first writer
/// that pauses between its steps until the second is done and a reader has cached the shop
/// again, and a second that starts once the first has done its first step and does not pause.
/// Once all are done, the entries that differ from their rows are counted.
async fn writes(lab: &Lab, name: &str, order: Order) -> anyhow::Result<Outcome> {
    let ids = new_shops(lab, SHOPS, name).await?;
    let trace = Trace::start();
    let entries: Vec<Entry> = ids
        .iter()
        .map(|&id| Entry {
            id,
            key: lab.key(&format!("{name}:cache:shop:{id}")),
            redis: lab.redis.clone(),
            db: lab.db.clone(),
            gate: Arc::default(),
            trace: trace.clone(),
        })
        .collect();
    for e in &entries {
        e.read(None).await?;
    }
    let writing = Arc::new(AtomicBool::new(true));
    let reads = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for e in &entries {
        for n in 1..=READERS as u32 {
            let (e, writing, reads) = (e.clone(), writing.clone(), reads.clone());
            let me = Actor::Reader {
                shop: e.id,
                n,
                instance: None,
            };
            readers.push(tokio::spawn(async move {
                while writing.load(Ordering::Relaxed) {
                    e.read(Some(me)).await?;
                    reads.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(BETWEEN_READS).await;
                }
                anyhow::Ok(())
            }));
        }
    }
    let longest_pause = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for e in &entries {
        let (first_stepped, second_done) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let (first, stepped, done) = (e.clone(), first_stepped.clone(), second_done.clone());
        let longest = longest_pause.clone();
        writers.push(tokio::spawn(async move {
            let me = Actor::Writer {
                shop: first.id,
                n: 1,
            };
            let pause = async {
                let started = std::time::Instant::now();
                first.trace.record(me, What::Pause);
                tokio::time::timeout(PAUSE_PATIENCE, done.notified())
                    .await
                    .map_err(|_| anyhow::anyhow!("the second writer did not finish"))?;
                first.until_cached(PAUSE_PATIENCE).await?;
                first.trace.record(me, What::Resume);
                longest.fetch_max(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                anyhow::Ok(())
            };
            first
                .write(
                    order,
                    &format!("first-{}", first.id),
                    me,
                    || stepped.notify_one(),
                    pause,
                )
                .await
        }));
        let second = e.clone();
        writers.push(tokio::spawn(async move {
            tokio::time::timeout(PAUSE_PATIENCE, first_stepped.notified())
                .await
                .map_err(|_| anyhow::anyhow!("the first writer did not do its first step"))?;
            let me = Actor::Writer {
                shop: second.id,
                n: 2,
            };
            second
                .write(order, &format!("second-{}", second.id), me, || {}, async {
                    Ok(())
                })
                .await?;
            second_done.notify_one();
            anyhow::Ok(())
        }));
    }
    for w in writers {
        w.await??;
    }
    // A few more reads after the last write, as traffic goes on (bounded, should a reader
    // have failed: its error is reported below).
    let reads_at_end = reads.load(Ordering::Relaxed);
    let more = async {
        while reads.load(Ordering::Relaxed) < reads_at_end + (SHOPS as u64) * READERS as u64 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), more).await;
    writing.store(false, Ordering::Relaxed);
    for r in readers {
        r.await??;
    }
    let mut stale = 0i64;
    let mut missing = 0i64;
    // The shop whose race the trace shows: the first that went stale, else the first.
    let mut shown = entries[0].id;
    for e in &entries {
        let stored = e.stored().await?;
        let cached = e.cached().await?;
        match &cached {
            Some(cached) if *cached != stored => {
                if stale == 0 {
                    shown = e.id;
                }
                stale += 1;
            }
            Some(_) => {}
            None => missing += 1,
        }
        let shop = e.id;
        trace.record(
            Actor::Lab,
            What::CacheVsDb {
                shop,
                cached,
                stored,
            },
        );
    }
    let timeline = trace.timeline(
        |e| match &e.what {
            What::CacheVsDb { shop, .. } => *shop == shown,
            _ => e.actor.shop() == Some(shown),
        },
        TRACED_EVENTS,
    );
    Ok(Outcome::new(stale == 0)
        .metric("shops", SHOPS)
        .metric("writes", SHOPS * 2)
        .metric("reads", reads.load(Ordering::Relaxed))
        .metric("pause_ms", longest_pause.load(Ordering::Relaxed))
        .metric("stale_entries", stale)
        .metric("uncached", missing)
        .traced(timeline))
}
