//! 分布式锁: re-entry. A holder calls a method that takes the same lock again. `SET NX` cannot
//! tell its own holder from anyone else: the inner call waits for a lock only its caller can
//! release, until the outer hold's TTL runs out (here it gives up after [`INNER_WAIT`], and that
//! is a self-deadlock). hmdp-lock counts holds per owner, as Redisson does: the inner hold is a
//! second guard of the same ownership, and releasing it leaves the outer one held.

use std::time::Duration;

use hmdp_lock::LockClient;

use super::{Experiment, Text, version};
use crate::{Lab, Outcome, setnx::SetNx};

/// Holders, each on a lock of its own, all at once.
const HOLDERS: i64 = 5;
/// The outer hold's TTL (the hand-written version): far longer than the inner call waits.
const TTL: Duration = Duration::from_secs(10);
/// How long the inner call waits for the lock before it counts as blocked on itself.
const INNER_WAIT: Duration = Duration::from_millis(200);
/// How often the inner call tries again.
const RETRY: Duration = Duration::from_millis(10);

pub static EXPERIMENT: Experiment = Experiment {
    name: "lock-reentrancy",
    chapter: "分布式锁",
    invariant: "a holder that takes its own lock again gets it, and keeps it when that inner hold ends",
    invariant_zh: "持有者再次获取自己的锁能拿到，内层释放之后仍然持有",
    lesson: Text {
        zh: "可重入锁按持有者记录重入次数（hash），减到 0 才真正删除。",
        en: "A reentrant lock counts the holds of each owner (a hash) and deletes the lock only when the count reaches 0.",
    },
    versions: &[
        version!(
            "setnx",
            false,
            "SET NX PX: the inner call waits for its own caller's lock",
            "SET NX PX：内层调用等它自己的调用者持有的锁",
            setnx
        ),
        version!(
            "hmdp-lock",
            true,
            "hmdp-lock: a hold count per owner; the inner call re-enters through the guard",
            "hmdp-lock：按持有者记重入次数，内层调用通过 guard 重入",
            hmdp_lock
        ),
    ],
};

async fn setnx(lab: &Lab) -> anyhow::Result<Outcome> {
    let mut holders = Vec::new();
    for i in 0..HOLDERS {
        let (conn, key) = (lab.redis.clone(), lab.key(&format!("lock:reentrancy:{i}")));
        holders.push(tokio::spawn(async move {
            let outer = SetNx::new(conn.clone(), key.clone(), TTL);
            anyhow::ensure!(outer.try_acquire().await?, "a free lock is taken");
            // The inner method takes the same lock, as the course's code does: SET NX again.
            let inner = SetNx::new(conn, key, TTL);
            let got_in = inner.acquire_within(INNER_WAIT, RETRY).await?;
            if got_in {
                inner.unlock().await?;
            }
            outer.unlock().await?;
            Ok(!got_in)
        }));
    }
    let mut deadlocked = 0;
    for h in holders {
        deadlocked += i64::from(h.await??);
    }
    Ok(outcome(deadlocked, None))
}

async fn hmdp_lock(lab: &Lab) -> anyhow::Result<Outcome> {
    let locks = LockClient::builder(lab.redis.clone())
        .key_prefix(lab.key(""))
        .build()?;
    let mut holders = Vec::new();
    for i in 0..HOLDERS {
        let lock = locks.lock(&format!("reentrancy:{i}"))?;
        holders.push(tokio::spawn(async move {
            let outer = lock
                .try_lock(Duration::ZERO, None)
                .await?
                .ok_or_else(|| anyhow::anyhow!("a free lock is taken"))?;
            // The inner method takes the same lock through the ownership it is handed.
            let Some(inner) = outer.reenter().await? else {
                outer.unlock().await?;
                return anyhow::Ok((true, false));
            };
            inner.unlock().await?;
            let freed = !lock.is_locked().await?;
            outer.unlock().await?;
            Ok((false, freed))
        }));
    }
    let (mut deadlocked, mut freed) = (0, 0);
    for h in holders {
        let (d, f) = h.await??;
        deadlocked += i64::from(d);
        freed += i64::from(f);
    }
    Ok(outcome(deadlocked, Some(freed)))
}

/// `freed`: outer holds that the inner release let go of, where the inner call got in at all.
fn outcome(deadlocked: i64, freed: Option<i64>) -> Outcome {
    let o = Outcome::new(deadlocked == 0 && freed.unwrap_or(0) == 0)
        .metric("holders", HOLDERS)
        .metric("inner_wait_ms", INNER_WAIT.as_millis() as u64)
        .metric("self_deadlocks", deadlocked);
    match freed {
        Some(f) => o.metric("freed_by_inner_release", f),
        None => o,
    }
}
