//! One channel subscribed through a [`PubSubSource`], subscribed again when its connection
//! breaks or the source moves (see [`PubSubSource::moved`]). Listeners built on it (an L1
//! cache's invalidations, a sale's announcements) learn each gap, since a message may have been
//! missed in it.

use std::time::Duration;

use futures_util::{
    FutureExt, StreamExt,
    future::{BoxFuture, Fuse},
};
use redis::{Msg, RedisResult, aio::PubSub};

use crate::PubSubSource;

/// Between two attempts to subscribe again after the connection broke.
const RESUBSCRIBE_PAUSE: Duration = Duration::from_millis(500);

/// Why [`ChannelSubscription::next`] has no message: messages may have been missed since the
/// last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    /// The connection broke.
    Lost,
    /// The source moved to another server; the old connection hears nothing more.
    Moved,
}

/// A subscription to one channel that is made again after each [`Gap`].
///
/// ```no_run
/// # async fn run() -> redis::RedisResult<()> {
/// use hmdp_lock::{ChannelSubscription, Gap};
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let mut sub = ChannelSubscription::open(client, "invalidate").await?;
/// loop {
///     match sub.next().await {
///         Ok(msg) => println!("{:?}", msg.get_payload::<String>()),
///         Err(gap) => {
///             // Forget whatever a missed message would have changed, then listen again.
///             sub.reopen(gap).await;
///         }
///     }
/// }
/// # }
/// ```
pub struct ChannelSubscription {
    source: Box<dyn PubSubSource>,
    channel: String,
    pubsub: PubSub,
    moved: Fuse<BoxFuture<'static, ()>>,
}

impl ChannelSubscription {
    /// Subscribes to `channel` through `source` before returning, so nothing published
    /// afterwards is missed.
    pub async fn open(source: impl PubSubSource, channel: impl Into<String>) -> RedisResult<Self> {
        let source: Box<dyn PubSubSource> = Box::new(source);
        let channel = channel.into();
        let (pubsub, moved) = subscribe(&*source, &channel).await?;
        Ok(Self {
            source,
            channel,
            pubsub,
            moved,
        })
    }

    /// The channel listened to.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The next message, or the gap that ended this connection's messages; after a gap, call
    /// [`ChannelSubscription::reopen`].
    pub async fn next(&mut self) -> Result<Msg, Gap> {
        let mut messages = self.pubsub.on_message();
        tokio::select! {
            msg = messages.next() => msg.ok_or(Gap::Lost),
            () = &mut self.moved => Err(Gap::Moved),
        }
    }

    /// Subscribes again after `gap`, at once after a move and after a pause otherwise, and
    /// keeps trying until it has.
    pub async fn reopen(&mut self, gap: Gap) {
        let mut pause = match gap {
            Gap::Moved => Duration::ZERO,
            Gap::Lost => RESUBSCRIBE_PAUSE,
        };
        loop {
            tokio::time::sleep(pause).await;
            pause = RESUBSCRIBE_PAUSE;
            if let Ok((pubsub, moved)) = subscribe(&*self.source, &self.channel).await {
                self.pubsub = pubsub;
                self.moved = moved;
                return;
            }
        }
    }
}

/// A new subscription to `channel`, with what tells when the source has moved since.
async fn subscribe(
    source: &dyn PubSubSource,
    channel: &str,
) -> RedisResult<(PubSub, Fuse<BoxFuture<'static, ()>>)> {
    // Asked before connecting: a move while the connection is made makes it stale at once.
    let moved = source.moved().fuse();
    let mut pubsub = source.pubsub().await?;
    pubsub.subscribe(channel).await?;
    Ok((pubsub, moved))
}
