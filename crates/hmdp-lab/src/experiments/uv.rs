//! UV统计: unique visitors of a page in a day. A SET of visitor ids per page per day counts them
//! exactly, and holds every id: its memory grows with the visitors, for every page and every
//! day kept. A HyperLogLog (`PFADD` / `PFCOUNT`) holds at most 12 KB of registers however many
//! visit, and its count is off by about 0.81 % (one standard error). Here a busy page's day:
//! [`VISITORS`] distinct visitors, each coming [`VISITS`] times; the memory is Redis's own
//! `MEMORY USAGE` of the key.

use super::{Experiment, Text, version};
use crate::{Lab, Outcome};

/// Distinct visitors in the day.
const VISITORS: u64 = 100_000;
/// Visits each makes.
const VISITS: u64 = 2;
/// What a page-day's count may cost, and how far off it may be.
const BUDGET_BYTES: u64 = 16 * 1024;
const TOLERANCE: f64 = 0.02;

pub static EXPERIMENT: Experiment = Experiment {
    name: "uv-count",
    chapter: "UV统计",
    invariant: "a page's unique visitors of a day are counted within 2 % in at most 16 KB of Redis",
    invariant_zh: "一个页面一天的独立访客数，误差在 2% 以内，占用 Redis 内存不超过 16 KB",
    lesson: Text {
        zh: "UV 只要一个近似的数：HyperLogLog 每个 key 最多 12 KB、误差约 0.81%，而 SET 的内存随访客数线性增长。",
        en: "A visitor count needs only an estimate: a HyperLogLog key stays within 12 KB at about 0.81 % error, while a SET grows with every visitor.",
    },
    versions: &[
        version!(
            "set-per-day",
            false,
            "SADD uv:{page}:{day} <visitor>, SCARD: exact, every id kept",
            "SADD uv:{page}:{day} <访客>，SCARD 计数：精确，但每个 id 都要存",
            set_per_day
        ),
        version!(
            "hyperloglog",
            true,
            "PFADD uv:{page}:{day} <visitor>, PFCOUNT: at most 12 KB, about 0.81 % off",
            "PFADD uv:{page}:{day} <访客>，PFCOUNT 计数：最多 12 KB，误差约 0.81%",
            hyperloglog
        ),
    ],
};

async fn set_per_day(lab: &Lab) -> anyhow::Result<Outcome> {
    count(lab, "SADD", "SCARD").await
}

async fn hyperloglog(lab: &Lab) -> anyhow::Result<Outcome> {
    count(lab, "PFADD", "PFCOUNT").await
}

/// The day's visits added with `add` (a thousand to a command), counted with `card`.
async fn count(lab: &Lab, add: &str, card: &str) -> anyhow::Result<Outcome> {
    let key = lab.key(&format!("uv:{}:1:20240310", add.to_lowercase()));
    let mut redis = lab.redis.clone();
    for _ in 0..VISITS {
        let mut first = 0;
        while first < VISITORS {
            let last = (first + 1000).min(VISITORS);
            let mut cmd = redis::cmd(add);
            cmd.arg(&key);
            for visitor in first..last {
                cmd.arg(format!("user:{visitor}"));
            }
            cmd.query_async::<()>(&mut redis).await?;
            first = last;
        }
    }
    let counted: u64 = redis::cmd(card).arg(&key).query_async(&mut redis).await?;
    let bytes: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(&key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(&mut redis)
        .await?;
    let error = (counted as f64 - VISITORS as f64).abs() / VISITORS as f64;
    Ok(Outcome::new(error <= TOLERANCE && bytes <= BUDGET_BYTES)
        .metric("visitors", VISITORS)
        .metric("visits", VISITORS * VISITS)
        .metric("counted", counted)
        .metric("error", format!("{:.2}%", error * 100.0))
        .metric("bytes", bytes)
        .metric(
            "bytes_per_visitor",
            format!("{:.3}", bytes as f64 / VISITORS as f64),
        ))
}
