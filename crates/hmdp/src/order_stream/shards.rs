//! The shard count is part of the data: a voucher's keys and queued orders live in shard
//! `voucher id mod HMDP_SECKILL_SHARDS`, so every instance and worker must use the count that
//! is recorded in Redis (docs/internals/flash-sale.md, "Changing `HMDP_SECKILL_SHARDS`").

use std::sync::LazyLock;

use redis::Script;

use crate::kv::{Keys, RedisConn};

/// This instance's shard count differs from the one recorded in Redis.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "Redis (key {key}) holds flash-sale orders in {recorded} shard(s), but HMDP_SECKILL_SHARDS is \
     {configured}: with another count, orders queued in the old shards would be stranded and \
     stock could be sold twice, so this instance refuses to take or write orders. Start it with \
     HMDP_SECKILL_SHARDS={recorded}. To change the count: stop taking orders, let the workers \
     drain every order stream (hmdp_order_stream_pending and hmdp_order_stream_lag at 0), settle \
     the dead letters (seckill:{{s<k>}}:orders:dead), then delete the keys {prefix}seckill:* and \
     start every instance with the new count"
)]
pub struct ShardCountMismatch {
    pub key: String,
    pub prefix: String,
    pub recorded: u32,
    pub configured: u32,
}

/// Records the shard count the first time and answers the recorded one.
///
/// KEYS: the shard-count key. ARGV: this instance's shard count. Returns the recorded count.
static RECORD_SHARDS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return tonumber(redis.call('GET', KEYS[1]))
",
    )
});

/// Records `shards` as the deployment's shard count if none is recorded yet; the inner error
/// when another count is. Also warns when Redis may evict keys (an evicted order stream loses
/// accepted orders, which nothing can repair).
pub(crate) async fn check_shard_count(
    redis: &RedisConn,
    keys: &Keys,
    shards: u32,
) -> redis::RedisResult<Result<(), ShardCountMismatch>> {
    let mut redis = redis.clone();
    let key = keys.seckill_shards();
    let recorded: Option<u32> = RECORD_SHARDS
        .key(&key)
        .arg(shards)
        .invoke_async(&mut redis)
        .await?;
    let mismatch = |recorded| ShardCountMismatch {
        key: key.clone(),
        prefix: keys.prefix().to_owned(),
        recorded,
        configured: shards,
    };
    match recorded {
        Some(r) if r == shards => {}
        Some(recorded) => {
            let e = mismatch(recorded);
            tracing::error!(error = %e, "flash sale refused to start");
            return Ok(Err(e));
        }
        // Not a number: written by hand. Refuse rather than guess.
        None => return Ok(Err(mismatch(0))),
    }
    warn_if_evicting(&mut redis).await;
    Ok(Ok(()))
}

/// Logs a warning when Redis's `maxmemory-policy` lets it evict flash-sale keys.
async fn warn_if_evicting(redis: &mut RedisConn) {
    // `CONFIG` may be disabled (managed Redis): then nothing can be said.
    let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(redis)
        .await;
    if let Ok(reply) = reply
        && let Some(policy) = reply.get(1)
        && policy != "noeviction"
    {
        tracing::warn!(
            policy = %policy,
            "Redis may evict keys (maxmemory-policy is not noeviction): an evicted order stream \
             loses accepted orders; set maxmemory-policy noeviction"
        );
    }
}
