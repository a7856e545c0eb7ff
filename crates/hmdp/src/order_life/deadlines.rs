//! The closer of the stream transport: pay deadlines wait in one Redis sorted set per shard
//! (`seckill:{s<k>}:deadlines`, order ids scored by deadline in ms), added by the grab script
//! in the step that accepts the order.
//!
//! A closer claims the due ones with one script that also pushes each a lease ahead, so
//! several closers (workers) never take the same deadline twice at once, and one that dies
//! mid-batch leaves its deadlines to be claimed again when the lease runs out: nothing is
//! removed before the order is closed (or found paid) in the database and its unit is back in
//! Redis. A deadline whose order is not written yet waits for the row; one whose order is
//! neither written nor on its way (given up on by the worker) is dropped with a log line.
//!
//! While traces are exported, the worker keeps the grab's `traceparent` of each order it writes
//! in a hash beside the deadlines (`seckill:{s<k>}:deadlines:traces`, [`keep_traces`]) just
//! before its transaction, so the grab script stays as it is and a closer that finds an order's
//! row finds its trace. The closer reads the traces of what it claimed, closes those orders in
//! their grabs' traces, and removes each trace with its deadline (every deadline ends here, the
//! paid and cancelled orders' too). With traces off nothing is written or read; a hash left
//! from a run with traces on expires by itself.

use std::{collections::BTreeMap, sync::LazyLock, time::Duration};

use redis::Script;
use tokio::sync::watch;
use tracing::Instrument as _;

use super::{CloseSpans, LifeError, OrderLife};
use crate::{
    domain::TraceParent,
    kv::{Keys, RedisConn},
    storage::orders::NewOrder,
};

/// Deadlines claimed per shard and round.
pub(crate) const CLAIM_BATCH: usize = 500;
/// How long a claim holds its deadlines: a closer that died is replaced after this.
const LEASE: Duration = Duration::from_secs(5);
/// How soon a deadline whose order is not written yet is looked at again.
const ROW_WAIT: Duration = Duration::from_millis(500);
/// How often an idle closer looks for due deadlines.
const POLL: Duration = Duration::from_millis(200);

/// How long a shard's hash of traces outlives its last write, beyond the pay timeout: long
/// enough for every deadline it names to be closed, after which a hash no closer with traces
/// on cleans (traces switched off) goes by itself.
const TRACES_KEPT: Duration = Duration::from_secs(60 * 60);

/// Keeps the grab's trace of orders about to be written for the close at their deadlines, in
/// the hash of each one's shard. Call it only with orders that carry a trace: with traces off,
/// none.
pub(crate) async fn keep_traces(
    redis: &RedisConn,
    keys: &Keys,
    shards: u32,
    pay_timeout: Duration,
    traced: &[(TraceParent, NewOrder)],
) -> redis::RedisResult<()> {
    let mut by_shard: BTreeMap<u32, Vec<(i64, &str)>> = BTreeMap::new();
    for (trace, order) in traced {
        by_shard
            .entry(Keys::seckill_shard(order.voucher_id.get(), shards))
            .or_default()
            .push((order.id.get(), trace.as_str()));
    }
    let kept = (pay_timeout + TRACES_KEPT).as_millis() as u64;
    for (shard, traces) in by_shard {
        let key = keys.seckill_deadline_traces(shard);
        let mut pipe = redis::pipe();
        pipe.cmd("HSET").arg(&key).arg(&traces).ignore();
        pipe.cmd("PEXPIRE").arg(&key).arg(kept).ignore();
        let _: () = pipe.query_async(&mut redis.clone()).await?;
    }
    Ok(())
}

/// Claims due deadlines.
///
/// KEYS: the shard's deadlines. ARGV: how many at most, the lease in ms.
/// Returns the claimed order ids (now scored at Redis's now + lease).
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, m in ipairs(due) do redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), m) end
return due
",
    )
});

/// What one round of a shard did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Round {
    pub claimed: usize,
    /// Orders closed now (their units given back).
    pub closed: usize,
    /// Deadlines left to wait for their order's row.
    pub waiting: usize,
}

