//! The order worker: drains the order streams ([`crate::order_stream`]) into the database
//! through their consumer group, losing nothing and writing nothing twice: each batch is one
//! idempotent transaction, acknowledged only after the commit. Several workers (tasks or
//! processes) can share a stream. docs/internals/flash-sale.md
//! lists the failures it survives and how.
//!
//! With `HMDP_ORDER_TRANSPORT=rabbitmq` the same shard loops relay the entries to RabbitMQ
//! instead (acknowledged after the broker's confirm, with several batches in flight:
//! `relay.rs`), and a queue consumer (`consume.rs`) writes the queue into the database with the
//! same batches, stock guard and order statuses. Pay deadlines are the grab script's on both
//! transports (`order_life`'s closer); `close.rs` still closes what earlier versions left in the
//! broker's delay queue.

mod close;
mod consume;
mod housekeeping;
mod queue;
mod read;
mod relay;
mod run;
mod scripts;
mod stats;
mod statuses;
mod write;

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use redis::streams::StreamId;
use tokio::sync::watch;

pub use crate::order_stream::GROUP;
pub use stats::WorkerStats;
pub(crate) use statuses::DEFAULT_STATUS_REFRESH_EVERY;

use crate::{
    amqp::{AmqpStats, PublishError, Publisher},
    config::{AmqpRole, OrderTransport, SeckillSettings},
    kv::{Keys, RedisConn, RedisTarget},
    order_life::OrderLife,
    order_stream::{self, ShardCountMismatch},
    storage::{Db, StorageError},
};

impl AmqpRole {
    /// Whether this worker relays the streams to the exchange.
    pub fn relays(self) -> bool {
        matches!(self, AmqpRole::Both | AmqpRole::Relay)
    }

    /// Whether this worker consumes the queue.
    pub fn consumes(self) -> bool {
        matches!(self, AmqpRole::Both | AmqpRole::Consumer)
    }
}

/// A worker for every shard of the order streams.
#[derive(Clone)]
pub struct OrderWorker {
    db: Db,
    redis: RedisConn,
    /// Where the blocking reads' own connections are opened.
    redis_target: RedisTarget,
    keys: Keys,
    settings: SeckillSettings,
    consumer: String,
    stats: Arc<WorkerStats>,
    dead_letter_after: Duration,
    consumer_expiry: Duration,
    /// While orders are held, their status records are renewed this often.
    status_refresh_every: Duration,
    /// Where the next `XAUTOCLAIM` of each shard continues.
    claim_cursors: Arc<Mutex<HashMap<u32, String>>>,
    /// With `HMDP_ORDER_TRANSPORT=rabbitmq`: the shard loops publish here instead of writing.
    publisher: Option<Arc<Publisher>>,
    amqp: Arc<AmqpStats>,
    /// Closes unpaid orders when their pay deadline passes.
    life: Option<OrderLife>,
}

