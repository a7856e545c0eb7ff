//! The loop of one shard: own pending entries first, then new ones, taking over idle entries
//! now and then; while the database is away it retries what it holds (renewing the orders'
//! status records now and then, see `statuses.rs`); between steps it trims
//! the stream and removes idle consumers. Relaying to RabbitMQ, it reads and sends new entries
//! while earlier batches await their confirms (`relay.rs`); every other step runs with none
//! in flight.

use std::time::{Duration, Instant};

use redis::streams::StreamId;
use tokio::sync::watch;

use super::{
    OrderWorker, Step, WorkerError,
    relay::{InFlight, Window},
};
use crate::kv::RedisConn;

pub(super) const FIRST_BACKOFF: Duration = Duration::from_millis(100);
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(5);
const TRIM_EVERY: Duration = Duration::from_secs(1);
/// How long a read waits for new entries.
const BLOCK: Duration = Duration::from_millis(1000);

impl OrderWorker {
    /// Runs the loop of one shard until `stop` turns true.
    pub async fn run_shard(&self, shard: u32, stop: watch::Receiver<bool>) {
        if let Some(mut l) = ShardLoop::start(self, shard, stop).await {
            l.run().await;
        }
    }
}

/// Something done now and then.
struct Every {
    period: Duration,
    last: Instant,
}

impl Every {
    fn new(period: Duration) -> Self {
        Self {
            period,
            last: Instant::now(),
        }
    }

    fn is_due(&self) -> bool {
        self.last.elapsed() >= self.period
    }

    fn restart(&mut self) {
        self.last = Instant::now();
    }
}

/// One shard's loop and what it carries from one step to the next.
struct ShardLoop<'w> {
    worker: &'w OrderWorker,
    shard: u32,
    stop: watch::Receiver<bool>,
    /// Blocking reads get their own connection: on a multiplexed one they would hold up
    /// every other command behind them.
    reader: RedisConn,
    /// Where the re-read of this consumer's own pending entries continues; `None` once done.
    /// They are read once, page by page (a failing entry is not re-read at once: it comes
    /// back through `XAUTOCLAIM` after the claim interval).
    own_pending: Option<String>,
    /// Entries held through a database outage, to be retried as they are.
    stalled: Vec<StreamId>,
    /// Relaying: the batches sent and not yet settled.
    in_flight: Window<InFlight>,
    backoff: Duration,
    group_ready: bool,
    /// A claim pass is going on: it continues to the end of the pending list.
    claiming: bool,
    claim: Every,
    trim: Every,
    cleanup: Every,
    /// Renewing the status records of the orders held through an outage.
    refresh: Every,
}

