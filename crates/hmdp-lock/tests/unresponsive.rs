//! A Redis that stops answering: a throw-away `redis-server` frozen with
//! SIGSTOP (connections stay open, nothing comes back). The command
//! connections here have no response timeout of their own, so only the lock
//! crate's limits can bound a call.

mod support;

use std::time::Duration;

use hmdp_lock::LockClient;
use redis::AsyncCommands;
use support::{RedisServer, conn_without_response_timeout, prefix};
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

/// Polls the lock's PTTL until it jumps up, i.e. a watchdog renewal has
/// just landed, and returns when that was seen.
async fn next_renewal(conn: &mut redis::aio::ConnectionManager, key: &str) -> Instant {
    let mut last: i64 = conn.pttl(key).await.unwrap();
    let give_up = Instant::now() + Duration::from_secs(5);
    while Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let pttl: i64 = conn.pttl(key).await.unwrap();
        assert!(pttl > 0, "lock must be held while renewals work: {pttl}");
        if pttl > last + 100 {
            return Instant::now();
        }
        last = pttl;
    }
    panic!("no watchdog renewal seen");
}

#[tokio::test]
async fn watchdog_reports_loss_when_the_last_confirmed_lease_runs_out() {
    let server = RedisServer::start().await;
    let p = prefix();
    let lease = Duration::from_millis(1200); // renewals every 400 ms
    let locks = client_on(&server, &p, |b| b.watchdog_timeout(lease)).await;
    let lock = locks.lock("wd-hung").unwrap();
    let guard = lock.lock().await.unwrap();
    assert!(guard.has_watchdog());

    let (_, mut raw) = conn_without_response_timeout(&server.url()).await;
    let renewed = next_renewal(&mut raw, lock.key()).await;
    server.pause();
    // That renewal was sent before `renewed`; nothing after it is confirmed,
    // so from `renewed + lease` at the latest another client may hold the
    // lock (once Redis runs again, the key has expired).
    tokio::time::sleep(lease / 2).await;
    assert!(!guard.is_lost(), "the confirmed lease has not run out yet");
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() resolves while Redis is frozen");
    let after = renewed.elapsed();
    assert!(guard.is_lost());
    // The old behaviour noticed only after a further failed renewal period
    // (lease + lease/3 = 1600 ms); a loaded machine gets 250 ms of room.
    assert!(
        after <= lease + Duration::from_millis(250),
        "loss reported {after:?} after the last confirmed renewal (lease {lease:?})"
    );
    assert!(
        after >= lease - Duration::from_millis(300),
        "loss reported too early: {after:?}"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(guard.is_lost(), "lost stays lost");

    server.resume();
    assert!(
        !guard.unlock().await.unwrap(),
        "the key expired while Redis was frozen"
    );
}
