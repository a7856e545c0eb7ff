//! The optional in-process L1 cache (moka) and its cross-instance invalidation.
//!
//! L1 holds raw cached strings for a short TTL. Every write that replaces a value other
//! instances may hold publishes the key on a channel — [`CacheClient::invalidate`],
//! [`CacheClient::set`], [`CacheClient::set_logical`] and the background rebuild of a
//! logically expired entry — and every instance (itself included) drops the key from its L1
//! when the message arrives. The load that fills a *missing* entry does not publish: no
//! instance can hold a newer copy, only (for at most the L1 TTL) one read before the entry
//! expired in Redis. When a background rebuild finds that another process already refreshed
//! the entry, it drops its own L1 copy, which is where the stale value it saw came from.
//!
//! If the subscription breaks, messages may have been missed, so the whole L1 is cleared on
//! reconnect. The short TTL bounds staleness even then (and a read racing an invalidation can
//! put the old value back for one TTL).
//!
//! [`CacheClient::invalidate`]: crate::CacheClient::invalidate
//! [`CacheClient::set`]: crate::CacheClient::set
//! [`CacheClient::set_logical`]: crate::CacheClient::set_logical

use std::{sync::Arc, time::Duration};

use futures_util::StreamExt;
use moka::future::Cache;
use redis::aio::ConnectionLike;

use crate::Result;

/// Size and lifetime of the L1.
///
/// ```
/// let o = hmdp_cache::L1Options::new(10_000, std::time::Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct L1Options {
    /// Entries kept at most (least recently used ones are evicted first).
    pub max_entries: u64,
    /// How long an entry is kept at most: the bound on staleness when an invalidation
    /// message is missed.
    pub ttl: Duration,
}

impl L1Options {
    /// At most `max_entries` entries, each kept at most `ttl`.
    ///
    /// ```
    /// let o = hmdp_cache::L1Options::new(1_000, std::time::Duration::from_secs(2));
    /// assert_eq!(o.max_entries, 1_000);
    /// ```
    pub fn new(max_entries: u64, ttl: Duration) -> Self {
        Self { max_entries, ttl }
    }
}

pub(crate) struct L1 {
    cache: Cache<String, Arc<str>>,
    channel: String,
    _listener: ListenerGuard,
}

struct ListenerGuard(tokio::task::JoinHandle<()>);

impl Drop for ListenerGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl L1 {
    pub(crate) async fn start(
        options: L1Options,
        subscriber: redis::Client,
        channel: String,
    ) -> Result<Self> {
        let cache: Cache<String, Arc<str>> = Cache::builder()
            .max_capacity(options.max_entries)
            .time_to_live(options.ttl)
            .build();
        // Subscribe before returning, so no invalidation published after start is missed.
        let mut pubsub = subscriber.get_async_pubsub().await?;
        pubsub.subscribe(&channel).await?;
        let task_cache = cache.clone();
        let task_channel = channel.clone();
        let handle = tokio::spawn(async move {
            listen(pubsub, subscriber, task_channel, task_cache).await;
        });
        Ok(Self {
            cache,
            channel,
            _listener: ListenerGuard(handle),
        })
    }

    pub(crate) async fn get(&self, key: &str) -> Option<Arc<str>> {
        self.cache.get(key).await
    }

    pub(crate) async fn insert(&self, key: &str, value: Arc<str>) {
        self.cache.insert(key.to_owned(), value).await;
    }

    /// Drops `key` from this instance's L1 only.
    pub(crate) async fn invalidate_local(&self, key: &str) {
        self.cache.invalidate(key).await;
    }

    /// Drops `key` from this instance's L1 and tells every other instance to drop it too.
    pub(crate) async fn invalidate_everywhere<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        key: &str,
    ) -> Result<()> {
        self.cache.invalidate(key).await;
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&self.channel)
            .arg(key)
            .query_async(conn)
            .await?;
        Ok(())
    }
}

async fn listen(
    mut pubsub: redis::aio::PubSub,
    client: redis::Client,
    channel: String,
    cache: Cache<String, Arc<str>>,
) {
    loop {
        {
            let mut messages = pubsub.on_message();
            while let Some(msg) = messages.next().await {
                if let Ok(key) = msg.get_payload::<String>() {
                    cache.invalidate(&key).await;
                }
            }
        }
        // The subscription broke: anything may have changed meanwhile.
        cache.invalidate_all();
        tracing::warn!(%channel, "L1 invalidation subscription lost; cleared L1, reconnecting");
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            match client.get_async_pubsub().await {
                Ok(mut p) => {
                    if p.subscribe(&channel).await.is_ok() {
                        cache.invalidate_all();
                        pubsub = p;
                        break;
                    }
                }
                Err(_) => continue,
            }
        }
    }
}
