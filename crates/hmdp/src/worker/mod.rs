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
//!   start (its own pending list first, if it keeps its consumer name: see
//!   [`OrderWorker::new`]), or another worker takes them over after `HMDP_WORKER_CLAIM_IDLE_MS`
//!   (`XAUTOCLAIM`, continuing from the cursor it returns, so entries that keep failing at the
//!   head of the pending list cannot hide the ones behind them);
//! - a worker that dies between commit and `XACK` gets the entries again, and the idempotent
//!   insert writes nothing the second time;
//! - an order the insert skips although it is not in the database under its own id (its buyer
//!   already has another order of the voucher, or its id belongs to another order) is a
//!   *conflict*: logged as an error, counted and moved to the dead letters, never acknowledged
//!   as "already written" (the buyer was told it succeeded);
//! - while the database is away or briefly refusing (I/O, pool timeout, deadlock, lock wait
//!   timeout, shutdown, read-only, too many connections, SQLite busy: see
//!   [`crate::storage::StorageError::is_unavailable`]) the worker keeps the entries it holds
//!   and retries them with a back-off (up to 5 s), without reading them again, so the outage
//!   counts nowhere against them; it reclaims them (`XCLAIM … JUSTID`, which leaves the
//!   delivery count alone) before each retry so no other worker takes them over meanwhile;
//! - an entry that cannot be written for another reason (the database's stock disagrees, a
//!   bad row) is retried alone; its failures are recorded in Redis (`…:orders:failing`: first
//!   failure time and count, on Redis's clock) and it is left pending, to come back only when
//!   it has been idle for the claim interval. It moves to the shard's dead-letter stream, logged
//!   and counted, once it failed `HMDP_WORKER_MAX_DELIVERIES` times **and** has been failing
//!   for at least [`OrderWorker::with_dead_letter_after`] (60 s by default), so a burst of
//!   failures cannot exhaust its budget. Its order status then answers `failed`;
//! - the stream is trimmed only below the oldest entry still pending or undelivered
//!   (`XTRIM MINID`), never dropping an unwritten order;
//! - consumers without pending entries that have been idle longer than
//!   [`OrderWorker::with_consumer_expiry`] (1 h by default) are removed from the group now and
//!   then, so a deployment with changing worker names does not grow the group forever.
//!
//! Several workers (tasks or processes) can share a stream: the group hands each entry to one.

use std::{
    collections::HashMap,
    future::Future,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use redis::{
    Script,
    streams::{StreamAutoClaimReply, StreamId, StreamReadReply},
};
use tokio::sync::watch;

use crate::{
    config::SeckillSettings,
    kv::{Keys, RedisConn},
    seckill::{self, SeckillError},
    storage::{
        Db, StorageError,
        orders::{self, BatchError, BatchOutcome, NewOrder},
    },
};

/// The consumer group of the order streams.
pub const GROUP: &str = "hmdp-orders";

/// Upper bounds of the batch-size histogram's buckets (orders).
pub const BATCH_SIZE_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
];
/// Upper bounds of the write-time histogram's buckets (seconds).
pub const WRITE_SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A histogram with fixed buckets, recorded with atomics (no lock, no allocation).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One counter per bound, plus one for larger values (not cumulative).
    buckets: Box<[AtomicU64]>,
    /// The sum of observed values, as `f64` bits.
    sum: AtomicU64,
}

/// A copy of a [`Histogram`] at one moment, Prometheus-shaped.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound, observations ≤ bound)`, cumulative, ascending; `+Inf` is `count`.
    pub buckets: Vec<(f64, u64)>,
    /// Observations.
    pub count: u64,
    /// Sum of the observed values.
    pub sum: f64,
}

impl Histogram {
    /// A histogram with the given ascending upper bounds.
    pub fn new(bounds: &'static [f64]) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Records one value.
    pub fn observe(&self, v: f64) {
        let i = self.bounds.partition_point(|b| *b < v);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + v).to_bits())
            });
    }

    /// The current counts.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let mut buckets = Vec::with_capacity(self.bounds.len());
        for (b, c) in self.bounds.iter().zip(self.buckets.iter()) {
            total += c.load(Ordering::Relaxed);
            buckets.push((*b, total));
        }
        total += self.buckets[self.bounds.len()].load(Ordering::Relaxed);
        HistogramSnapshot {
            buckets,
            count: total,
            sum: f64::from_bits(self.sum.load(Ordering::Relaxed)),
        }
    }
}