impl<'w> ShardLoop<'w> {
    /// Connects the reader, retrying until Redis answers; `None` if asked to stop first.
    async fn start(
        worker: &'w OrderWorker,
        shard: u32,
        mut stop: watch::Receiver<bool>,
    ) -> Option<Self> {
        let reader = loop {
            match worker.redis_target.connect().await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!(error = %e, "order worker cannot reach Redis; retrying");
                    if sleep_or_stop(&mut stop, Duration::from_secs(1)).await {
                        return None;
                    }
                }
            }
        };
        let claim_every = (worker.settings.claim_idle / 2).max(Duration::from_millis(200));
        let cleanup_every =
            (worker.consumer_expiry / 4).clamp(Duration::from_secs(1), Duration::from_secs(600));
        Some(Self {
            worker,
            shard,
            stop,
            reader,
            own_pending: Some("0".into()),
            stalled: Vec::new(),
            in_flight: Window::new(worker.settings.batches_in_flight),
            backoff: FIRST_BACKOFF,
            group_ready: false,
            claiming: false,
            claim: Every::new(claim_every),
            trim: Every::new(TRIM_EVERY),
            cleanup: Every::new(cleanup_every),
            refresh: Every::new(worker.status_refresh_every),
        })
    }

    async fn run(&mut self) {
        self.steps().await;
        // Stopping: what is in flight is settled (or left pending, to be read again).
        while !self.in_flight.is_empty() {
            if let Err(e) = self.settle_oldest().await {
                tracing::warn!(error = %e, shard = self.shard, "orders in flight left pending at shutdown");
            }
        }
    }

    /// Steps until asked to stop.
    async fn steps(&mut self) {
        while !*self.stop.borrow() {
            if !self.group_ready {
                match self.worker.ensure_group(self.shard).await {
                    Ok(()) => self.group_ready = true,
                    Err(e) => {
                        tracing::warn!(error = %e, shard = self.shard, "cannot create the order consumer group; retrying");
                        if self.back_off().await {
                            return;
                        }
                        continue;
                    }
                }
            }
            let result = self.step().await;
            if self.after(result).await {
                return;
            }
            self.housekeeping().await;
        }
    }

    /// One step: held entries first, then own pending ones, then a claim pass when due,
    /// else new entries. Relaying, the batches in flight are settled before any step but new
    /// entries.
    async fn step(&mut self) -> Result<Step, WorkerError> {
        let (w, shard) = (self.worker, self.shard);
        let new_entries = self.stalled.is_empty()
            && self.own_pending.is_none()
            && !self.claiming
            && !self.claim.is_due();
        if !self.in_flight.is_empty() && !new_entries {
            return self.settle_oldest().await;
        }
        if !self.stalled.is_empty() {
            w.retry(shard, std::mem::take(&mut self.stalled)).await
        } else if let Some(after) = self.own_pending.clone() {
            let entries = w.read(shard, &mut self.reader, &after, None).await?;
            if entries.is_empty() {
                self.own_pending = None;
                return Ok(Step::Idle);
            }
            self.own_pending = entries.last().map(|e| e.id.clone());
            w.write(shard, entries).await
        } else if self.claiming || self.claim.is_due() {
            self.claim.restart();
            let r = w.step_claim(shard).await;
            // A dead consumer's backlog is taken over batch after batch, and a pass over the
            // pending list goes on to its end, not one batch per claim interval.
            self.claiming = matches!(r, Ok(Step::Wrote(_))) || w.claim_cursor(shard) != "0-0";
            r
        } else if w.uses_rabbitmq() {
            self.relay_new().await
        } else {
            w.step_new(shard, &mut self.reader, BLOCK).await
        }
    }

    /// Relaying: sends a batch of new entries if the window has room, else (or if there are
    /// none) settles the oldest batch in flight. Waits for new entries only with none in
    /// flight.
    async fn relay_new(&mut self) -> Result<Step, WorkerError> {
        let (w, shard) = (self.worker, self.shard);
        if self.in_flight.is_full() {
            return self.settle_oldest().await;
        }
        let block = self.in_flight.is_empty().then_some(BLOCK);
        let entries = w.read(shard, &mut self.reader, ">", block).await?;
        if entries.is_empty() {
            return self.settle_oldest().await;
        }
        let handled = entries.len();
        let good = w.parse_entries(shard, entries).await?;
        if !good.is_empty() {
            match w.send_batch(shard, good).await {
                Ok(batch) => self.in_flight.push(batch),
                // Those in flight are held too: the connection they went out on is gone.
                Err(WorkerError::Stalled {
                    mut entries,
                    source,
                }) => {
                    let mut all = self.in_flight.take_all();
                    all.append(&mut entries);
                    return Err(WorkerError::Stalled {
                        entries: all,
                        source,
                    });
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Step::Wrote(handled))
    }

    /// Settles the oldest batch in flight (see [`Window::settle_oldest`]).
    async fn settle_oldest(&mut self) -> Result<Step, WorkerError> {
        let (w, shard) = (self.worker, self.shard);
        self.in_flight
            .settle_oldest(|b| async move { w.settle_batch(shard, b).await.map(Step::Wrote) })
            .await
    }

    /// Takes in a step's result: holds the entries of a database outage, backs off after a
    /// failure. True if asked to stop meanwhile.
    async fn after(&mut self, result: Result<Step, WorkerError>) -> bool {
        let shard = self.shard;
        match result {
            Ok(_) => {
                self.backoff = FIRST_BACKOFF;
                false
            }
            Err(WorkerError::Stalled { entries, source }) => {
                tracing::warn!(error = %source, shard, orders = entries.len(), retry_in = ?self.backoff, "holding the orders for a retry");
                self.stalled = entries;
                if self.refresh.is_due() {
                    self.refresh.restart();
                    self.worker.refresh_statuses([shard]).await;
                }
                self.back_off().await
            }
            Err(e) => {
                if let WorkerError::Redis(re) = &e
                    && re.code() == Some("NOGROUP")
                {
                    self.group_ready = false; // the stream was deleted (e.g. Redis flushed)
                }
                tracing::warn!(error = %e, shard, retry_in = ?self.backoff, "order step failed; will retry");
                // What was delivered to this consumer before the failure is read again.
                self.own_pending = Some("0".into());
                self.back_off().await
            }
        }
    }

    async fn housekeeping(&mut self) {
        let (w, shard) = (self.worker, self.shard);
        if self.trim.is_due() {
            self.trim.restart();
            if let Err(e) = w.trim(shard).await {
                tracing::debug!(error = %e, shard, "stream trim skipped");
            }
        }
        if self.cleanup.is_due() {
            self.cleanup.restart();
            match w.remove_idle_consumers(shard).await {
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

    /// Sleeps for the back-off, then doubles it (up to 5 s); true if asked to stop meanwhile.
    async fn back_off(&mut self) -> bool {
        if sleep_or_stop(&mut self.stop, self.backoff).await {
            return true;
        }
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        false
    }
}

/// Sleeps for `d`; true if asked to stop meanwhile.
pub(super) async fn sleep_or_stop(stop: &mut watch::Receiver<bool>, d: Duration) -> bool {
    let stopped = tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stop.wait_for(|s| *s) => true,
    };
    stopped || *stop.borrow()
}
