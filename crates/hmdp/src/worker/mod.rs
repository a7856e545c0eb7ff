//! The order worker: drains the flash sale's order streams into the database, losing nothing
//! and writing nothing twice.
//!
//! Each shard stream is read through the consumer group `hmdp-orders` (created with
//! `MKSTREAM`; `BUSYGROUP` means it exists). A read takes up to `HMDP_WORKER_BATCH` entries
//! and writes them in **one transaction** ([`orders::write_order_batch`]): one multi-row
//! insert per voucher that skips orders already written (same id, or same user and voucher —
//! the unique key), and one stock decrement by the number inserted, guarded by `stock >= n`.
//! Entries are acknowledged (`XACK`) only **after** the commit. So:
//!
//! - a worker that dies before the commit leaves its entries pending; it re-reads them on
//!   start (its own pending list first), or another worker takes them over after
//!   `HMDP_WORKER_CLAIM_IDLE_MS` (`XAUTOCLAIM`);
//! - a worker that dies between commit and `XACK` gets the entries again, and the idempotent
//!   insert writes nothing the second time;
//! - while the database is away the worker backs off (up to 5 s) and retries the same entries
//!   until it returns; an outage is not counted against an entry;
//! - an entry that cannot be written for another reason (malformed, or the database's stock
//!   disagrees) is retried alone; after `HMDP_WORKER_MAX_DELIVERIES` deliveries it moves to the
//!   shard's dead-letter stream, logged and counted;
//! - the stream is trimmed only below the oldest entry still pending or undelivered
//!   (`XTRIM MINID`), never dropping an unwritten order.
//!
//! Several workers (tasks or processes) can share a stream: the group hands each entry to one.

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use redis::streams::{StreamAutoClaimReply, StreamId, StreamReadReply};
use tokio::sync::watch;

use crate::{
    config::SeckillSettings,
    kv::{Keys, RedisConn},
    storage::{
        Db,
        orders::{self, BatchError, NewOrder},
    },
};

/// The consumer group of the order streams.
pub const GROUP: &str = "hmdp-orders";

/// Counters of this worker process.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Orders inserted into the database.
    pub persisted: AtomicU64,
    /// Entries acknowledged that were already in the database (redeliveries).
    pub already_written: AtomicU64,
    /// Batches committed.
    pub batches: AtomicU64,
    /// Size of the last committed batch.
    pub last_batch: AtomicU64,
    /// Total database write time of committed batches, in microseconds.
    pub write_micros: AtomicU64,
    /// Entries moved to a dead-letter stream.
    pub dead_lettered: AtomicU64,
    /// Entries taken over from other consumers.
    pub claimed: AtomicU64,
    /// Failed batch writes because the database was away.
    pub db_outages: AtomicU64,
}

/// A worker for every shard of the order streams.
#[derive(Clone)]
pub struct OrderWorker {
    db: Db,
    redis: RedisConn,
    redis_url: String,
    keys: Keys,
    settings: SeckillSettings,
    consumer: String,
    stats: Arc<WorkerStats>,
}

/// What one step of a shard loop did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Entries were written (and acknowledged).
    Wrote(usize),
    /// Nothing to do.
    Idle,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("database: {0}")]
    Storage(#[from] crate::storage::StorageError),
}

