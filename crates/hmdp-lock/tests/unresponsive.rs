//! A Redis that stops answering: a throw-away `redis-server` frozen with
//! SIGSTOP (connections stay open, nothing comes back). The command
//! connections here have no response timeout of their own, so only the lock
//! crate's limits can bound a call.

mod support;

use std::time::Duration;

use hmdp_lock::LockClient;
use hmdp_testkit::{Patience, RedisServer, unique_prefix, wait_until};
use redis::AsyncCommands;
use support::{conn_without_response_timeout, wait_for_waiter};
use tokio::time::Instant;

async fn client_on(
    server: &RedisServer,
    prefix: &str,
    f: impl FnOnce(
        hmdp_lock::LockClientBuilder<redis::aio::ConnectionManager>,
    ) -> hmdp_lock::LockClientBuilder<redis::aio::ConnectionManager>,
) -> LockClient {
    let (client, conn) = conn_without_response_timeout(&server.url()).await;
    f(LockClient::builder(conn)
        .subscriber(client)
        .key_prefix(prefix))
    .build()
    .unwrap()
}

/// When the lock's key expires, as far as Redis says: `(earliest, latest)`.
/// Polls the PTTL until it jumps up (a watchdog renewal has just landed);
/// the key then expires `pttl` after Redis answered, which lies between the
/// moment the question was sent and the moment the answer was read. A test
/// task that runs late on a loaded machine widens the window instead of
/// moving it.
async fn next_renewal(conn: &mut redis::aio::ConnectionManager, key: &str) -> (Instant, Instant) {
    let mut last: i64 = conn.pttl(key).await.unwrap();
    // Asked often: the renewal's moment is what the test measures from.
    let patience = Patience::new(Duration::from_secs(5)).every(Duration::from_millis(5));
    wait_until(patience, "a watchdog renewal", async || {
        let asked = Instant::now();
        let pttl: i64 = conn.pttl(key).await.unwrap();
        let answered = Instant::now();
        assert!(pttl > 0, "lock must be held while renewals work: {pttl}");
        let renewed = pttl > last + 100;
        last = pttl;
        let left = Duration::from_millis(pttl as u64);
        renewed.then(|| (asked + left, answered + left))
    })
    .await
}

#[tokio::test]
async fn watchdog_reports_loss_when_the_last_confirmed_lease_runs_out() {
    let server = RedisServer::start().await;
    let p = unique_prefix();
    let lease = Duration::from_millis(2400); // renewals every 800 ms
    let locks = client_on(&server, &p, |b| b.watchdog_timeout(lease)).await;
    let lock = locks.lock("wd-hung").unwrap();
    let guard = lock.lock().await.unwrap();
    assert!(guard.has_watchdog());

    let (_, mut raw) = conn_without_response_timeout(&server.url()).await;
    let (expires_from, expires_by) = next_renewal(&mut raw, lock.key()).await;
    server.pause();
    // The watchdog counts its lease from when it sent the renewal Redis last
    // confirmed, a little before Redis set the key's expiry: it must report
    // the loss no later than the key expires, and not long before.
    // Not a wait: half the lease passes.
    tokio::time::sleep_until(expires_from - lease / 2).await;
    if Instant::now() < expires_from - lease / 3 {
        assert!(!guard.is_lost(), "the confirmed lease has not run out yet");
    }
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() resolves while Redis is frozen");
    let lost_at = Instant::now();
    assert!(guard.is_lost());
    // The old behaviour noticed only after a further failed renewal period
    // (lease / 3 after the expiry); a loaded machine gets 250 ms of room.
    assert!(
        lost_at <= expires_by + Duration::from_millis(250),
        "loss reported {:?} after the key expired (lease {lease:?})",
        lost_at - expires_by
    );
    // Reporting at the first failed renewal would come two thirds of the
    // lease (1600 ms) before the expiry. The watchdog counts from when it
    // sent its renewal, which a loaded machine may deliver late (or, past a
    // renewal period, not confirm at all, falling back to the one before),
    // so the room on this side is half the lease.
    assert!(
        lost_at + lease / 2 >= expires_from,
        "loss reported too early: {:?} before the key expired",
        expires_from - lost_at
    );
    // Counted once, whichever of lost(), is_lost() and the watchdog saw it first.
    // Not a wait: time for a second count, which must not come.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(locks.stats().lost, 1);
    assert!(guard.is_lost(), "lost stays lost");

    // Not a wait: the key's own expiry passes (the loss may be reported a
    // little before it).
    tokio::time::sleep_until(expires_by + Duration::from_millis(10)).await;
    server.resume();
    assert!(
        !guard.unlock().await.unwrap(),
        "the key expired while Redis was frozen"
    );
    assert_eq!(locks.stats().lost, 1, "a loss is counted once");
}