impl HistogramSnapshot {
    /// Appends the histogram in the Prometheus text format (`name_bucket{le=…}`, `name_sum`,
    /// `name_count`).
    pub fn render_prometheus(&self, out: &mut String, name: &str, help: &str) {
        use std::fmt::Write as _;
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (le, n) in &self.buckets {
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {n}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}", self.sum);
        let _ = writeln!(out, "{name}_count {}", self.count);
    }
}

/// Counters of this worker process.
#[derive(Debug)]
pub struct WorkerStats {
    /// Orders inserted into the database.
    pub persisted: AtomicU64,
    /// Entries acknowledged that were already in the database (redeliveries).
    pub already_written: AtomicU64,
    /// Batches committed.
    pub batches: AtomicU64,
    /// Orders per committed batch.
    pub batch_size: Histogram,
    /// Database time of committed batches, in seconds.
    pub write_seconds: Histogram,
    /// Entries moved to a dead-letter stream (conflicts included).
    pub dead_lettered: AtomicU64,
    /// Orders that collided with another order in the database (dead-lettered).
    pub conflicts: AtomicU64,
    /// Entries taken over with `XAUTOCLAIM` (from dead consumers, or this one's failed ones).
    pub claimed: AtomicU64,
    /// Failed batch writes because the database was away or briefly refusing.
    pub db_outages: AtomicU64,
}

impl Default for WorkerStats {
    fn default() -> Self {
        Self {
            persisted: AtomicU64::new(0),
            already_written: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            batch_size: Histogram::new(BATCH_SIZE_BUCKETS),
            write_seconds: Histogram::new(WRITE_SECONDS_BUCKETS),
            dead_lettered: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            claimed: AtomicU64::new(0),
            db_outages: AtomicU64::new(0),
        }
    }
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
    dead_letter_after: Duration,
    consumer_expiry: Duration,
    /// Where the next `XAUTOCLAIM` of each shard continues.
    claim_cursors: Arc<Mutex<HashMap<u32, String>>>,
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
    /// The database is away or briefly refusing; `entries` (delivered to this consumer, not
    /// written) are to be retried as they are, without reading them again.
    #[error("database unavailable ({} orders held for a retry): {source}", entries.len())]
    Stalled {
        entries: Vec<StreamId>,
        source: StorageError,
    },
    #[error(transparent)]
    Seckill(#[from] SeckillError),
}

/// Default of [`OrderWorker::with_dead_letter_after`].
pub const DEFAULT_DEAD_LETTER_AFTER: Duration = Duration::from_secs(60);
/// Default of [`OrderWorker::with_consumer_expiry`].
pub const DEFAULT_CONSUMER_EXPIRY: Duration = Duration::from_secs(60 * 60);

/// Records one failed write of an entry; returns `{first failure ms, failures, now ms}`.
///
/// KEYS: the shard's failure hash (field: entry id, value: `first-ms:count`). ARGV: entry id.
/// Redis's clock, so every worker measures "failing since" alike.
static RECORD_FAILURE: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local first, n = now, 0
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then
  local a, b = string.match(v, '^(%d+):(%d+)$')
  if a then first = tonumber(a); n = tonumber(b) end
end
n = n + 1
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d:%d', first, n))
return {first, n, now}
",
    )
});

/// Removes the group's consumers that have no pending entries and have been idle at least
/// ARGV[2] ms, except ARGV[3] (the caller). Atomic, so a consumer cannot get entries between
/// the check and the removal (removing a consumer drops its pending entries).
///
/// KEYS: stream. ARGV: group, idle ms, caller. Returns the names removed.
static DROP_IDLE_CONSUMERS: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r"
local removed = {}
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] ~= ARGV[3] and tonumber(f['pending']) == 0
      and tonumber(f['idle']) >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    table.insert(removed, f['name'])
  end
