//! One shared pub/sub connection per [`LockClient`](crate::LockClient).
//!
//! A background task owns the subscriber connection. Waiters register
//! interest in a channel; the first waiter of a channel makes the task
//! `SUBSCRIBE`, the last one leaving makes it `UNSUBSCRIBE`.
//!
//! Each unlock message wakes *one* waiter of this client (FIFO, like the
//! semaphore Redisson releases per message), not all of them: only one can
//! win the lock anyway, and the winner's own unlock wakes the next. A waiter
//! that is cancelled after being woken but before retrying passes the wake-up
//! on. If the connection breaks, the task reconnects, resubscribes and wakes
//! every waiter (a message may have been missed); meanwhile waiters fall back
//! to the holder's TTL.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{StreamExt, future::BoxFuture};
use tokio::sync::{Notify, mpsc, oneshot};

/// Where the pub/sub connection comes from, asked again at every reconnection.
///
/// A `redis::Client` always opens its connection on the same server. A deployment whose
/// primary can move (Redis Sentinel) implements this to open it on the primary of the
/// moment, so a subscriber follows a failover when it reconnects.
pub trait PubSubSource: Send + Sync + 'static {
    /// A new pub/sub connection.
    fn pubsub(&self) -> BoxFuture<'_, redis::RedisResult<redis::aio::PubSub>>;

    /// Resolves once a connection that [`PubSubSource::pubsub`] opens after this call is stale:
    /// the writes (and so the publishes) have moved to another server, and a subscriber still
    /// on the old one would hear nothing more. The subscriber then makes a new connection. The
    /// default never resolves: a plain client's server does not move.
    fn moved(&self) -> BoxFuture<'static, ()> {
        Box::pin(std::future::pending())
    }
}

impl PubSubSource for redis::Client {
    fn pubsub(&self) -> BoxFuture<'_, redis::RedisResult<redis::aio::PubSub>> {
        Box::pin(self.get_async_pubsub())
    }
}

const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(2);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

enum Cmd {
    Subscribe(String, oneshot::Sender<bool>),
    Unsubscribe(String),
}

struct Entry {
    refs: usize,
    notify: Arc<Notify>,
}

#[derive(Default)]
struct Shared {
    channels: Mutex<HashMap<String, Entry>>,
}

impl Shared {
    fn bump(&self, channel: &str) {
        let map = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = map.get(channel) {
            entry.notify.notify_one();
        }
    }

    fn bump_all(&self) {
        let map = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        for entry in map.values() {
            entry.notify.notify_waiters();
            entry.notify.notify_one();
        }
    }

    fn has(&self, channel: &str) -> bool {
        let map = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        map.contains_key(channel)
    }

    fn names(&self) -> Vec<String> {
        let map = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        map.keys().cloned().collect()
    }
}

pub(crate) struct Hub {
    client: Arc<dyn PubSubSource>,
    shared: Arc<Shared>,
    task: Mutex<Option<mpsc::UnboundedSender<Cmd>>>,
}

impl Hub {
    pub(crate) fn new(client: Arc<dyn PubSubSource>) -> Self {
        Hub {
            client,
            shared: Arc::default(),
            task: Mutex::new(None),
        }
    }

    /// The command channel of the background task, (re)starting it if it is
    /// not running (e.g. its runtime was shut down).
    fn sender(&self) -> mpsc::UnboundedSender<Cmd> {
        let mut slot = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = slot.as_ref().filter(|tx| !tx.is_closed()) {
            return tx.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(self.client.clone(), self.shared.clone(), rx));
        *slot = Some(tx.clone());
        tx
    }

    /// Registers interest in `channel` and waits until the subscription is
    /// confirmed by the server. Returns `None` if the subscriber connection
    /// is unavailable; callers then fall back to timed retries.
    pub(crate) async fn subscribe(&self, channel: &str) -> Option<Subscription> {
        let notify = {
            let mut map = self
                .shared
                .channels
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let entry = map.entry(channel.to_owned()).or_insert_with(|| Entry {
                refs: 0,
                notify: Arc::new(Notify::new()),
            });
            entry.refs += 1;
            entry.notify.clone()
        };
        let sender = self.sender();
        let sub = Subscription {
            shared: self.shared.clone(),
            sender: sender.clone(),
            channel: channel.to_owned(),
            notify,
            woken: false,
        };
        let (reply_tx, reply_rx) = oneshot::channel();
        if sender
            .send(Cmd::Subscribe(channel.to_owned(), reply_tx))
            .is_err()
        {
            return None;
        }
        match tokio::time::timeout(SUBSCRIBE_TIMEOUT, reply_rx).await {
            Ok(Ok(true)) => Some(sub),
            _ => None,
        }
    }
}

