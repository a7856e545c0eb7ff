//! After the Sentinels promote another Redis primary: the live sales are reconciled, once per
//! promotion across all instances.
//!
//! Replication is asynchronous, so a promoted replica may lack the last grabs (without
//! `HMDP_REDIS_WAIT_REPLICAS`, even acknowledged ones): their stock would sell again and their
//! buyers could buy twice. Every instance follows the move ([`crate::kv::SentinelPrimary`]);
//! the first to take the promotion's lock runs what `hmdp reconcile --repair` runs and marks
//! the promotion done, so the others skip it. A promotion is named by the new primary's
//! replication id, which every instance reads alike and which changes at each promotion.

use std::{sync::Arc, time::Duration};

use hmdp_lock::LockClient;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::watch;

use super::connect::Redis;
use crate::{
    kv::{Keys, RedisConn, RedisTarget},
    metrics::Registry,
    seckill::Seckill,
};

/// How long the mark of a reconciled promotion is kept.
const DONE_FOR: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long an instance waits for another that reconciles the same promotion.
const LOCK_WAIT: Duration = Duration::from_secs(60);

/// Redis primary moves (`hmdp_redis_*`).
#[derive(Debug, Default)]
pub(crate) struct FailoverStats {
    /// Promotions of another primary this process followed.
    pub failovers: Counter,
    /// Reconciliations of the live sales this process ran after a promotion.
    pub reconciles: Counter,
    /// Failovers a Sentinel announced (counted by [`crate::kv::SentinelPrimary`]).
    pub announced: Counter,
}

impl FailoverStats {
    /// Counters for a process on `target`: the announced failovers are its primary's.
    pub(crate) fn for_target(target: &RedisTarget) -> Self {
        let announced = match target {
            RedisTarget::Sentinel(primary) => primary.failovers_announced().clone(),
            _ => Counter::default(),
        };
        Self {
            announced,
            ..Self::default()
        }
    }

    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "hmdp_redis_failovers_announced",
            "Failovers a Redis Sentinel announced to this process; grabs that wait for replicas \
             are refused from then until the primary moved",
            self.announced.clone(),
        );
        registry.register(
            "hmdp_redis_failovers",
            "Promotions of another Redis primary (Sentinel) this process followed",
            self.failovers.clone(),
        );
        registry.register(
            "hmdp_redis_failover_reconciles",
            "Reconciliations of the live sales this process ran after a Redis promotion",
            self.reconciles.clone(),
        );
    }
}

/// What the follower needs; runs until `moves` closes (the primary's watcher is gone).
pub(super) struct Follower {
    moves: watch::Receiver<u64>,
    conn: RedisConn,
    keys: Keys,
    locks: LockClient<RedisConn>,
    seckill: Seckill,
    stats: Arc<FailoverStats>,
}

/// The follower's task, stopped when dropped.
pub(super) struct Following(tokio::task::JoinHandle<()>);

impl Drop for Following {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Follower {
    /// A follower of `redis`'s primary; `None` unless it can move (Sentinel).
    pub(super) fn of(
        redis: &Redis,
        locks: &LockClient<RedisConn>,
        seckill: &Seckill,
        stats: Arc<FailoverStats>,
    ) -> Option<Self> {
        Some(Self {
            moves: redis.target.moves()?,
            conn: redis.conn.clone(),
            keys: redis.keys.clone(),
            locks: locks.clone(),
            seckill: seckill.clone(),
            stats,
        })
    }

    /// Follows in the background until the returned handle is dropped.
    pub(super) fn start(self) -> Following {
        Following(tokio::spawn(self.run()))
    }

    async fn run(mut self) {
        while self.moves.changed().await.is_ok() {
            self.stats.failovers.inc();
            // Several quick moves are one reconciliation, on the primary of the last.
            self.moves.mark_unchanged();
            let mut delay = Duration::from_millis(200);
            loop {
                match self.reconcile_once().await {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot reconcile the flash sales after the Redis promotion yet; retrying");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(5));
                        if self.moves.has_changed().unwrap_or(true) {
                            break;
                        }
                    }
                }
            }
        }
    }

    async fn reconcile_once(&self) -> anyhow::Result<()> {
        let mut conn = self.conn.clone();
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await?;
        let promotion = info
            .lines()
            .find_map(|l| l.strip_prefix("master_replid:"))
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| anyhow::anyhow!("the new primary reports no master_replid"))?
            .to_owned();
        let done = self.keys.redis_promotion_reconciled(&promotion);
        let lock = self.locks.lock(&Keys::redis_promotion_lock(&promotion))?;
        let Some(guard) = lock.try_lock(LOCK_WAIT, None).await? else {
            anyhow::bail!("another instance holds the reconciliation of promotion {promotion}");
        };
        let result = async {
            let marked: Option<String> = redis::cmd("GET").arg(&done).query_async(&mut conn).await?;
            if marked.is_some() {
                tracing::info!(%promotion, "the flash sales were reconciled after this Redis promotion already");
                return Ok(());
            }
            tracing::warn!(%promotion, "reconciling the live flash sales after a Redis promotion");
            let checks = self.seckill.reconcile(None, true).await?;
            self.stats.reconciles.inc();
            for check in &checks {
                if check.redis_drift() {
                    tracing::warn!(
                        voucher = check.voucher,
                        redis_stock = check.redis_stock,
                        expected_stock = check.expected_stock,
                        unknown_buyers = check.unknown_to_redis.len(),
                        only_in_redis = check.only_in_redis.len(),
                        repaired = check.repaired,
                        "the promoted Redis primary had drifted from the orders; sale repaired"
                    );
                }
            }
            let drifted = checks.iter().filter(|c| c.redis_drift()).count();
            tracing::warn!(
                %promotion,
                sales = checks.len(),
                drifted,
                "flash sales reconciled after the Redis promotion"
            );
            let _: () = redis::cmd("SET")
                .arg(&done)
                .arg(1)
                .arg("EX")
                .arg(DONE_FOR.as_secs())
                .query_async(&mut conn)
                .await?;
            anyhow::Ok(())
        }
        .await;
        let _ = guard.unlock().await;
        result
    }
}