end
return removed
",
    )
});

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
        redis_url: String,
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
        Self {
            db,
            redis,
            redis_url,
            keys,
            settings,
            consumer,
            stats: Arc::default(),
            dead_letter_after: DEFAULT_DEAD_LETTER_AFTER,
            consumer_expiry: DEFAULT_CONSUMER_EXPIRY,
            claim_cursors: Arc::default(),
        }
    }

    /// An entry goes to the dead letters only once it has been failing (for reasons other
    /// than an outage) for at least this long, besides `max_deliveries` failures.
    pub fn with_dead_letter_after(mut self, d: Duration) -> Self {
        self.dead_letter_after = d;
        self
    }

    /// Consumers without pending entries idle this long are removed from the group.
    pub fn with_consumer_expiry(mut self, d: Duration) -> Self {
        self.consumer_expiry = d;
        self
    }

    pub fn stats(&self) -> &Arc<WorkerStats> {
        &self.stats
    }

    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Records this worker's shard count in Redis or checks it against the recorded one (see
    /// [`crate::seckill`]); [`OrderWorker::run_until`] does it first and does not start on a
    /// mismatch.
    pub async fn check_shards(&self) -> Result<(), WorkerError> {
        seckill::check_shard_count(&self.redis, &self.keys, self.settings.shards).await?;
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
                Err(WorkerError::Seckill(SeckillError::Shards(e))) => {
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
            for shard in 0..self.settings.shards {
                let me = self.clone();
                let rx = rx.clone();
                tasks.push(tokio::spawn(async move { me.run_shard(shard, rx).await }));
            }
            tracing::info!(consumer = %self.consumer, shards = self.settings.shards, "order worker started");
        }
        shutdown.await;
        let _ = tx.send(true);
        for t in tasks {
            let _ = t.await;
        }
        tracing::info!("order worker stopped");
    }

    /// The loop of one shard: own pending entries first, then new ones, taking over idle
    /// entries now and then; while the database is away it retries what it holds.
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
        // Own pending entries are read once, page by page (a failing entry is not re-read at
        // once: it comes back through XAUTOCLAIM after the claim interval).
        let mut own_pending: Option<String> = Some("0".into());
        let mut stalled: Vec<StreamId> = Vec::new();
        let mut backoff = Duration::from_millis(100);
        let claim_every = (self.settings.claim_idle / 2).max(Duration::from_millis(200));
        let mut last_claim = Instant::now();
        let mut claiming = false;
        let mut last_trim = Instant::now();
        let cleanup_every =
            (self.consumer_expiry / 4).clamp(Duration::from_secs(1), Duration::from_secs(600));
        let mut last_cleanup = Instant::now();
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
            let result = if !stalled.is_empty() {
                self.retry(shard, std::mem::take(&mut stalled)).await
            } else if let Some(after) = own_pending.clone() {
                match self.read(shard, &mut reader, &after, None).await {
                    Ok(entries) if entries.is_empty() => {
                        own_pending = None;
                        Ok(Step::Idle)
                    }
                    Ok(entries) => {
                        own_pending = entries.last().map(|e| e.id.clone());
                        self.write(shard, entries).await
                    }
                    Err(e) => Err(e),
                }
            } else if claiming || last_claim.elapsed() >= claim_every {
                last_claim = Instant::now();
                let r = self.step_claim(shard).await;
                // A dead consumer's backlog is taken over batch after batch, and a pass over
                // the pending list goes on to its end, not one batch per claim interval.
                claiming = matches!(r, Ok(Step::Wrote(_))) || self.claim_cursor(shard) != "0-0";
                r
            } else {
                self.step_new(shard, &mut reader, Duration::from_millis(1000))
                    .await
            };
            match result {
                Ok(_) => backoff = Duration::from_millis(100),
                Err(WorkerError::Stalled { entries, source }) => {
                    tracing::warn!(error = %source, shard, orders = entries.len(), retry_in = ?backoff, "database unavailable; holding the orders for a retry");
                    stalled = entries;
                    if sleep_or_stop(&mut stop, backoff).await {
                        return;
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
                Err(e) => {
                    if let WorkerError::Redis(re) = &e
                        && re.code() == Some("NOGROUP")
                    {
                        group_ready = false; // the stream was deleted (e.g. Redis flushed)
                    }
                    tracing::warn!(error = %e, shard, retry_in = ?backoff, "order step failed; will retry");
                    // What was delivered to this consumer before the failure is read again.
                    own_pending = Some("0".into());
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
            if last_cleanup.elapsed() >= cleanup_every {
                last_cleanup = Instant::now();
                match self.remove_idle_consumers(shard).await {
                    Ok(removed) if !removed.is_empty() => {
                        tracing::info!(
                            shard,
                            ?removed,
                            "removed idle consumers from the order group"
                        )
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!(error = %e, shard, "consumer clean-up skipped"),
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

    /// Re-reads and writes the first batch of this consumer's own pending entries.
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

    /// Where the next [`OrderWorker::step_claim`] of `shard` continues (`0-0`: from the start).
    pub fn claim_cursor(&self, shard: u32) -> String {
        self.claim_cursors
            .lock()
            .expect("claim cursors")
            .get(&shard)
            .cloned()
            .unwrap_or_else(|| "0-0".into())
    }

    /// Takes over entries idle longer than `claim_idle` (with any consumer), and writes them.
    /// Each call continues the scan of the pending list where the previous one stopped.
    pub async fn step_claim(&self, shard: u32) -> Result<Step, WorkerError> {
        let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
            .arg(self.keys.seckill_stream(shard))
            .arg(GROUP)
            .arg(&self.consumer)
            .arg(self.settings.claim_idle.as_millis() as u64)
            .arg(self.claim_cursor(shard))
            .arg("COUNT")
            .arg(self.settings.batch)
            .query_async(&mut self.redis.clone())
            .await?;
        self.claim_cursors
            .lock()
            .expect("claim cursors")
            .insert(shard, reply.next_stream_id.clone());
        if !reply.deleted_ids.is_empty() {
            // Trimming never drops a pending entry, so this means someone deleted orders.
            tracing::error!(shard, ids = ?reply.deleted_ids, "pending order entries were deleted from the stream; those orders are lost");
        }
        if !reply.claimed.is_empty() {
            self.stats
                .claimed
                .fetch_add(reply.claimed.len() as u64, Ordering::Relaxed);
            tracing::info!(
                shard,
                entries = reply.claimed.len(),
                "took over idle orders (left by a dead consumer, or failed before)"
            );
        }
        self.write(shard, reply.claimed).await
    }

    /// Retries entries held through a database outage: reclaims them first (without raising
    /// their delivery count), drops those someone else acknowledged meanwhile, writes the rest.
    async fn retry(&self, shard: u32, entries: Vec<StreamId>) -> Result<Step, WorkerError> {
        let mut cmd = redis::cmd("XCLAIM");
        cmd.arg(self.keys.seckill_stream(shard))
            .arg(GROUP)
            .arg(&self.consumer)
            .arg(0);
        for e in &entries {
            cmd.arg(&e.id);
        }
        cmd.arg("JUSTID");
        let still_pending: Vec<String> = cmd.query_async(&mut self.redis.clone()).await?;
        let entries: Vec<StreamId> = entries
            .into_iter()
            .filter(|e| still_pending.contains(&e.id))
            .collect();
        if entries.is_empty() {
            return Ok(Step::Idle);
        }
        self.write(shard, entries).await
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
        let handled = entries.len();
        let mut good: Vec<(StreamId, NewOrder)> = Vec::with_capacity(entries.len());
        for e in entries {
            match parse(&e) {
                Some(order) => good.push((e, order)),
                // Entries from a deleted (trimmed) message come back without fields.
                None => self.dead_letter(shard, &e, "malformed entry").await?,
            }
        }
        if good.is_empty() {
            return Ok(Step::Wrote(handled));
        }
        let orders: Vec<NewOrder> = good.iter().map(|(_, o)| *o).collect();
        let started = Instant::now();
        match orders::write_order_batch(&self.db, &orders).await {
            Ok(outcome) => {
                self.stats
                    .write_seconds
                    .observe(started.elapsed().as_secs_f64());
                self.stats.batches.fetch_add(1, Ordering::Relaxed);
                self.stats.batch_size.observe(orders.len() as f64);
                self.settle(shard, &good, outcome).await?;
                Ok(Step::Wrote(handled))
            }
            Err(BatchError::Storage(e)) if e.is_unavailable() => {
                self.stats.db_outages.fetch_add(1, Ordering::Relaxed);
                Err(WorkerError::Stalled {
                    entries: good.into_iter().map(|(e, _)| e).collect(),
                    source: e,
                })
            }
            Err(first) => {
                tracing::warn!(error = ?first, shard, "batch refused; writing its orders one by one");
                let mut rest = good.into_iter();
                while let Some((entry, order)) = rest.next() {
                    match orders::write_order_batch(&self.db, std::slice::from_ref(&order)).await {
                        Ok(outcome) => {
                            self.settle(shard, &[(entry, order)], outcome).await?;
                        }
                        Err(BatchError::Storage(e)) if e.is_unavailable() => {
                            self.stats.db_outages.fetch_add(1, Ordering::Relaxed);
                            let mut entries = vec![entry];
                            entries.extend(rest.map(|(e, _)| e));
                            return Err(WorkerError::Stalled { entries, source: e });
                        }
                        Err(err) => self.failed(shard, &entry, &format!("{err:?}")).await?,
                    }
                }
                Ok(Step::Wrote(handled))
            }
        }
    }

    /// After a commit: counts, dead-letters the conflicts, acknowledges the rest.
    async fn settle(
        &self,
        shard: u32,
        batch: &[(StreamId, NewOrder)],
        outcome: BatchOutcome,
    ) -> Result<(), WorkerError> {
        self.stats
            .persisted
            .fetch_add(outcome.inserted, Ordering::Relaxed);
        self.stats
            .already_written
            .fetch_add(outcome.already_written, Ordering::Relaxed);
        let mut acked: Vec<&(StreamId, NewOrder)> = Vec::with_capacity(batch.len());
        for item in batch {
            match outcome.conflicts.iter().find(|(o, _)| *o == item.1) {
                Some((order, conflict)) => {
                    self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(
                        order = order.id,
                        user = order.user_id,
                        voucher = order.voucher_id,
                        %conflict,
                        "accepted order collides with another order in the database; not written"
                    );
                    self.dead_letter(shard, &item.0, &conflict.to_string())
                        .await?;
                }
                None => acked.push(item),
            }
        }
        self.ack(shard, &acked).await
    }

    /// Records a failed write of one entry; dead-letters it when it has failed often enough
    /// for long enough, else leaves it pending for a later retry.
    async fn failed(&self, shard: u32, entry: &StreamId, error: &str) -> Result<(), WorkerError> {
        let (first, failures, now): (i64, u64, i64) = RECORD_FAILURE
            .key(self.failing_key(shard))
            .arg(&entry.id)
            .invoke_async(&mut self.redis.clone())
            .await?;
        let failing_for = Duration::from_millis(now.saturating_sub(first).max(0) as u64);
        if failures >= self.settings.max_deliveries && failing_for >= self.dead_letter_after {
            self.dead_letter(
                shard,
                entry,
                &format!("failed {failures} times over {failing_for:?}: {error}"),
            )
            .await
        } else {
            tracing::warn!(entry = %entry.id, shard, failures, ?failing_for, error, "order not written; it will be retried");
            Ok(())
        }
    }

    /// `…:orders:failing`: the shard's failure records (a slot mate of its stream).
    fn failing_key(&self, shard: u32) -> String {
        format!("{}:failing", self.keys.seckill_stream(shard))
    }

    async fn ack(&self, shard: u32, items: &[&(StreamId, NewOrder)]) -> Result<(), WorkerError> {
        if items.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.cmd("XACK")
            .arg(self.keys.seckill_stream(shard))
            .arg(GROUP);
        for (e, _) in items {
            pipe.arg(&e.id);
        }
        pipe.ignore();
        // Failure records of entries that failed before (none, nearly always: O(1) then).
        pipe.cmd("HDEL").arg(self.failing_key(shard));
        for (e, _) in items {
            pipe.arg(&e.id);
        }
        pipe.ignore();
        // The status query no longer needs the pending records once the orders are written:
        // one multi-key `DEL` in the same round trip. (Deleting them one awaited `DEL` at a
        // time took ~13 ms of every 200-order batch under load: see BENCHMARKS.md.) The
        // pending keys live in other slots than the stream; on a cluster a pipeline must stay
        // in one slot, so there the `DEL` goes on its own and redis-rs splits it by slot.
        let mut del = redis::cmd("DEL");
        for (_, o) in items {
            del.arg(self.keys.seckill_pending(o.id));
        }
        let mut redis = self.redis.clone();
        if matches!(redis, RedisConn::Cluster(_)) {
            let _: () = pipe.query_async(&mut redis).await?;
            let _: i64 = del.query_async(&mut redis).await?;
        } else {
            pipe.add_command(del).ignore();
            let _: () = pipe.query_async(&mut redis).await?;
        }
        Ok(())
    }

    /// Moves an entry to the shard's dead-letter stream (with `origin` and `reason`) and marks
    /// its order `failed` for the status query.
    async fn dead_letter(
        &self,
        shard: u32,
        entry: &StreamId,
        reason: &str,
    ) -> Result<(), WorkerError> {
        // The status first: should the move below not happen, the entry is retried, and a
        // written order shows `created` whatever its pending record says.
        if let Some(order) = parse(entry) {
            let _: () = redis::cmd("SET")
                .arg(self.keys.seckill_pending(order.id))
                .arg(seckill::pending_record(
                    order.user_id,
                    order.voucher_id,
                    true,
                ))
                .arg("PX")
                .arg(seckill::PENDING_TTL.as_millis() as u64)
                .query_async(&mut self.redis.clone())
                .await?;
        }
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
            .ignore()
            .cmd("HDEL")
            .arg(self.failing_key(shard))
            .arg(&entry.id)
            .ignore();
        let _: () = pipe.query_async(&mut self.redis.clone()).await?;
        self.stats.dead_lettered.fetch_add(1, Ordering::Relaxed);
        tracing::error!(entry = %entry.id, shard, reason, "order moved to the dead-letter stream");
        Ok(())
    }

    /// Removes consumers of the shard's group that hold no pending entries and have been idle
    /// longer than the consumer expiry (never this worker); returns their names.
    pub async fn remove_idle_consumers(&self, shard: u32) -> Result<Vec<String>, WorkerError> {
        Ok(DROP_IDLE_CONSUMERS
            .key(self.keys.seckill_stream(shard))
            .arg(GROUP)
            .arg(self.consumer_expiry.as_millis() as u64)
            .arg(&self.consumer)
            .invoke_async(&mut self.redis.clone())
            .await?)
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
    fn histograms_count_into_cumulative_buckets() {
        static BOUNDS: &[f64] = &[1.0, 10.0, 100.0];
        let h = Histogram::new(BOUNDS);
        for v in [0.5, 1.0, 3.0, 10.0, 50.0, 1000.0] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.buckets, vec![(1.0, 2), (10.0, 4), (100.0, 5)]);
        assert_eq!(s.count, 6);
        assert!((s.sum - 1064.5).abs() < 1e-9);
        let mut out = String::new();
        s.render_prometheus(&mut out, "x_seconds", "Some help.");
        assert!(out.contains("# TYPE x_seconds histogram\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"10\"} 4\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"+Inf\"} 6\n"), "{out}");
        assert!(out.contains("x_seconds_count 6\n"), "{out}");
    }

    #[test]
    fn stream_ids_compare_numerically() {
        assert!(stream_id_less("9-0", "10-0"));
        assert!(stream_id_less("10-2", "10-10"));
        assert!(!stream_id_less("10-10", "10-2"));
        assert!(!stream_id_less("5-5", "5-5"));
    }
}
