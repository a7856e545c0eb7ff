//! Does the Redis holding the sale keep what it acknowledged through a restart?
//!
//! An accepted order lives only in its shard's stream until the worker writes it. A Redis with
//! neither an append-only file nor replicas confirming each grab (`HMDP_REDIS_WAIT_REPLICAS`)
//! forgets every such order on a restart, and their stock is sold again: nothing fails loudly,
//! so start-up and `/health` say it.

use super::RedisConn;

/// What `/health` lists under `warnings` while accepted orders would not survive a restart.
pub(crate) const NOT_DURABLE: &str = "redis_not_durable";

/// Whether Redis writes an append-only file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Persistence {
    Aof,
    /// No AOF: at best a periodic snapshot, which loses everything accepted since.
    NoAof,
    /// Redis would not say (`INFO` and `CONFIG` refused, or a cluster's mixed answer).
    Unknown,
}

/// Asks Redis: `INFO persistence` (`aof_enabled`), else `CONFIG GET appendonly`.
pub(crate) async fn persistence(redis: &RedisConn) -> Persistence {
    let mut redis = redis.clone();
    let info: redis::RedisResult<String> = redis::cmd("INFO")
        .arg("persistence")
        .query_async(&mut redis)
        .await;
    let from_info = info.ok().and_then(|info| {
        info.lines()
            .find_map(|l| l.strip_prefix("aof_enabled:"))
            .map(|v| v.trim() == "1")
    });
    let aof = match from_info {
        Some(aof) => Some(aof),
        None => redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendonly")
            .query_async::<Vec<String>>(&mut redis)
            .await
            .ok()
            .and_then(|reply| reply.get(1).map(|v| v == "yes")),
    };
    match aof {
        Some(true) => Persistence::Aof,
        Some(false) => Persistence::NoAof,
        None => Persistence::Unknown,
    }
}

/// True when accepted orders would be lost with Redis's data: no AOF, and grabs not confirmed
/// by replicas (`wait_replicas` 0).
pub(crate) async fn orders_at_risk(redis: &RedisConn, wait_replicas: u32) -> bool {
    wait_replicas == 0 && persistence(redis).await == Persistence::NoAof
}