#[tokio::test]
async fn try_lock_on_a_frozen_redis_returns_within_its_budget() {
    let server = RedisServer::start().await;
    let p = unique_prefix();
    let floor = Duration::from_millis(50);
    let locks = client_on(&server, &p, |b| b.min_attempt_timeout(floor)).await;
    let lock = locks.lock("hung").unwrap();
    // Warm the connection and load the script while Redis still answers.
    lock.try_lock(Duration::ZERO, Some(Duration::from_secs(1)))
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    server.pause();

    for wait in [Duration::from_millis(300), Duration::ZERO] {
        let start = Instant::now();
        let res = tokio::time::timeout(
            Duration::from_secs(5),
            lock.try_lock(wait, Some(Duration::from_secs(1))),
        )
        .await
        .expect("try_lock must not hang on a frozen Redis");
        let took = start.elapsed();
        let err = res.expect_err("no answer is an error, not 'busy'");
        assert!(err.is_timeout(), "{err}");
        assert!(err.is_redis());
        // Within the budget (or the floor for a zero budget) plus room for
        // a loaded machine.
        assert!(took >= wait.max(floor), "gave up early: {took:?}");
        assert!(
            took < wait.max(floor) + Duration::from_millis(250),
            "budget {wait:?}, returned after {took:?}"
        );
    }
    let stats = locks.stats();
    assert_eq!(stats.errors, 2);
    assert_eq!(stats.acquired, 1);
    assert_eq!(stats.timeouts, 0, "an unanswered call is not 'lock busy'");
    server.resume();
    // Redis now runs the queued acquire calls — the lock was free, so they
    // are granted — and then the background releases queued behind them.
    assert!(
        !lock.is_locked().await.unwrap(),
        "an unanswered acquire that Redis granted later is released"
    );
}

#[tokio::test]
async fn try_lock_waiting_when_redis_freezes_returns_within_its_budget() {
    let server = RedisServer::start().await;
    let p = unique_prefix();
    let holder = client_on(&server, &p, |b| b).await;
    let floor = Duration::from_millis(50);
    let waiter = client_on(&server, &p, |b| {
        b.min_attempt_timeout(floor)
            .retry_interval(Duration::from_millis(100))
    })
    .await;
    let held = holder
        .lock("busy")
        .unwrap()
        .try_lock(Duration::ZERO, Some(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    let lock = waiter.lock("busy").unwrap();
    let budget = Duration::from_millis(600);
    let start = Instant::now();
    let task = tokio::spawn(async move {
        tokio::time::timeout(
            Duration::from_secs(5),
            lock.try_lock(budget, Some(Duration::from_secs(1))),
        )
        .await
    });
    // Once the waiter is subscribed and asleep, freeze Redis under it.
    wait_for_waiter(&[server.url()], holder.lock("busy").unwrap().channel()).await;
    server.pause();
    let res = task
        .await
        .unwrap()
        .expect("try_lock must not hang on a frozen Redis");
    let took = start.elapsed();
    // Its retries find Redis hung; whatever the outcome, it must come
    // within the budget plus one floor and some room.
    assert!(
        took < budget + floor + Duration::from_millis(250),
        "budget {budget:?}, returned after {took:?}"
    );
    let err = res.expect_err("the retry at the end of the budget got no answer");
    assert!(err.is_timeout(), "{err}");
    server.resume();
    assert!(held.unlock().await.unwrap());
}
