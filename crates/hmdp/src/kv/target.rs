//! Where Redis is: what every connection of a process is opened from.
//!
//! The shared connection is not the only one: the worker's blocking stream reads, the replica
//! waits and every pub/sub subscription need connections of their own. Opening them all from
//! one [`RedisTarget`] (never from a URL kept aside) is what lets them follow a Sentinel
//! failover: for a Sentinel-watched primary, [`RedisTarget::client`] is the primary of the
//! moment.

use futures_util::future::BoxFuture;
use tokio::sync::watch;

use super::{RedisConn, SentinelPrimary, sentinel::may_have_moved};
use crate::config::redact_url;

/// Where Redis is: one node, a cluster, or a primary found through Redis Sentinel. Cheap to
/// clone.
#[derive(Clone, Debug)]
pub enum RedisTarget {
    /// One node at this `redis://` URL.
    Single(String),
    /// A Redis Cluster, reached through these nodes' URLs.
    Cluster(Vec<String>),
    /// One primary with replicas, named by the Sentinels (which may promote another).
    Sentinel(SentinelPrimary),
}

impl RedisTarget {
    /// One `redis://` URL for a single node, several comma-separated for a cluster.
    pub fn from_url(url: &str) -> Self {
        let nodes: Vec<String> = url
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if nodes.len() > 1 {
            Self::Cluster(nodes)
        } else {
            Self::Single(nodes.into_iter().next().unwrap_or_else(|| url.to_owned()))
        }
    }

    /// A new connection of its own (not shared with earlier ones).
    pub async fn connect(&self) -> redis::RedisResult<RedisConn> {
        match self {
            Self::Single(url) => RedisConn::connect_single(url).await,
            Self::Cluster(nodes) => RedisConn::connect_cluster(nodes).await,
            Self::Sentinel(primary) => RedisConn::connect_sentinel(primary).await,
        }
    }

    /// A plain client of the node that takes writes now: the node, the first node of a
    /// cluster (where `PUBLISH` reaches every node), or the Sentinels' primary of the moment.
    pub fn client(&self) -> redis::RedisResult<redis::Client> {
        match self {
            Self::Single(url) => redis::Client::open(url.as_str()),
            Self::Cluster(nodes) => redis::Client::open(nodes.first().map_or("", String::as_str)),
            Self::Sentinel(primary) => Ok(primary.client()),
        }
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// How many times the primary moved (always 0 but with Sentinel): a connection made at an
    /// older epoch points at a node that no longer takes writes.
    pub fn epoch(&self) -> u64 {
        match self {
            Self::Sentinel(primary) => primary.epoch(),
            _ => 0,
        }
    }

    /// Whether the Sentinels are failing the primary over (always false but with Sentinel): see
    /// [`SentinelPrimary::failing_over`].
    pub fn failing_over(&self) -> bool {
        match self {
            Self::Sentinel(primary) => primary.failing_over(),
            _ => false,
        }
    }

    /// How many failovers a Sentinel announced to this process (always 0 but with Sentinel).
    pub fn failovers_announced(&self) -> u64 {
        match self {
            Self::Sentinel(primary) => primary.failovers_announced().get(),
            _ => 0,
        }
    }

    /// Told each time the Sentinels' primary moves; `None` unless on Sentinel.
    pub fn moves(&self) -> Option<watch::Receiver<u64>> {
        match self {
            Self::Sentinel(primary) => Some(primary.moves()),
            _ => None,
        }
    }

    /// A connection of its own failed with `e`: on Sentinel, if that may mean the primary
    /// moved, look again now.
    pub fn report(&self, e: &redis::RedisError) {
        if let Self::Sentinel(primary) = self
            && may_have_moved(e)
        {
            primary.suspect();
        }
    }

    /// Where it is, for logs and errors, without passwords.
    pub fn describe(&self) -> String {
        match self {
            Self::Single(url) => redact_url(url),
            Self::Cluster(nodes) => nodes
                .iter()
                .map(|n| redact_url(n))
                .collect::<Vec<_>>()
                .join(","),
            Self::Sentinel(primary) => format!(
                "master `{}` at {} via Sentinels {}",
                primary.spec().master,
                primary.address(),
                primary.spec().sentinels
            ),
        }
    }
}

impl From<&str> for RedisTarget {
    fn from(url: &str) -> Self {
        Self::from_url(url)
    }
}

impl From<String> for RedisTarget {
    fn from(url: String) -> Self {
        Self::from_url(&url)
    }
}

/// Subscriptions open on the node of [`RedisTarget::client`], asked again at each reconnection.
impl hmdp_lock::PubSubSource for RedisTarget {
    fn pubsub(&self) -> BoxFuture<'_, redis::RedisResult<redis::aio::PubSub>> {
        Box::pin(async move {
            let result = self.client()?.get_async_pubsub().await;
            if let Err(e) = &result {
                self.report(e);
            }
            result
        })
    }

    /// Resolves when the Sentinels' primary moves; never on one node or a cluster.
    fn moved(&self) -> BoxFuture<'static, ()> {
        match self.moves() {
            Some(mut moves) => Box::pin(async move {
                if moves.changed().await.is_err() {
                    // The primary's watcher is gone with the last handle: nothing moves again.
                    std::future::pending::<()>().await;
                }
            }),
            None => Box::pin(std::future::pending()),
        }
    }
}