impl OrderWorker {
    /// A worker named `consumer` (unique per process: host, pid and a random part by default).
    pub fn new(
        db: Db,
        redis: RedisConn,
        redis_url: String,
        keys: Keys,
        settings: SeckillSettings,
        consumer: Option<String>,
    ) -> Self {
        let consumer = consumer.unwrap_or_else(|| {
            let host = std::fs::read_to_string("/etc/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_else(|_| "host".into());
            format!(
                "{host}-{}-{}",
                std::process::id(),
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            )
        });
        Self {
            db,
            redis,
            redis_url,
            keys,
            settings,
            consumer,
            stats: Arc::default(),
        }
    }

    pub fn stats(&self) -> &Arc<WorkerStats> {
        &self.stats
    }

    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Runs one loop per shard until `shutdown` completes; each finishes its current batch.
    pub async fn run_until(self, shutdown: impl Future<Output = ()> + Send) {
        let (tx, rx) = watch::channel(false);
        let mut tasks = Vec::new();
        for shard in 0..self.settings.shards {
            let me = self.clone();
            let rx = rx.clone();
            tasks.push(tokio::spawn(async move { me.run_shard(shard, rx).await }));
        }
        tracing::info!(consumer = %self.consumer, shards = self.settings.shards, "order worker started");
        shutdown.await;
        let _ = tx.send(true);
        for t in tasks {
            let _ = t.await;
        }
        tracing::info!("order worker stopped");
    }

    /// The loop of one shard: own pending entries first, then new ones, taking over idle
    /// entries of dead consumers now and then; backs off while the database is away.
    pub async fn run_shard(&self, shard: u32, mut stop: watch::Receiver<bool>) {
        // Blocking reads get their own connection: on a multiplexed one they would hold up
        // every other command behind them.
        let mut reader = loop {
            match RedisConn::connect(&self.redis_url).await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!(error = %e, "order worker cannot reach Redis; retrying");
                    if sleep_or_stop(&mut stop, Duration::from_secs(1)).await {
                        return;
                    }
                }
            }
        };
        let mut own_pending = true;
        let mut backoff = Duration::from_millis(100);
        let claim_every = (self.settings.claim_idle / 2).max(Duration::from_millis(200));
        let mut last_claim = Instant::now();
        let mut claiming = false;
        let mut last_trim = Instant::now();
        let mut group_ready = false;
        while !*stop.borrow() {
            if !group_ready {
                match self.ensure_group(shard).await {
                    Ok(()) => group_ready = true,
                    Err(e) => {
                        tracing::warn!(error = %e, shard, "cannot create the order consumer group; retrying");
                        if sleep_or_stop(&mut stop, backoff).await {
                            return;
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                        continue;
                    }
                }
            }
            let result = if own_pending {
                self.step_pending(shard, &mut reader).await
            } else if claiming || last_claim.elapsed() >= claim_every {
                last_claim = Instant::now();
                let r = self.step_claim(shard).await;
                // A dead consumer's backlog is taken over batch after batch, not one batch
                // per claim interval.
                claiming = matches!(r, Ok(Step::Wrote(_)));
                r
            } else {
                self.step_new(shard, &mut reader, Duration::from_millis(1000))
                    .await
            };
            match result {
                Ok(Step::Idle) if own_pending => own_pending = false,
                Ok(_) => backoff = Duration::from_millis(100),
                Err(e) => {
                    if let WorkerError::Redis(re) = &e
                        && re.code() == Some("NOGROUP")
                    {
                        group_ready = false; // the stream was deleted (e.g. Redis flushed)
                    }
                    self.stats.db_outages.fetch_add(
                        matches!(e, WorkerError::Storage(_)) as u64,
                        Ordering::Relaxed,
                    );
                    tracing::warn!(error = %e, shard, retry_in = ?backoff, "order batch not written; will retry");
                    own_pending = true;
                    if sleep_or_stop(&mut stop, backoff).await {
                        return;
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
            if last_trim.elapsed() >= Duration::from_secs(1) {
                last_trim = Instant::now();
                if let Err(e) = self.trim(shard).await {
                    tracing::debug!(error = %e, shard, "stream trim skipped");
                }
            }
        }
    }

    /// Creates the consumer group (and the stream) if missing.
    pub async fn ensure_group(&self, shard: u32) -> Result<(), WorkerError> {
        let r: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(self.keys.seckill_stream(shard))
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut self.redis.clone())
            .await;
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Re-reads and writes this consumer's own pending entries (after a restart or a failure).
    pub async fn step_pending(
        &self,
        shard: u32,
        reader: &mut RedisConn,
    ) -> Result<Step, WorkerError> {
        let entries = self.read(shard, reader, "0", None).await?;
        self.write(shard, entries).await
    }

    /// Reads and writes new entries, blocking up to `block` for them.
    pub async fn step_new(
        &self,
        shard: u32,
        reader: &mut RedisConn,
        block: Duration,
    ) -> Result<Step, WorkerError> {
        let entries = self.read(shard, reader, ">", Some(block)).await?;
        self.write(shard, entries).await
    }

    /// Takes over entries idle longer than `claim_idle` with other consumers, and writes them.
    pub async fn step_claim(&self, shard: u32) -> Result<Step, WorkerError> {
        let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
            .arg(self.keys.seckill_stream(shard))
            .arg(GROUP)
            .arg(&self.consumer)
            .arg(self.settings.claim_idle.as_millis() as u64)
            .arg("0-0")
            .arg("COUNT")
            .arg(self.settings.batch)
            .query_async(&mut self.redis.clone())
            .await?;
        if !reply.claimed.is_empty() {
            self.stats
                .claimed
                .fetch_add(reply.claimed.len() as u64, Ordering::Relaxed);
            tracing::info!(
                shard,
                entries = reply.claimed.len(),
                "took over orders left by another consumer"
            );
        }
        self.write(shard, reply.claimed).await
    }

    async fn read(
        &self,
        shard: u32,
        reader: &mut RedisConn,
        from: &str,
        block: Option<Duration>,
    ) -> Result<Vec<StreamId>, WorkerError> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(self.settings.batch);
        if let Some(b) = block {
            cmd.arg("BLOCK").arg(b.as_millis() as u64);
        }
        cmd.arg("STREAMS")
            .arg(self.keys.seckill_stream(shard))
            .arg(from);
        let reply: Option<StreamReadReply> = cmd.query_async(reader).await?;
        Ok(reply
            .map(|r| r.keys.into_iter().flat_map(|k| k.ids).collect())
            .unwrap_or_default())
    }

    /// Writes entries in one transaction and acknowledges them after the commit.
    async fn write(&self, shard: u32, entries: Vec<StreamId>) -> Result<Step, WorkerError> {
        if entries.is_empty() {
            return Ok(Step::Idle);
        }
        let mut good: Vec<(String, NewOrder)> = Vec::with_capacity(entries.len());
        for e in &entries {
            match parse(e) {
                Some(order) => good.push((e.id.clone(), order)),
                // Entries from a deleted (trimmed) message come back without fields.
                None => self.dead_letter(shard, e, "malformed entry").await?,
            }
        }
        if good.is_empty() {
            return Ok(Step::Wrote(0));
        }
        let orders: Vec<NewOrder> = good.iter().map(|(_, o)| *o).collect();
        let started = Instant::now();
        match orders::write_order_batch(&self.db, &orders).await {
            Ok(inserted) => {
                self.stats
                    .write_micros
                    .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                self.stats.batches.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .last_batch
                    .store(orders.len() as u64, Ordering::Relaxed);
                self.stats.persisted.fetch_add(inserted, Ordering::Relaxed);
                self.stats
                    .already_written
                    .fetch_add(orders.len() as u64 - inserted, Ordering::Relaxed);
                self.ack(shard, good.iter().map(|(id, _)| id.as_str()), &orders)
                    .await?;
                Ok(Step::Wrote(orders.len()))
            }
            Err(BatchError::Storage(e)) if e.is_unavailable() => Err(e.into()),
            Err(first) => {
                tracing::warn!(error = ?first, shard, "batch refused; writing its orders one by one");
                let mut written = 0;
                for (id, order) in &good {
                    match orders::write_order_batch(&self.db, std::slice::from_ref(order)).await {
                        Ok(inserted) => {
                            self.stats.persisted.fetch_add(inserted, Ordering::Relaxed);
                            self.ack(
                                shard,
                                std::iter::once(id.as_str()),
                                std::slice::from_ref(order),
                            )
                            .await?;
                            written += 1;
                        }
                        Err(BatchError::Storage(e)) if e.is_unavailable() => return Err(e.into()),
                        Err(err) => {
                            let entry = entries
                                .iter()
                                .find(|e| &e.id == id)
                                .expect("entry of the batch");
                            if self.deliveries(shard, id).await? >= self.settings.max_deliveries {
                                self.dead_letter(shard, entry, &format!("{err:?}")).await?;
                            } else {
                                tracing::warn!(entry = %id, error = ?err, "order not written; it will be retried");
                            }
                        }
                    }
                }
                Ok(Step::Wrote(written))
            }
        }
    }

    async fn ack<'a>(
        &self,
        shard: u32,
        ids: impl Iterator<Item = &'a str>,
        orders: &[NewOrder],
    ) -> Result<(), WorkerError> {
        let mut xack = redis::cmd("XACK");
        xack.arg(self.keys.seckill_stream(shard)).arg(GROUP);
        for id in ids {
            xack.arg(id);
        }
        // The status query no longer needs the pending records once the orders are written.
        // They live in other hash slots than the stream, so each is its own single-key `DEL`.
        // All of them are sent at once rather than awaited one by one: the multiplexed (or
        // cluster) connection writes them back to back, so the whole ack costs about one round
        // trip instead of one per order. (Awaited one at a time they took ~13 ms of every
        // 200-order batch under load: see BENCHMARKS.md.) A cross-slot pipeline would not do:
        // a cluster connection refuses to split one.
        let redis = self.redis.clone();
        let dels = orders.iter().map(|o| {
            let mut conn = redis.clone();
            let key = self.keys.seckill_pending(o.id);
            async move { redis::cmd("DEL").arg(key).query_async::<i64>(&mut conn).await }
        });
        let mut conn = redis.clone();
        let (acked, _deleted) = tokio::join!(
            xack.query_async::<i64>(&mut conn),
            futures_util::future::join_all(dels)
        );
        acked?;
        Ok(())
    }

    async fn deliveries(&self, shard: u32, id: &str) -> Result<u64, WorkerError> {
        let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
            .arg(self.keys.seckill_stream(shard))
            .arg(GROUP)
            .arg(id)
            .arg(id)
            .arg(1)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(rows.first().map(|r| r.3).unwrap_or(0))
    }

    async fn dead_letter(
        &self,
        shard: u32,
        entry: &StreamId,
        reason: &str,
    ) -> Result<(), WorkerError> {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(self.keys.seckill_dead_letters(shard)).arg("*");
        for (k, v) in &entry.map {
            let v: String = redis::from_redis_value_ref(v).unwrap_or_default();
            cmd.arg(k).arg(v);
        }
        cmd.arg("origin").arg(&entry.id).arg("reason").arg(reason);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .add_command(cmd)
            .ignore()
            .cmd("XACK")
            .arg(self.keys.seckill_stream(shard))
            .arg(GROUP)
            .arg(&entry.id)
            .ignore();
        let _: () = pipe.query_async(&mut self.redis.clone()).await?;
        self.stats.dead_lettered.fetch_add(1, Ordering::Relaxed);
        tracing::error!(entry = %entry.id, shard, reason, "order moved to the dead-letter stream");
        Ok(())
    }

    /// Drops entries below the oldest one still pending or undelivered.
    pub async fn trim(&self, shard: u32) -> Result<(), WorkerError> {
        let stream = self.keys.seckill_stream(shard);
        let mut redis = self.redis.clone();
        let groups: redis::streams::StreamInfoGroupsReply = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&stream)
            .query_async(&mut redis)
            .await?;
        let Some(group) = groups.groups.iter().find(|g| g.name == GROUP) else {
            return Ok(());
        };
        let mut min_id = group.last_delivered_id.clone();
        if group.pending > 0 {
            let summary: redis::streams::StreamPendingReply = redis::cmd("XPENDING")
                .arg(&stream)
                .arg(GROUP)
                .query_async(&mut redis)
                .await?;
            if let redis::streams::StreamPendingReply::Data(d) = summary
                && stream_id_less(&d.start_id, &min_id)
            {
                min_id = d.start_id;
            }
        }
        if min_id == "0-0" {
            return Ok(());
        }
        let _: i64 = redis::cmd("XTRIM")
            .arg(&stream)
            .arg("MINID")
            .arg(&min_id)
            .query_async(&mut redis)
            .await?;
        Ok(())
    }
}

fn parse(e: &StreamId) -> Option<NewOrder> {
    let id = e.get::<i64>("id")?;
    let user_id = e.get::<i64>("userId")?;
    let voucher_id = e.get::<i64>("voucherId")?;
    (id > 0 && user_id > 0 && voucher_id > 0).then_some(NewOrder {
        id,
        user_id,
        voucher_id,
    })
}

/// Orders stream ids (`ms-seq`) numerically.
fn stream_id_less(a: &str, b: &str) -> bool {
    let p = |s: &str| -> (u64, u64) {
        let (ms, seq) = s.split_once('-').unwrap_or((s, "0"));
        (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
    };
    p(a) < p(b)
}

/// Sleeps for `d`; true if asked to stop meanwhile.
async fn sleep_or_stop(stop: &mut watch::Receiver<bool>, d: Duration) -> bool {
    let stopped = tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stop.wait_for(|s| *s) => true,
    };
    stopped || *stop.borrow()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_compare_numerically() {
        assert!(stream_id_less("9-0", "10-0"));
        assert!(stream_id_less("10-2", "10-10"));
        assert!(!stream_id_less("10-10", "10-2"));
        assert!(!stream_id_less("5-5", "5-5"));
    }
}