impl OrderLife {
    /// Claims and handles one batch of due deadlines of `shard`.
    pub(crate) async fn close_due(&self, shard: u32) -> Result<Round, LifeError> {
        let key = self.keys().seckill_deadlines(shard);
        let mut redis = self.redis().clone();
        let claimed: Vec<String> = CLAIM
            .key(&key)
            .arg(CLAIM_BATCH)
            .arg(LEASE.as_millis() as u64)
            .invoke_async(&mut redis)
            .await?;
        let mut round = Round {
            claimed: claimed.len(),
            ..Round::default()
        };
        if claimed.is_empty() {
            return Ok(round);
        }
        let ids: Vec<i64> = claimed.iter().filter_map(|m| m.parse().ok()).collect();
        let traces_key = self.keys().seckill_deadline_traces(shard);
        let batch = CloseSpans::batch(ids.len());
        let traced = if batch.is_disabled() {
            Vec::new()
        } else {
            traces_of(&mut redis, &traces_key, &claimed).await
        };
        let spans = CloseSpans::open(batch, traced);
        let closings = self.close(&ids).instrument(spans.span().clone()).await?;
        spans.record(&closings);
        round.closed = closings.iter().filter(|c| c.closed_now).count();
        let found: std::collections::HashSet<i64> = closings.iter().map(|c| c.order.id).collect();
        let mut done: Vec<&str> = Vec::with_capacity(claimed.len());
        let mut wait: Vec<&str> = Vec::new();
        let mut gone: Vec<(&str, Option<i64>)> = Vec::new();
        for member in &claimed {
            match member.parse::<i64>() {
                Ok(id) if found.contains(&id) => done.push(member),
                Ok(id) if self.is_pending(id).await? => wait.push(member),
                id => gone.push((member, id.ok())),
            }
        }
        // The writer deletes the pending record after its commit: an order written between the
        // close and that look is in the database now, and is closed, not dropped.
        let ids: Vec<i64> = gone.iter().filter_map(|(_, id)| *id).collect();
        let found: std::collections::HashSet<i64> = if ids.is_empty() {
            Default::default()
        } else {
            let closings = self.close(&ids).instrument(spans.span().clone()).await?;
            spans.record(&closings);
            round.closed += closings.iter().filter(|c| c.closed_now).count();
            closings.iter().map(|c| c.order.id).collect()
        };
        for (member, id) in gone {
            if !id.is_some_and(|id| found.contains(&id)) {
                self.stats().deadlines_dropped.inc();
                tracing::warn!(
                    order = %member,
                    "pay deadline of an order that is neither written nor on its way \
                     (given up on by the worker, or unknown): dropped"
                );
            }
            done.push(member);
        }
        self.stats().deadlines_handled.inc_by(done.len() as u64);
        if !done.is_empty() {
            // With traces on, the orders' traces go with their deadlines (a slot mate: one
            // round trip).
            let mut pipe = redis::pipe();
            pipe.cmd("ZREM").arg(&key).arg(&done).ignore();
            if !spans.span().is_disabled() {
                pipe.cmd("HDEL").arg(&traces_key).arg(&done).ignore();
            }
            let _: () = pipe.query_async(&mut redis).await?;
        }
        if !wait.is_empty() {
            round.waiting = wait.len();
            let at = chrono::Utc::now().timestamp_millis() + ROW_WAIT.as_millis() as i64;
            let mut zadd = redis::cmd("ZADD");
            zadd.arg(&key).arg("XX");
            for m in &wait {
                zadd.arg(at).arg(*m);
            }
            let _: i64 = zadd.query_async(&mut redis).await?;
        }
        Ok(round)
    }

    /// Closes due orders of every shard until `stop` turns true.
    pub(crate) async fn run_closer(&self, mut stop: watch::Receiver<bool>) {
        tracing::info!(shards = self.shards(), "pay deadline closer started");
        while !*stop.borrow() {
            let mut busy = false;
            for shard in 0..self.shards() {
                match self.close_due(shard).await {
                    Ok(r) => busy |= r.claimed == CLAIM_BATCH,
                    Err(e) => {
                        // Redis or the database away: the claims' leases run out and they are
                        // taken again.
                        tracing::warn!(shard, error = %e, "closing due orders failed; retrying");
                    }
                }
            }
            if busy {
                continue;
            }
            tokio::select! {
                _ = stop.changed() => {}
                _ = tokio::time::sleep(POLL) => {}
            }
        }
        tracing::info!("pay deadline closer stopped");
    }
}

/// The grab's traces of the claimed orders that have one. Traces are a help, not a duty: a
/// failure to read them is logged and the close goes on without.
async fn traces_of(
    redis: &mut RedisConn,
    key: &str,
    claimed: &[String],
) -> Vec<(TraceParent, i64)> {
    let found: redis::RedisResult<Vec<Option<String>>> = redis::cmd("HMGET")
        .arg(key)
        .arg(claimed)
        .query_async(redis)
        .await;
    match found {
        Ok(found) => claimed
            .iter()
            .zip(found)
            .filter_map(|(member, trace)| {
                Some((TraceParent::parse(&trace?)?, member.parse().ok()?))
            })
            .collect(),
        Err(e) => {
            tracing::debug!(error = %e, "the traces of the claimed deadlines could not be read");
            Vec::new()
        }
    }
}
