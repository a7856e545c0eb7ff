//! 分布式锁: a lock deleted by someone who no longer holds it. Three holders take one Redis
//! lock in turn. The first does its work, then stalls (a GC pause, say) at its version's weak
//! point before the delete, until its lock has expired and the second holder has taken it.
//! When the first wakes, `DEL` deletes the second's lock, and so does the `GET`-compare-`DEL`
//! whose check passed before the stall; the third then gets in beside the second. The
//! compare-and-delete script deletes nothing that is not its own. hmdp-lock's first holder
//! stalls inside the critical section, past its lease: only the watchdog's renewals keep the
//! others out.
//!
//! Every step is ordered by events, not timers: the stall lasts until another owner's value is
//! in the key, and the second holder stays inside until the first's delete has landed and the
//! third has got in (or, when the delete deleted nothing, for [`LINGER`]), so the broken
//! versions overlap on every run however loaded the machine.
//!
//! Redis only: the critical section is a counter of holders inside it, and each entry that
//! finds someone already inside is an overlap.

use std::{
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
    time::{Duration, Instant},
};

use hmdp_lock::{LockClient, LockGuard};
use redis::aio::ConnectionManager;
use tokio::sync::watch;

use super::{Experiment, Text, version};
use crate::{
    Lab, Outcome, Trace,
    setnx::{Checked, SetNx},
    trace::{Actor, What},
};

/// The lock's TTL (the hand-written versions), and hmdp-lock's watchdog lease.
const TTL: Duration = Duration::from_millis(400);
/// The first holder's work, well inside the TTL.
const FIRST_WORK: Duration = Duration::from_millis(10);
/// hmdp-lock's first holder's stall inside the critical section: several leases, so only the
/// watchdog's renewals keep the lock.
const HELD_STALL: Duration = Duration::from_millis(1000);
/// How long a holder whose lock nobody deleted stays inside after the first one's unlock, for
/// another to (wrongly) get in; well inside its TTL.
const LINGER: Duration = Duration::from_millis(100);
/// hmdp-lock's later holders' work.
const WORK: Duration = Duration::from_millis(10);
/// How often a waiting holder tries again, and the stalled one looks at the key.
const RETRY: Duration = Duration::from_millis(5);
/// How long a later holder waits for the lock, and the stalled one for it to be taken, at most.
const WAIT: Duration = Duration::from_secs(5);
/// The holders who wait while the first one holds it.
const LATER_HOLDERS: usize = 2;

