//! Test support (feature `test-util`): a subscription source that moves.

use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use tokio::sync::watch;

use crate::PubSubSource;

/// A [`PubSubSource`] whose server moves when told, as a Sentinel failover moves the primary
/// while the old one still runs. Clones share the server.
#[derive(Clone)]
pub struct MovingSource {
    url: Arc<Mutex<String>>,
    moves: watch::Sender<u64>,
}

impl MovingSource {
    /// Subscriptions open on the server at `url` until [`MovingSource::move_to`].
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: Arc::new(Mutex::new(url.into())),
            moves: watch::Sender::new(0),
        }
    }

    /// From now on subscriptions belong on the server at `url`.
    pub fn move_to(&self, url: impl Into<String>) {
        *self.url.lock().unwrap_or_else(|e| e.into_inner()) = url.into();
        self.moves.send_modify(|n| *n += 1);
    }
}

impl PubSubSource for MovingSource {
    fn pubsub(&self) -> BoxFuture<'_, redis::RedisResult<redis::aio::PubSub>> {
        let url = self.url.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Box::pin(async move { redis::Client::open(url)?.get_async_pubsub().await })
    }

    fn moved(&self) -> BoxFuture<'static, ()> {
        let mut moves = self.moves.subscribe();
        Box::pin(async move {
            let _ = moves.changed().await;
        })
    }
}