/// A registered interest in one channel. Dropping it unregisters.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    sender: mpsc::UnboundedSender<Cmd>,
    channel: String,
    notify: Arc<Notify>,
    /// Woken by a message and not yet retried.
    woken: bool,
}

impl Subscription {
    /// Resolves when this waiter is handed an unlock message (or one arrived
    /// while no waiter was waiting).
    pub(crate) async fn notified(&mut self) {
        self.notify.notified().await;
        self.woken = true;
    }

    /// The caller retried after a wake-up; nothing to pass on any more.
    pub(crate) fn retried(&mut self) {
        self.woken = false;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.woken {
            // Cancelled between wake-up and retry: let another waiter try.
            self.notify.notify_one();
        }
        let mut map = self
            .shared
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = map.get_mut(&self.channel) {
            entry.refs -= 1;
            if entry.refs == 0 {
                map.remove(&self.channel);
                let _ = self.sender.send(Cmd::Unsubscribe(self.channel.clone()));
            }
        }
    }
}

async fn run(
    client: Arc<dyn PubSubSource>,
    shared: Arc<Shared>,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let mut moved = client.moved();
        let connected = tokio::time::timeout(SUBSCRIBE_TIMEOUT, client.pubsub()).await;
        let pubsub = match connected {
            Ok(Ok(p)) => p,
            other => {
                let err = match other {
                    Ok(Err(e)) => e.to_string(),
                    _ => "timed out".to_owned(),
                };
                tracing::warn!(error = %err, "lock subscriber connection failed; retrying");
                // Refuse subscriptions until the connection is back.
                let sleep = tokio::time::sleep(backoff);
                tokio::pin!(sleep);
                loop {
                    tokio::select! {
                        _ = &mut sleep => break,
                        cmd = cmds.recv() => match cmd {
                            None => return,
                            Some(Cmd::Subscribe(_, reply)) => { let _ = reply.send(false); }
                            Some(Cmd::Unsubscribe(_)) => {}
                        },
                    }
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let (mut sink, mut stream) = pubsub.split();
        let mut subscribed = HashSet::new();
        let mut healthy = true;
        for ch in shared.names() {
            match tokio::time::timeout(SUBSCRIBE_TIMEOUT, sink.subscribe(&ch)).await {
                Ok(Ok(())) => {
                    subscribed.insert(ch);
                }
                _ => healthy = false,
            }
        }
        // Anything published while we were (re)connecting is lost: wake all.
        shared.bump_all();
        if healthy {
            backoff = Duration::from_millis(50);
        }
        while healthy {
            tokio::select! {
                cmd = cmds.recv() => match cmd {
                    None => return,
                    Some(Cmd::Subscribe(ch, reply)) => {
                        if subscribed.contains(&ch) {
                            let _ = reply.send(true);
                            continue;
                        }
                        match tokio::time::timeout(SUBSCRIBE_TIMEOUT, sink.subscribe(&ch)).await {
                            Ok(Ok(())) => {
                                subscribed.insert(ch);
                                let _ = reply.send(true);
                            }
                            _ => {
                                let _ = reply.send(false);
                                healthy = false;
                            }
                        }
                    }
                    Some(Cmd::Unsubscribe(ch)) => {
                        // Skip if a new waiter registered in the meantime.
                        if !shared.has(&ch) && subscribed.remove(&ch) {
                            let unsub = sink.unsubscribe(&ch);
                            if !matches!(tokio::time::timeout(SUBSCRIBE_TIMEOUT, unsub).await, Ok(Ok(()))) {
                                healthy = false;
                            }
                        }
                    }
                },
                msg = stream.next() => match msg {
                    Some(msg) => shared.bump(msg.get_channel_name()),
                    None => healthy = false,
                },
                () = &mut moved => {
                    tracing::info!("the Redis primary moved; the lock subscriber follows it");
                    healthy = false;
                }
            }
        }
        tracing::warn!("lock subscriber connection lost; reconnecting");
        shared.bump_all();
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
