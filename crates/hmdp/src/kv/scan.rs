//! Walking the keys that match a pattern with `SCAN`. A cluster node's `SCAN` sees only the
//! keys of that node, so on a Redis Cluster each primary (as `CLUSTER SLOTS` names them at the
//! start) is scanned in turn, its commands routed to it by address. A primary added or a slot
//! moved while the walk runs may make it miss or repeat keys: its users must tolerate both.

use redis::{
    FromRedisValue, RedisResult, Value,
    cluster_routing::{RoutingInfo, SingleNodeRoutingInfo},
};

use super::RedisConn;

/// How many keys one `SCAN` step looks at (a hint to Redis).
const SCAN_COUNT: usize = 1000;

/// The keys matching a pattern, a batch at a time (a key may come twice; none added during the
/// walk is promised).
pub(crate) struct KeyScan {
    conn: RedisConn,
    pattern: String,
    kind: Option<&'static str>,
    /// The nodes to scan: `None` for the single node, else a primary's host and port.
    nodes: Vec<Option<(String, u16)>>,
    node: usize,
    cursor: u64,
}

impl KeyScan {
    /// Starts a walk over the keys matching `pattern` and, if given, of type `kind` (`SCAN …
    /// TYPE`, Redis 6.0 and later); on a cluster, asks for its primaries first.
    pub(crate) async fn start(
        redis: &RedisConn,
        pattern: String,
        kind: Option<&'static str>,
    ) -> RedisResult<Self> {
        let nodes = match redis {
            RedisConn::Single(_) | RedisConn::Sentinel(_) => vec![None],
            RedisConn::Cluster(_) => primaries(&mut redis.clone())
                .await?
                .into_iter()
                .map(Some)
                .collect(),
        };
        Ok(Self {
            conn: redis.clone(),
            pattern,
            kind,
            nodes,
            node: 0,
            cursor: 0,
        })
    }

    /// The next non-empty batch of keys, or `None` when every node has been walked.
    pub(crate) async fn next_batch(&mut self) -> RedisResult<Option<Vec<String>>> {
        loop {
            let Some(node) = self.nodes.get(self.node) else {
                return Ok(None);
            };
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(self.cursor)
                .arg("MATCH")
                .arg(&self.pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            if let Some(kind) = self.kind {
                cmd.arg("TYPE").arg(kind);
            }
            let (next, keys): (u64, Vec<String>) = match (&mut self.conn, node) {
                (RedisConn::Cluster(c), Some((host, port))) => {
                    let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: host.clone(),
                        port: *port,
                    });
                    FromRedisValue::from_redis_value(c.route_command(cmd, to).await?)?
                }
                (conn, _) => cmd.query_async(conn).await?,
            };
            if next == 0 {
                self.node += 1;
            }
            self.cursor = next;
            if !keys.is_empty() {
                return Ok(Some(keys));
            }
        }
    }
}

/// The host and port of each primary of the cluster, from `CLUSTER SLOTS` (each range's first
/// node is its primary).
async fn primaries(conn: &mut RedisConn) -> RedisResult<Vec<(String, u16)>> {
    let ranges: Vec<Vec<Value>> = redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await?;
    let mut out: Vec<(String, u16)> = Vec::new();
    for range in ranges {
        let Some(primary) = range.into_iter().nth(2) else {
            continue;
        };
        let mut node = Vec::<Value>::from_redis_value(primary)?.into_iter();
        let (Some(host), Some(port)) = (node.next(), node.next()) else {
            continue;
        };
        let node = (
            String::from_redis_value(host)?,
            u16::from_redis_value(port)?,
        );
        if !out.contains(&node) {
            out.push(node);
        }
    }
    Ok(out)
}
