//! 商户查询缓存: avalanche. Entries written together with the same TTL expire together, and
//! the readers' misses reach the database in one burst. Spreading every TTL by a random offset
//! spreads the expiries, and the database sees a trickle instead.
//!
//! Both versions are `hmdp-cache` reads; they differ only in the jitter of their TTLs.
//!
//! The verdict is on the expiries themselves, read with one `PTTL` pipeline right after the
//! writes (one instant for every key, so their spread is exact however late the answer comes),
//! not on when the reading loop noticed them: a stalled loop bunches up the misses it finds
//! afterwards, which would make a loaded machine see an avalanche the jitter did prevent. The
//! database's load per 100 ms is measured beside it, as the course shows it.

use std::time::{Duration, Instant};

use hmdp_cache::{ReadOptions, Strategy};

use super::{
    Experiment, Text,
    shops::{Shop, ShopDb, cache_client, new_shops},
    version,
};
use crate::{Lab, Outcome};

/// Shops cached together at the start.
const KEYS: i64 = 200;
/// Their TTL (and that of every entry a miss stores again).
const TTL: Duration = Duration::from_secs(1);
/// The jittered version's spread: ±50 %, expiries over a whole second.
const JITTER: f64 = 0.5;
/// The traffic: every `WAVE_EVERY`, a read of every key at once, until `RUN` has passed since
/// the entries were written (past every first expiry of the jittered version).
const WAVE_EVERY: Duration = Duration::from_millis(10);
const RUN: Duration = Duration::from_millis(1600);
/// The window the expiries (and the database's load) are measured in, and the share of the
/// keys that may expire within one such window for the invariant to hold.
const WINDOW: Duration = Duration::from_millis(100);
const HELD_AT_MOST: f64 = 0.3;

pub static EXPERIMENT: Experiment = Experiment {
    name: "cache-avalanche",
    chapter: "商户查询缓存",
    invariant: "entries cached together do not expire together: no 100 ms sees more than 30% of them expire (and their readers reach the database)",
    invariant_zh: "一起写入缓存的条目不会一起过期：任何 100 ms 内过期的不超过 30%（过期条目的读者会打到数据库）",
    lesson: Text {
        zh: "TTL 加随机偏移，让同一批写入的 key 分散在一段时间里过期。",
        en: "Add a random offset to each TTL, so that keys written together expire over a spread of time.",
    },
    versions: &[
        version!(
            "same-ttl",
            false,
            "every entry cached for exactly 1 s: they expire in the same instant",
            "每个条目都缓存整 1 秒：同一时刻一起过期",
            same_ttl
        ),
        version!(
            "jittered-ttl",
            true,
            "hmdp-cache jitter: every TTL spread by ±50 %, expiries over a second",
            "hmdp-cache 的 TTL 抖动：每个 TTL 随机偏移 ±50%，过期分散在一秒之内",
            jittered_ttl
        ),
    ],
};

async fn same_ttl(lab: &Lab) -> anyhow::Result<Outcome> {
    expiries(lab, "same-ttl", 0.0).await
}

async fn jittered_ttl(lab: &Lab) -> anyhow::Result<Outcome> {
    expiries(lab, "jittered-ttl", JITTER).await
}

/// `KEYS` shops cached at once with `TTL` ± `jitter`, then read in waves for `RUN`; the
/// database queries their misses made, per `WINDOW`.
async fn expiries(lab: &Lab, name: &str, jitter: f64) -> anyhow::Result<Outcome> {
    let ids = new_shops(lab, KEYS, name).await?;
    let cache = cache_client(lab).await?;
    let opts = ReadOptions::new(Strategy::CacheAside, TTL).jitter(jitter);
    let key = |id: i64| format!("{name}:cache:shop:{id}");
    // All written at once, so that with the same TTL they expire in the same few milliseconds.
    futures_util::future::try_join_all(ids.iter().enumerate().map(|(i, &id)| {
        let (cache, key) = (cache.clone(), key(id));
        async move {
            let shop = Shop {
                id,
                name: format!("{name}-{i}"),
            };
            cache.set(&key, &shop, TTL, jitter).await
        }
    }))
    .await?;
    let expiries =
        expiries_after_writes(lab, &ids.iter().map(|&id| key(id)).collect::<Vec<_>>()).await?;
    let db = ShopDb::new(lab, Duration::ZERO);
    let until = Instant::now() + RUN;
    let mut tick = tokio::time::interval(WAVE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reads = 0u64;
    while Instant::now() < until {
        tick.tick().await;
        let wave = futures_util::future::try_join_all(ids.iter().map(|&id| {
            let (cache, opts, db, key) = (cache.clone(), opts.clone(), db.clone(), key(id));
            async move {
                let shop: Option<Shop> = cache
                    .get_or_load(&key, &opts, move || async move { db.shop(id).await })
                    .await?;
                anyhow::ensure!(shop.is_some(), "shop {id} not found");
                anyhow::Ok(())
            }
        }))
        .await?;
        reads += wave.len() as u64;
    }
    let times = db.times();
    let peak = peak_in_window(&times, WINDOW);
    let peak_expiries = peak_in_window(&expiries, WINDOW);
    let share = peak_expiries as f64 / KEYS as f64;
    Ok(Outcome::new(share <= HELD_AT_MOST)
        .metric("keys", KEYS)
        .metric("ttl_ms", TTL.as_millis() as u64)
        .metric("jitter", jitter)
        .metric("reads", reads)
        .metric("db_queries", times.len() as u64)
        .metric("peak_db_queries_per_100ms", peak as u64)
        .metric("peak_expiries_per_100ms", peak_expiries as u64)
        .metric("peak_share_of_keys", format!("{:.0}%", share * 100.0)))
}

/// Every key's remaining TTL, read in one pipeline (so at one instant): when each expires,
/// relative to the others.
async fn expiries_after_writes(lab: &Lab, keys: &[String]) -> anyhow::Result<Vec<Duration>> {
    let mut pipe = redis::pipe();
    for k in keys {
        pipe.cmd("PTTL").arg(lab.key(k));
    }
    let pttls: Vec<i64> = pipe.query_async(&mut lab.redis.clone()).await?;
    pttls
        .into_iter()
        .zip(keys)
        .map(|(ms, k)| {
            anyhow::ensure!(ms >= 0, "{k} has no TTL right after its write ({ms})");
            Ok(Duration::from_millis(ms as u64))
        })
        .collect()
}

/// The most of `times` that fall within any span of `window` (a sliding window).
fn peak_in_window(times: &[Duration], window: Duration) -> usize {
    let mut times = times.to_vec();
    times.sort_unstable();
    let mut first = 0;
    let mut peak = 0;
    for (last, t) in times.iter().enumerate() {
        while *t - times[first] >= window {
            first += 1;
        }
        peak = peak.max(last + 1 - first);
    }
    peak
}
