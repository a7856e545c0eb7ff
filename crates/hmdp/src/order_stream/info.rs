//! What Redis says about an order stream: `XLEN` and the order group's line of
//! `XINFO GROUPS`, read into redis-rs's typed reply. The dashboard, the metrics and the
//! worker's trim all read it here.

use redis::streams::StreamInfoGroupsReply;

use super::GROUP;
use crate::{
    kv::{Keys, RedisConn, orders_at_risk},
    metrics::{Family, Gauge, Registry},
};

/// The order group on one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupInfo {
    /// Entries delivered to a consumer and not yet acknowledged.
    pub pending: u64,
    /// Entries not yet delivered to any consumer; `None` where Redis cannot tell (before 7.0,
    /// or after some deletions).
    pub lag: Option<u64>,
    /// The last entry delivered to a consumer (`0-0`: none yet).
    pub last_delivered_id: String,
}

/// The order group on `stream`, or `None` when it has not been created. Fails when the stream
/// does not exist (`XINFO` answers "no such key").
pub(crate) async fn group_info(
    redis: &RedisConn,
    stream: &str,
) -> redis::RedisResult<Option<GroupInfo>> {
    let reply: StreamInfoGroupsReply = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(stream)
        .query_async(&mut redis.clone())
        .await?;
    Ok(reply
        .groups
        .into_iter()
        .find(|g| g.name == GROUP)
        .map(|g| GroupInfo {
            pending: g.pending as u64,
            lag: g.lag.map(|l| l as u64),
            last_delivered_id: g.last_delivered_id,
        }))
}

/// One stream's gauges, read when asked (dashboard, `/metrics`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StreamGauges {
    /// Entries in the stream (written ones are trimmed away over time).
    pub length: u64,
    /// The order group's counters; `None` when there is no group (yet) or `XINFO` failed.
    pub group: Option<GroupInfo>,
}

/// Reads the gauges of `stream`; fails only when `XLEN` does.
pub(crate) async fn read_gauges(
    redis: &RedisConn,
    stream: &str,
) -> redis::RedisResult<StreamGauges> {
    let length: u64 = redis::cmd("XLEN")
        .arg(stream)
        .query_async(&mut redis.clone())
        .await?;
    let group = group_info(redis, stream).await.ok().flatten();
    Ok(StreamGauges { length, group })
}

/// The order streams' gauges on `/metrics` (`hmdp_order_stream_{length,pending,lag}{shard}`),
/// and whether Redis would keep what they hold through a restart (`hmdp_redis_orders_at_risk`),
/// read from Redis at scrape time by [`StreamMetrics::refresh`].
#[derive(Debug, Clone, Default)]
pub struct StreamMetrics {
    length: ShardGauges,
    pending: ShardGauges,
    lag: ShardGauges,
    at_risk: Gauge,
    /// `Some(HMDP_REDIS_WAIT_REPLICAS)` when accepted orders wait in the streams (`async`
    /// mode); `None` leaves `at_risk` at 0, as `/health` says nothing then either.
    sale_redis: Option<u32>,
}

type ShardGauges = Family<[(&'static str, String); 1], Gauge>;

impl StreamMetrics {
    /// Gauges that also watch the durability of the Redis holding the streams; `sale_redis` as
    /// `/health` takes it (`http::health::sale_redis`).
    pub fn new(sale_redis: Option<u32>) -> Self {
        Self {
            sale_redis,
            ..Self::default()
        }
    }

    /// Adds the gauges to `registry`; they show what the last [`refresh`](Self::refresh) read.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "hmdp_order_stream_length",
            "Entries in each order stream",
            self.length.clone(),
        );
        registry.register(
            "hmdp_order_stream_pending",
            "Entries delivered to a worker, not yet written",
            self.pending.clone(),
        );
        registry.register(
            "hmdp_order_stream_lag",
            "Entries not yet delivered to any worker",
            self.lag.clone(),
        );
        // A setting to fix rather than an outage, so `/health` only warns (`redis_not_durable`);
        // a gauge lets an alert say it to whoever does not read `/health`'s body.
        registry.register(
            "hmdp_redis_orders_at_risk",
            "1 while a restart of the Redis holding the order streams would lose the accepted \
             orders not yet written (no AOF, and HMDP_REDIS_WAIT_REPLICAS is 0)",
            self.at_risk.clone(),
        );
    }

    /// Reads every shard's gauges; a shard whose stream cannot be read shows none. Asks Redis
    /// whether it persists, too, when accepted orders wait in it.
    pub async fn refresh(&self, redis: &RedisConn, keys: &Keys, shards: u32) {
        let at_risk = match self.sale_redis {
            Some(wait_replicas) => orders_at_risk(redis, wait_replicas).await,
            None => false,
        };
        self.at_risk.set(i64::from(at_risk));
        self.length.clear();
        self.pending.clear();
        self.lag.clear();
        for shard in 0..shards {
            let Ok(g) = read_gauges(redis, &keys.seckill_stream(shard)).await else {
                continue;
            };
            let label = [("shard", shard.to_string())];
            self.length.get_or_create(&label).set(g.length as i64);
            if let Some(group) = g.group {
                self.pending.get_or_create(&label).set(group.pending as i64);
                if let Some(lag) = group.lag {
                    self.lag.get_or_create(&label).set(lag as i64);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::managed::ManagedRedis;

    #[tokio::test]
    async fn the_reader_sees_length_pending_and_lag_on_a_real_redis() {
        let dir = tempfile::tempdir().unwrap();
        let server = ManagedRedis::start(dir.path()).await.unwrap();
        let redis = RedisConn::connect(server.url()).await.unwrap();
        let mut c = redis.clone();

        // No stream: XLEN says 0, XINFO fails, the gauges have no group.
        assert!(group_info(&redis, "s").await.is_err());
        let g = read_gauges(&redis, "s").await.unwrap();
        assert_eq!((g.length, g.group), (0, None));

        // A stream without our group.
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg("s")
            .arg("other")
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(group_info(&redis, "s").await.unwrap(), None);

        // Ours, three entries, one delivered.
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg("s")
            .arg(GROUP)
            .arg("0")
            .query_async(&mut c)
            .await
            .unwrap();
        for i in 1..=3 {
            let _: String = redis::cmd("XADD")
                .arg("s")
                .arg(format!("{i}-0"))
                .arg("k")
                .arg("v")
                .query_async(&mut c)
                .await
                .unwrap();
        }
        let _: redis::Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(GROUP)
            .arg("c1")
            .arg("COUNT")
            .arg(1)
            .arg("STREAMS")
            .arg("s")
            .arg(">")
            .query_async(&mut c)
            .await
            .unwrap();
        let g = read_gauges(&redis, "s").await.unwrap();
        assert_eq!(g.length, 3);
        assert_eq!(
            g.group,
            Some(GroupInfo {
                pending: 1,
                lag: Some(2),
                last_delivered_id: "1-0".into(),
            })
        );
        server.stop().await;
    }
}
