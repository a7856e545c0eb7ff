//! A primary with replicas watched by three Sentinels, all throw-away processes on free
//! loopback ports, stopped when dropped. Quick to fail over: a node is down after 1 s without
//! an answer, and a failed election is retried after 2 s.

use std::{collections::HashMap, time::Duration};

use crate::{RedisServer, free_port, wait_until};

/// How long the set may take to settle: replicas in sync, every Sentinel aware of the others.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A Redis primary, its replicas and three Sentinels monitoring it as [`SentinelSet::MASTER`].
pub struct SentinelSet {
    /// The data nodes by port; the first one started as the primary.
    nodes: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

impl SentinelSet {
    /// The master name the Sentinels monitor.
    pub const MASTER: &'static str = "hmdp-test";

    /// Starts a primary, `replicas` replicas of it and three Sentinels (quorum 2), and returns
    /// once the replicas are in sync and every Sentinel knows them and the other Sentinels.
    pub async fn start(replicas: usize) -> Self {
        let primary = RedisServer::start().await;
        let primary_port = primary.port().to_string();
        let mut nodes = vec![primary];
        for _ in 0..replicas {
            let extra = ["--replicaof", "127.0.0.1", &primary_port];
            nodes.push(RedisServer::start_with(free_port(), &extra).await);
        }
        let conf = format!(
            "sentinel monitor {m} 127.0.0.1 {primary_port} 2\n\
             sentinel down-after-milliseconds {m} 1000\n\
             sentinel failover-timeout {m} 1000\n\
             sentinel parallel-syncs {m} {replicas}",
            m = Self::MASTER,
        );
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            sentinels.push(RedisServer::start_sentinel(free_port(), &conf).await);
        }
        let set = Self { nodes, sentinels };
        set.wait_settled(replicas).await;
        set
    }

    /// The Sentinels as `host:port,host:port,…` (`HMDP_REDIS_SENTINELS`).
    pub fn sentinel_addrs(&self) -> String {
        self.sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The data nodes' URLs, the first started as the primary.
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The port of the primary the first Sentinel that answers names now.
    pub async fn primary_port(&self) -> Option<u16> {
        for sentinel in &self.sentinels {
            if let Ok(Some((_, port))) = master_addr(&sentinel.url()).await {
                return Some(port);
            }
        }
        None
    }

    /// Kills (SIGKILL) the data node on `port`.
    pub fn kill_node(&mut self, port: u16) {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .expect("a data node on that port")
            .kill();
    }

    /// Asks a Sentinel for a planned failover (`SENTINEL FAILOVER`): a replica is promoted
    /// while the primary keeps running, and the primary is made its replica afterwards.
    pub async fn fail_over(&self) {
        let mut conn = conn(&self.sentinels[0].url())
            .await
            .expect("a connection to a Sentinel");
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(Self::MASTER)
            .query_async(&mut conn)
            .await
            .expect("the Sentinel starts the failover");
    }

    /// Waits until every Sentinel names another primary than `old_port`, and returns it.
    pub async fn wait_promotion(&self, old_port: u16) -> u16 {
        let urls: Vec<String> = self.sentinels.iter().map(RedisServer::url).collect();
        wait_until(
            SETTLE_TIMEOUT,
            "every Sentinel naming a new primary",
            async || {
                let mut named = Vec::new();
                for url in &urls {
                    match master_addr(url).await {
                        Ok(Some((_, port))) if port != old_port => named.push(port),
                        _ => return false,
                    }
                }
                named.windows(2).all(|w| w[0] == w[1])
            },
        )
        .await;
        self.primary_port().await.expect("a primary")
    }

    async fn wait_settled(&self, replicas: usize) {
        let primary = self.nodes[0].url();
        let replica_urls: Vec<String> = self.nodes[1..].iter().map(RedisServer::url).collect();
        wait_until(SETTLE_TIMEOUT, "the replicas in sync", async || {
            let Ok(p) = info(&primary).await else {
                return false;
            };
            for url in &replica_urls {
                let Ok(r) = info(url).await else { return false };
                if r.get("master_link_status").map(String::as_str) != Some("up")
                    || r.get("slave_repl_offset") != p.get("master_repl_offset")
                {
                    return false;
                }
            }
            true
        })
        .await;
        let urls: Vec<String> = self.sentinels.iter().map(RedisServer::url).collect();
        let what = "every Sentinel knowing the replicas and the other Sentinels";
        wait_until(SETTLE_TIMEOUT, what, async || {
            for url in &urls {
                let Ok(m) = sentinel_master(url).await else {
                    return false;
                };
                let count = |k: &str| m.get(k).and_then(|v| v.parse::<usize>().ok());
                if count("num-slaves") != Some(replicas)
                    || count("num-other-sentinels") != Some(urls.len() - 1)
                {
                    return false;
                }
            }
            true
        })
        .await;
    }
}

async fn conn(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(500)))
        .set_response_timeout(Some(Duration::from_millis(500)));
    redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

async fn info(url: &str) -> redis::RedisResult<HashMap<String, String>> {
    let text: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut conn(url).await?)
        .await?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect())
}

async fn sentinel_master(url: &str) -> redis::RedisResult<HashMap<String, String>> {
    redis::cmd("SENTINEL")
        .arg("MASTER")
        .arg(SentinelSet::MASTER)
        .query_async(&mut conn(url).await?)
        .await
}

async fn master_addr(url: &str) -> redis::RedisResult<Option<(String, u16)>> {
    redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(SentinelSet::MASTER)
        .query_async(&mut conn(url).await?)
        .await
}
