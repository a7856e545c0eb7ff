//! Single-node lock behaviour against a real Redis.

mod support;

use std::sync::Arc;
use std::time::Duration;

use hmdp_lock::{LockClient, LockKind, LockOptions, WAIT_BUCKETS};
use hmdp_testkit::{redis_url, remove_keys, unique_prefix};
use redis::AsyncCommands;
use support::{lock_client, lock_client_with, raw};
use tokio::time::Instant;

const SHORT: Duration = Duration::from_millis(300);

async fn exclusive_counter(kind: LockKind, lease: Option<Duration>) {
    let p = unique_prefix();
    let locks = lock_client(&p).await;
    let counter_key = format!("{p}counter");
    let tasks = 16;
    let rounds = 20;
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let lock = locks
            .lock_with("counter", LockOptions::new().kind(kind))
            .unwrap();
        let counter_key = counter_key.clone();
        let mut conn = raw().await;
        handles.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = match lease {
                    Some(l) => lock.lock_with_lease(l).await.unwrap(),
                    None => lock.lock().await.unwrap(),
                };
                // Deliberately non-atomic read-modify-write with a yield in
                // between: only the lock keeps it exact.
                let v: Option<i64> = conn.get(&counter_key).await.unwrap();
                tokio::task::yield_now().await;
                let _: () = conn.set(&counter_key, v.unwrap_or(0) + 1).await.unwrap();
                assert!(guard.unlock().await.unwrap(), "lease must not expire here");
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let mut conn = raw().await;
    let total: i64 = conn.get(&counter_key).await.unwrap();
    assert_eq!(total, tasks * rounds);
    remove_keys(&redis_url(), &p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_reentrant_watchdog() {
    exclusive_counter(LockKind::Reentrant, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_simple_lease() {
    exclusive_counter(LockKind::Simple, Some(Duration::from_secs(5))).await;
}

#[tokio::test]
async fn works_over_multiplexed_connection() {
    let client = redis::Client::open(redis_url()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    let locks = LockClient::builder(conn)
        .subscriber(client)
        .key_prefix(unique_prefix())
        .build()
        .unwrap();
    let lock = locks.lock("mx").unwrap();
    let g = lock
        .try_lock(Duration::ZERO, Some(SHORT))
        .await
        .unwrap()
        .unwrap();
    assert!(lock.is_locked().await.unwrap());
    assert!(g.unlock().await.unwrap());
    assert!(!lock.is_locked().await.unwrap());
}

async fn non_owner_cannot_release(kind: LockKind) {
    let p = unique_prefix();
    let a = lock_client(&p).await;
    let b = lock_client(&p).await;
    let opts = LockOptions::new().kind(kind);
    let lock_a = a.lock_with("res", opts).unwrap();
    let lock_b = b.lock_with("res", opts).unwrap();

    let stale = lock_a
        .try_lock(Duration::ZERO, Some(Duration::from_millis(150)))
        .await
        .unwrap()
        .unwrap();
    // B cannot get it while A holds it.
    assert!(
        lock_b
            .try_lock(Duration::ZERO, Some(SHORT))
            .await
            .unwrap()
            .is_none()
    );
    // Not a wait: A's 150 ms lease runs out.
    tokio::time::sleep(Duration::from_millis(250)).await;
    let owner = lock_b
        .try_lock(Duration::ZERO, Some(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("expired lease frees the lock");

    // A's guard is stale now: it must neither extend nor release B's lock.
    assert!(!stale.extend(Duration::from_secs(30)).await.unwrap());
    assert!(stale.is_lost());
    assert!(!stale.unlock().await.unwrap());
    assert!(lock_b.is_locked().await.unwrap());
    let mut conn = raw().await;
    let pttl: i64 = conn.pttl(lock_b.key()).await.unwrap();
    assert!(
        pttl > 0 && pttl <= 5_000,
        "A's extend must not touch B's lease: {pttl}"
    );

    // Another client's fresh guard cannot take it either.
    assert!(
        lock_a
            .try_lock(Duration::ZERO, Some(SHORT))
            .await
            .unwrap()
            .is_none()
    );
    assert!(owner.unlock().await.unwrap());
    assert!(!lock_a.is_locked().await.unwrap());
}

#[tokio::test]
async fn non_owner_cannot_unlock_or_extend_reentrant() {
    non_owner_cannot_release(LockKind::Reentrant).await;
}

#[tokio::test]
async fn non_owner_cannot_unlock_or_extend_simple() {
    non_owner_cannot_release(LockKind::Simple).await;
}

#[tokio::test]
async fn expired_lease_frees_the_lock() {
    let locks = lock_client(&unique_prefix()).await;
    let lock = locks.lock("exp").unwrap();
    let g = lock
        .try_lock(Duration::ZERO, Some(Duration::from_millis(200)))
        .await
        .unwrap()
        .unwrap();
    assert!(!g.is_lost());
    assert!(
        lock.try_lock(Duration::ZERO, Some(SHORT))
            .await
            .unwrap()
            .is_none()
    );
    // Not a wait: the 200 ms lease runs out.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        g.is_lost(),
        "an explicit lease that ran out is reported lost"
    );
    assert!(!lock.is_locked().await.unwrap());
    let g2 = lock.try_lock(Duration::ZERO, Some(SHORT)).await.unwrap();
    assert!(g2.is_some());
}

#[tokio::test]
async fn leaked_guard_frees_after_lease() {
    let locks = lock_client(&unique_prefix()).await;
    let lock = locks.lock("leak").unwrap();
    let g = lock
        .try_lock(Duration::ZERO, Some(Duration::from_millis(300)))
        .await
        .unwrap()
        .unwrap();
    std::mem::forget(g); // never unlocked, never dropped
    let start = Instant::now();
    let g2 = lock
        .try_lock(Duration::from_secs(2), Some(SHORT))
        .await
        .unwrap()
        .expect("lease frees a leaked lock");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(200),
        "acquired too early: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(2000),
        "acquired too late: {waited:?}"
    );
    g2.unlock().await.unwrap();
}

#[test]
fn vanished_process_with_watchdog_frees_after_lease() {
    let p = unique_prefix();
    let key;
    {
        // The "process": its own runtime and connections, torn down without
        // unlocking (guard leaked, watchdog and connection gone with the
        // runtime).
        let rt = tokio::runtime::Runtime::new().unwrap();
        key = rt.block_on(async {
            let locks =
                lock_client_with(&p, |b| b.watchdog_timeout(Duration::from_millis(600))).await;
            let lock = locks.lock("vanish").unwrap();
            let g = lock.lock().await.unwrap();
            // Not a wait: held past the 600 ms lease, which only renewals extend.
            tokio::time::sleep(Duration::from_millis(700)).await;
            assert!(
                lock.is_locked().await.unwrap(),
                "watchdog renewed past the lease"
            );
            std::mem::forget(g);
            lock.key().to_owned()
        });
        rt.shutdown_background();
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let locks = lock_client(&p).await;
        let lock = locks.lock("vanish").unwrap();
        assert_eq!(lock.key(), key);
        let start = Instant::now();
        let g = lock
            .try_lock(Duration::from_secs(3), Some(SHORT))
            .await
            .unwrap()
            .expect("lock of a vanished holder frees after the lease");
        assert!(
            start.elapsed() < Duration::from_millis(2500),
            "{:?}",
            start.elapsed()
        );
        g.unlock().await.unwrap();
    });
}

#[tokio::test]
async fn reentrancy_counts_holds() {
    let p = unique_prefix();
    let locks = lock_client(&p).await;
    let other = lock_client(&p).await;
    let lock = locks.lock("re").unwrap();
    let foreign = other.lock("re").unwrap();

    let outer = lock.lock().await.unwrap();
    let inner = outer.reenter().await.unwrap().expect("still held");
    assert_eq!(inner.token(), outer.token());
    let mut conn = raw().await;
    let count: i64 = conn.hget(lock.key(), outer.token()).await.unwrap();
    assert_eq!(count, 2);

    assert!(inner.unlock().await.unwrap());
    assert!(lock.is_locked().await.unwrap(), "one hold left");
    assert!(
        foreign
            .try_lock(Duration::ZERO, Some(SHORT))
            .await
            .unwrap()
            .is_none()
    );
    let count: i64 = conn.hget(lock.key(), outer.token()).await.unwrap();
    assert_eq!(count, 1);

    assert!(outer.unlock().await.unwrap());
    assert!(!lock.is_locked().await.unwrap());
    let g = foreign.try_lock(Duration::ZERO, Some(SHORT)).await.unwrap();
    assert!(g.is_some());
}

#[tokio::test]
async fn reentry_and_partial_release_reset_the_lease() {
    // Redisson semantics: re-entry (and a release that leaves holds) runs
    // PEXPIRE with the hold's lease, so the lock lives a full lease again.
    let locks = lock_client(&unique_prefix()).await;
    let lock = locks.lock("release").unwrap();
    let lease = Duration::from_millis(1500);
    let outer = lock
        .try_lock(Duration::ZERO, Some(lease))
        .await
        .unwrap()
        .unwrap();
    let mut conn = raw().await;
    // Not a wait: the lease runs down to under 800 ms.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let before: i64 = conn.pttl(lock.key()).await.unwrap();
    assert!(
        before > 0 && before <= 800,
        "lease ran down first: {before}"
    );
    let inner = outer.reenter().await.unwrap().expect("still held");
    let after: i64 = conn.pttl(lock.key()).await.unwrap();
    assert!(
        after > 1200 && after <= 1500,
        "re-entry must reset the lease to 1500 ms, pttl {after} (was {before})"
    );
    // The guard's own view follows: past the original lease, not lost (not a wait).
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!outer.is_lost(), "re-entry moved the guard's deadline too");
    let before: i64 = conn.pttl(lock.key()).await.unwrap();
    assert!(before > 0 && before <= 700, "{before}");
    assert!(inner.unlock().await.unwrap());
    let after: i64 = conn.pttl(lock.key()).await.unwrap();
    assert!(
        after > 1200 && after <= 1500,
        "a release that leaves a hold resets the lease, pttl {after}"
    );
    assert!(outer.unlock().await.unwrap());
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn simple_lock_is_not_reentrant() {
    let locks = lock_client(&unique_prefix()).await;
    let lock = locks
        .lock_with("s", LockOptions::new().kind(LockKind::Simple))
        .unwrap();
    let g = lock
        .try_lock(Duration::ZERO, Some(SHORT))
        .await
        .unwrap()
        .unwrap();
    let err = g.reenter().await.unwrap_err();
    assert!(err.is_not_reentrant());
    // And a second acquisition by the same client waits for itself.
    assert!(
        lock.try_lock(Duration::from_millis(50), Some(SHORT))
            .await
            .unwrap()
            .is_none()
    );
    g.unlock().await.unwrap();
}

#[tokio::test]
async fn waiter_wakes_promptly_on_unlock() {
    let p = unique_prefix();
    // Fallback polling set to 5 s: a prompt wake-up can only come from pub/sub.
    let holder = lock_client(&p).await;
    let waiter = lock_client_with(&p, |b| b.retry_interval(Duration::from_secs(5))).await;
    let lock = holder.lock("wake").unwrap();
    let g = lock
        .try_lock(Duration::ZERO, Some(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();

    let wlock = waiter.lock("wake").unwrap();
    let start = Instant::now();
    let task = tokio::spawn(async move {
        let got = wlock
            .try_lock(Duration::from_secs(5), Some(SHORT))
            .await
            .unwrap();
        (got.is_some(), Instant::now())
    });
    support::wait_for_waiter(&[redis_url()], lock.channel()).await;
    let unlocked_at = Instant::now();
    assert!(g.unlock().await.unwrap());
    let (acquired, at) = task.await.unwrap();
    assert!(acquired);
    let total = at - start;
    let after_unlock = at - unlocked_at;
    assert!(total < Duration::from_millis(1500), "total wait {total:?}");
    assert!(
        after_unlock < Duration::from_millis(1000),
        "wake-up took {after_unlock:?}"
    );
}

#[tokio::test]
async fn waiter_gives_up_when_budget_is_spent() {
    let p = unique_prefix();
    let holder = lock_client(&p).await;
    let waiter = lock_client(&p).await;
    let g = holder
        .lock("budget")
        .unwrap()
        .try_lock(Duration::ZERO, Some(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    let start = Instant::now();
    let got = waiter
        .lock("budget")
        .unwrap()
        .try_lock(Duration::from_millis(300), Some(SHORT))
        .await
        .unwrap();
    let waited = start.elapsed();
    assert!(got.is_none());
    assert!(
        waited >= Duration::from_millis(300),
        "gave up early: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(1500),
        "gave up late: {waited:?}"
    );
    g.unlock().await.unwrap();
}

#[tokio::test]
async fn waiter_retries_when_holder_lease_runs_out() {
    // No unlock message ever comes; the TTL returned by the acquire script
    // tells the waiter when to retry.
    let p = unique_prefix();
    let holder = lock_client(&p).await;
    let waiter = lock_client_with(&p, |b| b.retry_interval(Duration::from_secs(5))).await;
    let g = holder
        .lock("ttl")
        .unwrap()
        .try_lock(Duration::ZERO, Some(Duration::from_millis(250)))
        .await
        .unwrap()
        .unwrap();
    std::mem::forget(g);
    let start = Instant::now();
    let got = waiter
        .lock("ttl")
        .unwrap()
        .try_lock(Duration::from_secs(3), Some(SHORT))
        .await
        .unwrap();
    assert!(got.is_some());
    assert!(
        start.elapsed() < Duration::from_millis(1500),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn many_waiters_share_one_subscription_and_all_get_through() {
    let p = unique_prefix();
    let locks = lock_client(&p).await;
    let mut conn = raw().await;
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..20 {
        let lock = locks.lock("queue").unwrap();
        handles.push(tokio::spawn(async move {
            let g = lock
                .try_lock(Duration::from_secs(10), Some(Duration::from_secs(10)))
                .await
                .unwrap()
                .expect("acquired within budget");
            // Not a wait: the holder's work.
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert!(g.unlock().await.unwrap());
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    // 20 holders × 5 ms; leases are 10 s, so only pub/sub can explain this.
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    let subs: Vec<(String, i64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(locks.lock("queue").unwrap().channel())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(subs[0].1 <= 1, "at most the shared subscriber: {subs:?}");
}

#[tokio::test]
async fn watchdog_keeps_lock_past_lease_and_stops_after_unlock() {
    let p = unique_prefix();
    let locks = lock_client_with(&p, |b| b.watchdog_timeout(Duration::from_millis(600))).await;
    let other = lock_client(&p).await;
    let lock = locks.lock("wd").unwrap();
    let g = lock.lock().await.unwrap();
    assert!(g.has_watchdog());
    let mut conn = raw().await;
    for _ in 0..10 {
        // Not a wait: the lease is sampled over 2 s, three times its length.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let pttl: i64 = conn.pttl(lock.key()).await.unwrap();
        assert!(
            pttl > 0 && pttl <= 600,
            "renewed lease expected, pttl {pttl}"
        );
    }
    // Held for 2 s with a 600 ms lease.
    assert!(!g.is_lost());
    assert!(
        other
            .lock("wd")
            .unwrap()
            .try_lock(Duration::ZERO, Some(SHORT))
            .await
            .unwrap()
            .is_none()
    );

    let token = g.token().to_owned();
    assert!(g.unlock().await.unwrap());
    let exists: bool = conn.exists(lock.key()).await.unwrap();
    assert!(!exists);
    // Plant the same owner field with a short TTL: a watchdog that outlived
    // the unlock would push it back to 600 ms.
    let _: () = conn.hset(lock.key(), &token, 1).await.unwrap();
    let _: () = conn.pexpire(lock.key(), 300).await.unwrap();
    // Not a wait: time for a renewal, which must not come, before the 300 ms run out.
    tokio::time::sleep(Duration::from_millis(450)).await;
    let exists: bool = conn.exists(lock.key()).await.unwrap();
    assert!(!exists, "no renewal after unlock");
}

#[tokio::test]
async fn lost_lock_is_observable() {
    let p = unique_prefix();
    let locks = lock_client_with(&p, |b| b.watchdog_timeout(Duration::from_millis(600))).await;
    let lock = locks.lock("lost").unwrap();
    let g = lock.lock().await.unwrap();
    assert!(!g.is_lost());
    let mut conn = raw().await;
    let _: () = conn.del(lock.key()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(1), g.lost())
        .await
        .expect("watchdog notices the deleted key within a renewal period");
    assert!(g.is_lost());
    assert!(
        !g.unlock().await.unwrap(),
        "unlock reports we no longer held it"
    );

    // Explicit lease: lost() resolves when the lease runs out.
    let g = lock
        .try_lock(Duration::ZERO, Some(Duration::from_millis(200)))
        .await
        .unwrap()
        .unwrap();
    let start = Instant::now();
    g.lost().await;
    assert!(start.elapsed() >= Duration::from_millis(150));
    assert!(start.elapsed() < Duration::from_millis(1500));
}

#[tokio::test]
async fn extend_moves_the_lease() {
    let locks = lock_client(&unique_prefix()).await;
    let lock = locks.lock("ext").unwrap();
    let g = lock
        .try_lock(Duration::ZERO, Some(Duration::from_millis(200)))
        .await
        .unwrap()
        .unwrap();
    assert!(g.extend(Duration::from_secs(5)).await.unwrap());
    // Not a wait: past the original 200 ms lease.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!g.is_lost());
    assert!(lock.is_locked().await.unwrap());
    assert!(g.unlock().await.unwrap());
}

async fn fencing_increases(kind: LockKind) {
    let p = unique_prefix();
    let a = lock_client(&p).await;
    let b = lock_client(&p).await;
    let opts = LockOptions::new().kind(kind).fencing(true);
    let la = a.lock_with("fence", opts).unwrap();
    let lb = b.lock_with("fence", opts).unwrap();
    let mut last = 0;
    for i in 0..6 {
        let lock = if i % 2 == 0 { &la } else { &lb };
        let g = lock
            .try_lock(Duration::from_secs(1), Some(SHORT))
            .await
            .unwrap()
            .unwrap();
        let t = g.fencing_token().expect("fencing on");
        assert!(t > last, "token {t} after {last}");
        last = t;
        if kind == LockKind::Reentrant {
            let inner = g.reenter().await.unwrap().unwrap();
            assert_eq!(inner.fencing_token(), Some(t), "re-entry keeps the token");
            inner.unlock().await.unwrap();
        }
        g.unlock().await.unwrap();
    }
    // Concurrent contenders still get distinct, increasing tokens.
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for i in 0..8 {
        let lock = if i % 2 == 0 { la.clone() } else { lb.clone() };
        let tokens = tokens.clone();
        handles.push(tokio::spawn(async move {
            let g = lock.lock_with_lease(Duration::from_secs(5)).await.unwrap();
            tokens.lock().unwrap().push(g.fencing_token().unwrap());
            g.unlock().await.unwrap();
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let tokens = tokens.lock().unwrap().clone();
    // Order of pushes is the order of holding, so strictly increasing.
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert!(tokens[0] > last);
    // Without the option there is no token.
    let plain = a.lock_with("fence", LockOptions::new().kind(kind)).unwrap();
    let g = plain
        .try_lock(Duration::ZERO, Some(SHORT))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(g.fencing_token(), None);
    g.unlock().await.unwrap();
    remove_keys(&redis_url(), &p);
}

#[tokio::test]
async fn fencing_tokens_strictly_increase_reentrant() {
    fencing_increases(LockKind::Reentrant).await;
}

#[tokio::test]
async fn fencing_tokens_strictly_increase_simple() {
    fencing_increases(LockKind::Simple).await;
}

#[tokio::test]
async fn drop_releases_in_background() {
    let p = unique_prefix();
    let locks = lock_client(&p).await;
    let other = lock_client_with(&p, |b| b.retry_interval(Duration::from_secs(5))).await;
    let lock = locks.lock("drop").unwrap();
    let g = lock.lock().await.unwrap();
    let waiter = other.lock("drop").unwrap();
    let task = tokio::spawn(async move {
        waiter
            .try_lock(Duration::from_secs(3), Some(SHORT))
            .await
            .unwrap()
            .is_some()
    });
    support::wait_for_waiter(&[redis_url()], lock.channel()).await;
    let start = Instant::now();
    drop(g);
    assert!(task.await.unwrap(), "waiter got the lock after the drop");
    assert!(
        start.elapsed() < Duration::from_millis(1500),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn keys_use_prefix_and_hash_tag() {
    let locks = lock_client("t123:").await;
    let lock = locks.lock("voucher:7").unwrap();
    assert_eq!(lock.key(), "t123:lock:{voucher:7}");
    assert_eq!(lock.fence_key(), "t123:lock:{voucher:7}:fence");
    assert_eq!(lock.channel(), "t123:lock:{voucher:7}:ch");
    assert!(locks.lock("").unwrap_err().is_invalid_argument());
}

#[tokio::test]
async fn force_unlock_wakes_waiters() {
    let p = unique_prefix();
    let locks = lock_client(&p).await;
    let lock = locks.lock("force").unwrap();
    let g = lock
        .try_lock(Duration::ZERO, Some(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    assert!(lock.force_unlock().await.unwrap());
    assert!(!g.unlock().await.unwrap());
    assert!(!lock.force_unlock().await.unwrap());
}

#[tokio::test]
async fn without_subscriber_waiters_poll_at_retry_interval() {
    let p = unique_prefix();
    let holder = lock_client(&p).await;
    let (_, mut conn) = support::conn_for(&redis_url()).await;
    let poller_id = support::client_id(&mut conn).await;
    let poller = LockClient::builder(conn)
        .key_prefix(&p)
        .retry_interval(Duration::from_millis(400))
        .build()
        .unwrap();
    let g = holder
        .lock("poll")
        .unwrap()
        .try_lock(Duration::ZERO, Some(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    let lock = poller.lock("poll").unwrap();
    let task = tokio::spawn(async move {
        let start = Instant::now();
        let got = lock
            .try_lock(Duration::from_secs(3), Some(SHORT))
            .await
            .unwrap();
        (got.is_some(), start.elapsed())
    });
    support::wait_for_attempt(&redis_url(), poller_id).await;
    g.unlock().await.unwrap();
    let (acquired, waited) = task.await.unwrap();
    assert!(acquired);
    // No pub/sub: the unlock is only noticed at the next poll, ~400 ms in.
    assert!(waited >= Duration::from_millis(350), "{waited:?}");
    assert!(waited < Duration::from_millis(2500), "{waited:?}");
}

#[tokio::test]
async fn reenter_after_loss_reports_none() {
    let locks = lock_client(&unique_prefix()).await;
    let lock = locks.lock("relost").unwrap();
    let g = lock
        .try_lock(Duration::ZERO, Some(Duration::from_secs(5)))
        .await
        .unwrap()
        .unwrap();
    assert!(lock.force_unlock().await.unwrap());
    assert!(g.reenter().await.unwrap().is_none());
    assert!(g.is_lost());
    assert!(
        !lock.is_locked().await.unwrap(),
        "re-entry must not re-acquire"
    );
    assert!(!g.unlock().await.unwrap());
}

#[tokio::test]
async fn stats_count_acquisitions_waits_timeouts_and_losses() {
    let p = unique_prefix();
    let holder = lock_client(&p).await;
    let waiter = lock_client(&p).await;
    let counted = waiter.clone(); // clones share the counters
    let hold = |locks: &LockClient| locks.lock("stats").unwrap();

    // Granted at once: no wait recorded.
    let g = hold(&waiter)
        .try_lock(Duration::ZERO, Some(SHORT))
        .await
        .unwrap()
        .unwrap();
    g.unlock().await.unwrap();
    let s = counted.stats();
    assert_eq!(
        (s.acquired, s.contended, s.timeouts, s.errors),
        (1, 0, 0, 0)
    );
    assert_eq!(s.waits(), 0);

    // Contended: granted after the holder lets go ~150 ms later.
    let g = hold(&holder)
        .try_lock(Duration::ZERO, Some(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    let lock = hold(&waiter);
    let task = tokio::spawn(async move {
        let start = Instant::now();
        let g = lock.try_lock(Duration::from_secs(5), Some(SHORT)).await;
        (g, start.elapsed())
    });
    support::wait_for_waiter(&[redis_url()], hold(&holder).channel()).await;
    // Not a wait: the holder keeps the lock a while longer.
    tokio::time::sleep(Duration::from_millis(150)).await;
    g.unlock().await.unwrap();
    let (got, waited) = task.await.unwrap();
    got.unwrap()
        .expect("granted after the wait")
        .unlock()
        .await
        .unwrap();
    let s = counted.stats();
    assert_eq!((s.acquired, s.contended, s.timeouts), (1, 1, 0));
    assert_eq!(s.waits(), 1);
    assert!(
        s.wait_time_us >= 140_000 && s.wait_time_us <= waited.as_micros() as u64,
        "{} us for a wait of {waited:?}",
        s.wait_time_us
    );
    // Cumulative histogram: 0 up to the bucket holding this wait, 1 from
    // there on (+Inf included).
    let wait = Duration::from_micros(s.wait_time_us);
    let first = WAIT_BUCKETS
        .iter()
        .position(|b| wait <= *b)
        .unwrap_or(WAIT_BUCKETS.len());
    for (i, n) in s.wait_buckets.iter().enumerate() {
        assert_eq!(
            *n,
            u64::from(i >= first),
            "bucket {i}: {:?}",
            s.wait_buckets
        );
    }
    assert_eq!(s.wait_buckets[3], 0, "nothing waited 50 ms or less");
    assert!(
        s.wait_buckets.windows(2).all(|w| w[0] <= w[1]),
        "cumulative"
    );
    assert_eq!(holder.stats().acquired, 1, "each client counts its own");

    // Budget spent while someone else holds it.
    let g = hold(&holder)
        .try_lock(Duration::ZERO, Some(Duration::from_millis(400)))
        .await
        .unwrap()
        .unwrap();
    let before = counted.stats().wait_time_us;
    let none = hold(&waiter)
        .try_lock(Duration::from_millis(200), Some(SHORT))
        .await
        .unwrap();
    assert!(none.is_none());
    let s = counted.stats();
    assert_eq!((s.acquired, s.contended, s.timeouts), (1, 1, 1));
    assert_eq!(s.waits(), 2);
    assert!(s.wait_time_us - before >= 200_000);
    assert_eq!(s.wait_buckets[4], 0, "nothing waited 100 ms or less");

    // The holder's explicit lease runs out before its unlock: one loss.
    assert_eq!(holder.stats().lost, 0);
    // Not a wait: the 400 ms lease runs out.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(g.is_lost());
    assert!(!g.unlock().await.unwrap());
    assert_eq!(holder.stats().lost, 1, "counted once");
    assert_eq!(counted.stats().lost, 0);
}
