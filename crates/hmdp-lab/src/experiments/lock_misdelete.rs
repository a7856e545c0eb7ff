//! 分布式锁: a lock deleted by someone who no longer holds it. Three holders take one Redis
//! lock in turn. The first does its work, then stalls (a GC pause, say) at its version's weak
//! point before the delete, for longer than the lock's TTL: the lock expires and the second
//! holder takes it. When the first wakes, `DEL` deletes the second's lock, and so does the
//! `GET`-compare-`DEL` whose check passed before the stall; the third then gets in beside the
//! second. The compare-and-delete script deletes nothing that is not its own; hmdp-lock's
//! watchdog does not even let the lock expire under a stalled holder.
//!
//! Redis only: the critical section is a counter of holders inside it, and each entry that
//! finds someone already inside is an overlap.

use std::{
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};

use hmdp_lock::{LockClient, LockGuard};
use redis::aio::ConnectionManager;

use super::{Experiment, version};
use crate::{Lab, Outcome, setnx::SetNx};

/// The lock's TTL (the hand-written versions).
const TTL: Duration = Duration::from_millis(400);
/// The first holder's work, well inside the TTL.
const FIRST_WORK: Duration = Duration::from_millis(10);
/// The first holder's stall before its delete: longer than the TTL, so the lock expires.
const STALL: Duration = Duration::from_millis(500);
/// The later holders' work: long enough to still be inside when the first one's delete lands
/// (about `STALL - TTL` after they got in), short enough to end well within their own TTL.
const WORK: Duration = Duration::from_millis(250);
/// How often a waiting holder tries again.
const RETRY: Duration = Duration::from_millis(5);
/// How long a later holder waits for the lock at most.
const WAIT: Duration = Duration::from_secs(5);
/// The holders who wait while the first one holds it.
const LATER_HOLDERS: usize = 2;

pub static EXPERIMENT: Experiment = Experiment {
    name: "lock-misdelete",
    chapter: "分布式锁",
    invariant: "no two holders are ever inside the lock's critical section at once",
    versions: &[
        version!(
            "setnx-del",
            false,
            "SET NX PX; unlock with DEL, after a stall longer than the TTL",
            setnx_del
        ),
        version!(
            "owner-get-then-del",
            false,
            "SET NX PX with an owner value; GET, compare, stall, DEL",
            owner_get_then_del
        ),
        version!(
            "lua-unlock",
            true,
            "SET NX PX with an owner value; compare-and-delete in one Lua script",
            lua_unlock
        ),
        version!(
            "hmdp-lock",
            true,
            "hmdp-lock without a lease: the watchdog renews it while its holder stalls",
            hmdp_lock
        ),
    ],
};

/// How a version unlocks.
#[derive(Clone, Copy)]
enum Unlock {
    Del,
    CheckThenDel,
    Script,
}

async fn setnx_del(lab: &Lab) -> anyhow::Result<Outcome> {
    by_hand(lab, "setnx-del", Unlock::Del).await
}

async fn owner_get_then_del(lab: &Lab) -> anyhow::Result<Outcome> {
    by_hand(lab, "owner-get-then-del", Unlock::CheckThenDel).await
}

async fn lua_unlock(lab: &Lab) -> anyhow::Result<Outcome> {
    by_hand(lab, "lua-unlock", Unlock::Script).await
}

/// Who is inside the critical section, and how often someone entered beside another.
#[derive(Clone, Default)]
struct Section {
    inside: Arc<AtomicI64>,
    overlaps: Arc<AtomicI64>,
}

impl Section {
    /// Enters, works for `work`, leaves.
    async fn work(&self, work: Duration) {
        if self.inside.fetch_add(1, Ordering::SeqCst) > 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(work).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    fn outcome(&self, entered: i64) -> Outcome {
        let overlaps = self.overlaps.load(Ordering::SeqCst);
        Outcome::new(overlaps == 0)
            .metric("holders", entered)
            .metric("ttl_ms", TTL.as_millis() as u64)
            .metric("stall_ms", STALL.as_millis() as u64)
            .metric("overlaps", overlaps)
    }
}

/// The course's hand-written lock, unlocked the version's way.
async fn by_hand(lab: &Lab, name: &str, unlock: Unlock) -> anyhow::Result<Outcome> {
    let key = lab.key(&format!("lock:misdelete:{name}"));
    let section = Section::default();
    let first = SetNx::new(lab.redis.clone(), key.clone(), TTL);
    anyhow::ensure!(
        first.try_acquire().await?,
        "the first holder takes a free lock"
    );
    let later: Vec<_> = (0..LATER_HOLDERS)
        .map(|_| {
            let (section, conn, key) = (section.clone(), lab.redis.clone(), key.clone());
            tokio::spawn(async move { later_by_hand(section, conn, key, unlock).await })
        })
        .collect();
    section.work(FIRST_WORK).await;
    match unlock {
        Unlock::Del => {
            tokio::time::sleep(STALL).await;
            first.del().await?;
        }
        Unlock::CheckThenDel => first.check_then_del(STALL).await?,
        Unlock::Script => {
            tokio::time::sleep(STALL).await;
            first.unlock().await?;
        }
    }
    let mut entered = 1;
    for l in later {
        entered += i64::from(l.await??);
    }
    Ok(section.outcome(entered))
}

/// A later holder: waits for the lock, works, unlocks the version's way without stalling.
async fn later_by_hand(
    section: Section,
    conn: ConnectionManager,
    key: String,
    unlock: Unlock,
) -> anyhow::Result<bool> {
    let lock = SetNx::new(conn, key, TTL);
    if !lock.acquire_within(WAIT, RETRY).await? {
        return Ok(false);
    }
    section.work(WORK).await;
    match unlock {
        Unlock::Del => lock.del().await?,
        Unlock::CheckThenDel => lock.check_then_del(Duration::ZERO).await?,
        Unlock::Script => lock.unlock().await?,
    }
    Ok(true)
}

/// The same three holders on hmdp-lock, taken without a lease: the watchdog's lease is the
/// hand-written versions' TTL, so only its renewals keep the lock through the stall.
async fn hmdp_lock(lab: &Lab) -> anyhow::Result<Outcome> {
    let locks = LockClient::builder(lab.redis.clone())
        .subscriber(redis::Client::open(lab.redis_url.as_str())?)
        .key_prefix(lab.key(""))
        .watchdog_timeout(TTL)
        .build()?;
    let lock = locks.lock("misdelete:hmdp-lock")?;
    let section = Section::default();
    let first: LockGuard<ConnectionManager> = lock
        .try_lock(Duration::ZERO, None)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the first holder takes a free lock"))?;
    let later: Vec<_> = (0..LATER_HOLDERS)
        .map(|_| {
            let (section, lock) = (section.clone(), lock.clone());
            tokio::spawn(async move {
                let Some(guard) = lock.try_lock(WAIT, None).await? else {
                    return anyhow::Ok(false);
                };
                section.work(WORK).await;
                guard.unlock().await?;
                Ok(true)
            })
        })
        .collect();
    section.work(FIRST_WORK).await;
    tokio::time::sleep(STALL).await;
    first.unlock().await?;
    let mut entered = 1;
    for l in later {
        entered += i64::from(l.await??);
    }
    Ok(section.outcome(entered))
}