pub static EXPERIMENT: Experiment = Experiment {
    name: "lock-misdelete",
    chapter: "分布式锁",
    invariant: "no two holders are ever inside the lock's critical section at once",
    invariant_zh: "任何时刻都不会有两个持有者同时在锁的临界区里",
    lesson: Text {
        zh: "解锁前要确认锁还是自己的，“判断 + 删除”必须原子（Lua）；业务可能比 TTL 长时，还要看门狗续期。",
        en: "Unlock only your own lock, comparing and deleting atomically (Lua); when the work may outlast the TTL, a watchdog must renew it.",
    },
    versions: &[
        version!(
            "setnx-del",
            false,
            "SET NX PX; unlock with DEL, after a stall longer than the TTL",
            "SET NX PX；持有者卡顿超过 TTL 后用 DEL 解锁",
            setnx_del
        ),
        version!(
            "owner-get-then-del",
            false,
            "SET NX PX with an owner value; GET, compare, stall, DEL",
            "SET NX PX，值是持有者标识；GET、比较、卡顿、DEL",
            owner_get_then_del
        ),
        version!(
            "lua-unlock",
            true,
            "SET NX PX with an owner value; compare-and-delete in one Lua script",
            "SET NX PX，值是持有者标识；在一个 Lua 脚本里比较并删除",
            lua_unlock
        ),
        version!(
            "hmdp-lock",
            true,
            "hmdp-lock without a lease: the watchdog renews it while its holder stalls inside",
            "hmdp-lock，不设租期：持有者在锁内卡顿时看门狗一直续期",
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

/// Who is inside the critical section, how often someone entered beside another, and how
/// many have entered so far (watched by a holder waiting for another to get in); entries and
/// exits go into the version's trace.
#[derive(Clone)]
struct Section {
    inside: Arc<AtomicI64>,
    overlaps: Arc<AtomicI64>,
    entered: watch::Sender<usize>,
    trace: Trace,
}

impl Section {
    fn new(trace: Trace) -> Self {
        Self {
            inside: Arc::default(),
            overlaps: Arc::default(),
            entered: watch::Sender::new(0),
            trace,
        }
    }

    fn enter(&self, who: Actor) {
        let others = self.inside.fetch_add(1, Ordering::SeqCst);
        if others > 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        self.trace.record(who, What::Enter { others });
        self.entered.send_modify(|n| *n += 1);
    }

    fn leave(&self, who: Actor) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
        self.trace.record(who, What::Leave);
    }

    /// Enters, works for `work`, leaves.
    async fn work(&self, who: Actor, work: Duration) {
        self.enter(who);
        tokio::time::sleep(work).await;
        self.leave(who);
    }

    /// Waits, for at most `bound`, until `n` holders have entered.
    async fn until_entered(&self, n: usize, bound: Duration) {
        let mut entered = self.entered.subscribe();
        let _ = tokio::time::timeout(bound, entered.wait_for(|e| *e >= n)).await;
    }

    fn outcome(&self, entered: i64, stall: Duration) -> Outcome {
        let overlaps = self.overlaps.load(Ordering::SeqCst);
        self.trace
            .record(Actor::Lab, What::Overlaps { count: overlaps });
        // Three holders' steps: few enough to show them all.
        let timeline = self.trace.timeline(|_| true, 64);
        Outcome::new(overlaps == 0)
            .metric("holders", entered)
            .metric("ttl_ms", TTL.as_millis() as u64)
            .metric("stall_ms", stall.as_millis() as u64)
            .metric("overlaps", overlaps)
            .traced(timeline)
    }
}

/// The holders' owner values, in their numbers' order (holder 1 first).
#[derive(Clone)]
struct Owners(Arc<Vec<String>>);

impl Owners {
    /// What a `GET` or `DEL` of the lock by `me` saw: whose value (`None`: no key), and
    /// whether it was `me`'s own.
    fn whose(&self, me: u8, value: Option<&str>) -> (Option<u8>, bool) {
        let holder = value.map(|v| {
            self.0
                .iter()
                .position(|o| o == v)
                .map_or(0, |i| i as u8 + 1)
        });
        (holder, holder == Some(me))
    }

    fn get(&self, me: u8, value: Option<&str>) -> What {
        let (holder, own) = self.whose(me, value);
        What::GetLock { holder, own }
    }

    fn del(&self, me: u8, value: Option<&str>) -> What {
        let (holder, own) = self.whose(me, value);
        What::DelLock { holder, own }
    }
}

/// The course's hand-written lock, unlocked the version's way.
async fn by_hand(lab: &Lab, name: &str, unlock: Unlock) -> anyhow::Result<Outcome> {
    let key = lab.key(&format!("lock:misdelete:{name}"));
    let trace = Trace::start();
    let section = Section::new(trace.clone());
    // Set once the first holder's unlock has landed (whatever it deleted).
    let (unlocked, _) = watch::channel(false);
    let first = SetNx::new(lab.redis.clone(), key.clone(), TTL);
    let later_locks: Vec<SetNx> = (0..LATER_HOLDERS)
        .map(|_| SetNx::new(lab.redis.clone(), key.clone(), TTL))
        .collect();
    let owners = Owners(Arc::new(
        std::iter::once(&first)
            .chain(&later_locks)
            .map(|l| l.owner().to_owned())
            .collect(),
    ));
    let me = Actor::Holder { n: 1 };
    anyhow::ensure!(
        first.try_acquire().await?,
        "the first holder takes a free lock"
    );
    trace.record(
        me,
        What::SetNx {
            ok: true,
            refused_before: 0,
        },
    );
    let later: Vec<_> = later_locks
        .into_iter()
        .zip(2..)
        .map(|(lock, n)| {
            let (section, owners) = (section.clone(), owners.clone());
            let unlocked = unlocked.subscribe();
            tokio::spawn(
                async move { later_by_hand(section, lock, n, owners, unlock, unlocked).await },
            )
        })
        .collect();
    section.work(me, FIRST_WORK).await;
    let stalled = Instant::now();
    let ttl_ms = TTL.as_millis() as u64;
    trace.record(me, What::Stall { ttl_ms });
    let stall = first.taken_by_another(WAIT, RETRY);
    let stall_ms = match unlock {
        Unlock::Del => {
            stall.await?;
            let stall = stalled.elapsed();
            let deleted = first.del().await?;
            trace.record(me, owners.del(1, deleted.as_deref()));
            stall
        }
        Unlock::CheckThenDel => {
            // The check comes first and passes; the stall falls between it and the DEL.
            let checked = first
                .check_then_del(async {
                    trace.record(me, owners.get(1, Some(first.owner())));
                    stall.await.map(|_| ())
                })
                .await?;
            let Checked::Deleted(deleted) = checked else {
                anyhow::bail!("the first holder's check sees its own lock");
            };
            trace.record(me, owners.del(1, deleted.as_deref()));
            stalled.elapsed()
        }
        Unlock::Script => {
            stall.await?;
            let stall = stalled.elapsed();
            let deleted = first.unlock().await?;
            trace.record(me, What::ScriptUnlock { deleted });
            stall
        }
    };
    unlocked.send_replace(true);
    let mut entered = 1;
    for l in later {
        entered += i64::from(l.await??);
    }
    Ok(section.outcome(entered, stall_ms))
}

/// A later holder: waits for the lock; inside, waits until the first holder's unlock has
/// landed, then until every later holder has entered (for at most [`LINGER`]); leaves and
/// unlocks the version's way without stalling.
async fn later_by_hand(
    section: Section,
    lock: SetNx,
    n: u8,
    owners: Owners,
    unlock: Unlock,
    mut unlocked: watch::Receiver<bool>,
) -> anyhow::Result<bool> {
    let (me, trace) = (Actor::Holder { n }, section.trace.clone());
    let Some(refused_before) = lock.acquire_counting(WAIT, RETRY).await? else {
        trace.record(
            me,
            What::SetNx {
                ok: false,
                refused_before: 0,
            },
        );
        return Ok(false);
    };
    trace.record(
        me,
        What::SetNx {
            ok: true,
            refused_before,
        },
    );
    section.enter(me);
    let landed = tokio::time::timeout(WAIT, unlocked.wait_for(|u| *u))
        .await
        .is_ok_and(|r| r.is_ok());
    if landed {
        section.until_entered(1 + LATER_HOLDERS, LINGER).await;
    }
    section.leave(me);
    match unlock {
        Unlock::Del => {
            let deleted = lock.del().await?;
            trace.record(me, owners.del(n, deleted.as_deref()));
        }
        Unlock::CheckThenDel => match lock.check_then_del(async { Ok(()) }).await? {
            Checked::NotOurs(seen) => trace.record(me, owners.get(n, seen.as_deref())),
            Checked::Deleted(deleted) => {
                trace.record(me, owners.get(n, Some(lock.owner())));
                trace.record(me, owners.del(n, deleted.as_deref()));
            }
        },
        Unlock::Script => {
            let deleted = lock.unlock().await?;
            trace.record(me, What::ScriptUnlock { deleted });
        }
    }
    Ok(true)
}

/// The same three holders on hmdp-lock, taken without a lease (the watchdog's lease is the
/// hand-written versions' TTL). The first stalls inside the critical section for several
/// leases: only the watchdog's renewals keep the others out until it leaves and unlocks.
async fn hmdp_lock(lab: &Lab) -> anyhow::Result<Outcome> {
    let locks = LockClient::builder(lab.redis.clone())
        .subscriber(redis::Client::open(lab.redis_url.as_str())?)
        .key_prefix(lab.key(""))
        .watchdog_timeout(TTL)
        .build()?;
    let lock = locks.lock("misdelete:hmdp-lock")?;
    let section = Section::new(Trace::start());
    let first: LockGuard<ConnectionManager> = lock
        .try_lock(Duration::ZERO, None)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the first holder takes a free lock"))?;
    let later: Vec<_> = (0..LATER_HOLDERS)
        .zip(2..)
        .map(|(_, n)| {
            let (section, lock) = (section.clone(), lock.clone());
            tokio::spawn(async move {
                let Some(guard) = lock.try_lock(WAIT, None).await? else {
                    return anyhow::Ok(false);
                };
                section.work(Actor::Holder { n }, WORK).await;
                guard.unlock().await?;
                Ok(true)
            })
        })
        .collect();
    section
        .work(Actor::Holder { n: 1 }, FIRST_WORK + HELD_STALL)
        .await;
    first.unlock().await?;
    let mut entered = 1;
    for l in later {
        entered += i64::from(l.await??);
    }
    Ok(section.outcome(entered, HELD_STALL))
}