/// What one step of a shard loop did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Entries were handled: written, or left for a later retry, or dead-lettered.
    Wrote(usize),
    /// Nothing to do.
    Idle,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("database: {0}")]
    Storage(#[from] StorageError),
    /// The database (or, relaying, the broker) is away or briefly refusing; `entries`
    /// (delivered to this consumer, not written) are to be retried as they are, without
    /// reading them again.
    #[error("{} orders held for a retry: {source}", entries.len())]
    Stalled {
        entries: Vec<StreamId>,
        source: Held,
    },
    #[error(transparent)]
    Shards(#[from] ShardCountMismatch),
}

/// Why orders are held for a retry.
#[derive(Debug, thiserror::Error)]
pub enum Held {
    #[error("database unavailable: {0}")]
    Database(StorageError),
    #[error("not confirmed by RabbitMQ: {0}")]
    Broker(PublishError),
}

/// Default of [`OrderWorker::with_dead_letter_after`].
pub(crate) const DEFAULT_DEAD_LETTER_AFTER: Duration = Duration::from_secs(60);
/// Default of [`OrderWorker::with_consumer_expiry`].
pub(crate) const DEFAULT_CONSUMER_EXPIRY: Duration = Duration::from_secs(60 * 60);

impl OrderWorker {
    /// A worker named `consumer` in the group.
    ///
    /// Give it a name that stays the same across restarts (`HMDP_WORKER_CONSUMER`, e.g. the
    /// pod name of a StatefulSet) and unique among running workers: a restarted worker then
    /// finishes its own pending entries at once. With `None` the name is host, pid and a
    /// random part: unique, but a restarted process is a new consumer, and what the old one
    /// held waits `HMDP_WORKER_CLAIM_IDLE_MS` to be taken over. Two running workers must never
    /// share a name.
    pub fn new(
        db: Db,
        redis: RedisConn,
        redis_target: impl Into<RedisTarget>,
        keys: Keys,
        settings: SeckillSettings,
        consumer: Option<String>,
    ) -> Self {
        let consumer = consumer.filter(|c| !c.is_empty()).unwrap_or_else(|| {
            let host = std::fs::read_to_string("/etc/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_else(|_| "host".into());
            format!(
                "{host}-{}-{}",
                std::process::id(),
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            )
        });
        let amqp = Arc::new(AmqpStats::default());
        let rabbitmq = settings.transport == OrderTransport::RabbitMq;
        amqp.set_role(
            rabbitmq && settings.amqp_role.relays(),
            rabbitmq && settings.amqp_role.consumes(),
        );
        let publisher = rabbitmq.then(|| {
            Arc::new(Publisher::new(
                &settings.amqp_url,
                &format!("hmdp relay {consumer}"),
                settings.confirm_timeout,
                amqp.clone(),
            ))
        });
        Self {
            publisher,
            amqp,
            db,
            redis,
            redis_target: redis_target.into(),
            keys,
            settings,
            consumer,
            stats: Arc::default(),
            dead_letter_after: DEFAULT_DEAD_LETTER_AFTER,
            consumer_expiry: DEFAULT_CONSUMER_EXPIRY,
            status_refresh_every: DEFAULT_STATUS_REFRESH_EVERY,
            claim_cursors: Arc::default(),
            life: None,
        }
    }

    /// Runs the closer of unpaid orders beside the shard loops.
    pub(crate) fn with_life(mut self, life: OrderLife) -> Self {
        self.life = Some(life);
        self
    }

    /// An entry goes to the dead letters only once it has been failing (for reasons other
    /// than an outage) for at least this long, besides `max_deliveries` failures.
    #[cfg(feature = "test-util")]
    pub fn with_dead_letter_after(mut self, d: Duration) -> Self {
        self.dead_letter_after = d;
        self
    }

    /// Consumers without pending entries idle this long are removed from the group.
    #[cfg(feature = "test-util")]
    pub fn with_consumer_expiry(mut self, d: Duration) -> Self {
        self.consumer_expiry = d;
        self
    }

    pub fn stats(&self) -> &Arc<WorkerStats> {
        &self.stats
    }

    /// The RabbitMQ relay's and consumer's counters (all zero with the stream transport).
    pub fn amqp_stats(&self) -> &Arc<AmqpStats> {
        &self.amqp
    }

    /// Whether orders travel through RabbitMQ (`HMDP_ORDER_TRANSPORT=rabbitmq`).
    pub fn uses_rabbitmq(&self) -> bool {
        self.publisher.is_some()
    }

    #[cfg(feature = "test-util")]
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Records this worker's shard count in Redis or checks it against the recorded one (see
    /// [`order_stream::check_shard_count`]); [`OrderWorker::run_until`] does it first and does
    /// not start on a mismatch.
    pub async fn check_shards(&self) -> Result<(), WorkerError> {
        order_stream::check_shard_count(&self.redis, &self.keys, self.settings.shards).await??;
        Ok(())
    }

    /// Runs one loop per shard until `shutdown` completes; each finishes its current batch.
    /// With a shard count other than the one recorded in Redis it logs the error and runs no
    /// loop (a worker for the wrong shards would strand orders).
    pub async fn run_until(self, shutdown: impl Future<Output = ()> + Send) {
        let (tx, rx) = watch::channel(false);
        let mut tasks = Vec::new();
        tokio::pin!(shutdown);
        let checked = loop {
            match self.check_shards().await {
                Ok(()) => break true,
                Err(WorkerError::Shards(e)) => {
                    tracing::error!(error = %e, "order worker not started");
                    break false;
                }
                Err(e) => {
                    // Redis away: try again shortly, unless asked to stop.
                    tracing::warn!(error = %e, "cannot check the shard count; retrying");
                    tokio::select! {
                        _ = &mut shutdown => {
                            tracing::info!("order worker stopped");
                            return;
                        }
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        };
        if checked {
            // Off the start-up path: the dead letters may be many.
            let me = self.clone();
            tasks.push(tokio::spawn(async move { me.backfill_failed().await }));
            // With RabbitMQ the shard loops are the relay: a consumer-only worker runs none.
            let rabbitmq = self.publisher.is_some();
            let role = self.settings.amqp_role;
            if let Some(publisher) = self.publisher.clone().filter(|_| role.relays()) {
                let mut stop = rx.clone();
                tasks.push(tokio::spawn(async move {
                    connect_relay(&publisher, &mut stop).await;
                }));
            }
            for shard in 0..self.settings.shards {
                if rabbitmq && !role.relays() {
                    break;
                }
                let me = self.clone();
                let rx = rx.clone();
                tasks.push(tokio::spawn(async move { me.run_shard(shard, rx).await }));
            }
            // The deadlines the grab script (and `sync` mode) records, on both transports.
            if let Some(life) = self.life.clone() {
                let rx = rx.clone();
                tasks.push(tokio::spawn(async move { life.run_closer(rx).await }));
            }
            if rabbitmq && role.consumes() {
                let me = self.clone();
                let stop = rx.clone();
                tasks.push(tokio::spawn(async move { me.consume_until(stop).await }));
                // Pay-deadline messages earlier versions put in the delay queue, dead-lettered
                // into the close queue as they fall due.
                if let Some(life) = self.life.clone() {
                    let me = self.clone();
                    let rx = rx.clone();
                    tasks.push(tokio::spawn(async move { me.close_until(life, rx).await }));
                }
            }
            tracing::info!(consumer = %self.consumer, shards = self.settings.shards, transport = %self.settings.transport, "order worker started");
        }
        shutdown.await;
        let _ = tx.send(true);
        for t in tasks {
            let _ = t.await;
        }
        if let Some(p) = &self.publisher {
            p.close().await;
        }
        tracing::info!("order worker stopped");
    }
}

/// Connects the relay to the broker at start, retrying until it is there or the worker stops;
/// the relay also connects on its own when it first has orders to send.
async fn connect_relay(publisher: &Publisher, stop: &mut watch::Receiver<bool>) {
    let mut backoff = run::FIRST_BACKOFF;
    while let Err(e) = publisher.connect().await {
        tracing::warn!(error = %e, retry_in = ?backoff, "order relay cannot reach RabbitMQ yet");
        if run::sleep_or_stop(stop, backoff).await {
            return;
        }
        backoff = (backoff * 2).min(run::MAX_BACKOFF);
    }
}
