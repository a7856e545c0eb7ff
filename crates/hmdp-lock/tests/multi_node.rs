//! MultiLock and RedLock, over the shared Redis and over independent
//! `redis-server` processes started (and killed) by the tests.

mod support;

use std::time::Duration;

use hmdp_lock::{LockClient, LockKind, LockOptions, MultiLock, RedLock, testing::MovingSource};
use hmdp_testkit::{RedisServer, redis_url, unique_prefix, wait_until};
use redis::AsyncCommands;
use support::{conn_for, lock_client, wait_for_waiter};
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(5);

async fn node_clients(servers: &[RedisServer], prefix: &str) -> Vec<LockClient> {
    let mut out = Vec::new();
    for s in servers {
        let (client, conn) = conn_for(&s.url()).await;
        out.push(
            LockClient::builder(conn)
                .subscriber(client)
                .key_prefix(prefix)
                .build()
                .unwrap(),
        );
    }
    out
}

async fn exists(url: &str, key: &str) -> bool {
    let (_, mut conn) = conn_for(url).await;
    conn.exists(key).await.unwrap()
}

#[tokio::test]
async fn multilock_is_all_or_nothing() {
    let p = unique_prefix();
    let me = lock_client(&p).await;
    let rival = lock_client(&p).await;
    let names = ["a", "b", "c"];
    let multi = MultiLock::new(names.iter().map(|n| me.lock(n).unwrap())).unwrap();

    // A rival holds "b": the multi-lock must fail and leave "a" and "c" free.
    let b = rival
        .lock("b")
        .unwrap()
        .try_lock(Duration::ZERO, Some(LEASE))
        .await
        .unwrap()
        .unwrap();
    let start = Instant::now();
    let got = multi
        .try_lock(Duration::from_millis(200), Some(LEASE))
        .await
        .unwrap();
    assert!(got.is_none());
    assert!(start.elapsed() >= Duration::from_millis(200));
    for n in ["a", "c"] {
        assert!(
            !me.lock(n).unwrap().is_locked().await.unwrap(),
            "{n} must be released"
        );
    }

    // Once "b" is released during the wait, all three are taken.
    let multi2 = multi.clone();
    let task = tokio::spawn(async move { multi2.try_lock(Duration::from_secs(3), None).await });
    wait_for_waiter(&[redis_url()], me.lock("b").unwrap().channel()).await;
    b.unlock().await.unwrap();
    let guard = task
        .await
        .unwrap()
        .unwrap()
        .expect("acquired after release");
    assert_eq!(guard.guards().len(), 3);
    assert!(!guard.is_lost());
    for n in names {
        assert!(me.lock(n).unwrap().is_locked().await.unwrap());
    }
    assert!(
        rival
            .lock("a")
            .unwrap()
            .try_lock(Duration::ZERO, Some(LEASE))
            .await
            .unwrap()
            .is_none()
    );
    assert!(guard.unlock().await.unwrap());
    for n in names {
        assert!(!me.lock(n).unwrap().is_locked().await.unwrap());
    }
}

#[tokio::test]
async fn multilock_across_independent_nodes() {
    let servers = [
        RedisServer::start().await,
        RedisServer::start().await,
        RedisServer::start().await,
    ];
    let p = unique_prefix();
    let clients = node_clients(&servers, &p).await;
    let rivals = node_clients(&servers, &p).await;
    let multi = MultiLock::new(clients.iter().map(|c| c.lock("job").unwrap())).unwrap();

    let held_on_third = rivals[2]
        .lock("job")
        .unwrap()
        .try_lock(Duration::ZERO, Some(LEASE))
        .await
        .unwrap()
        .unwrap();
    assert!(
        multi
            .try_lock(Duration::from_millis(100), Some(LEASE))
            .await
            .unwrap()
            .is_none()
    );
    let key = clients[0].lock("job").unwrap().key().to_owned();
    assert!(!exists(&servers[0].url(), &key).await);
    assert!(!exists(&servers[1].url(), &key).await);

    held_on_third.unlock().await.unwrap();
    let g = multi
        .try_lock(Duration::ZERO, Some(LEASE))
        .await
        .unwrap()
        .unwrap();
    for s in &servers {
        assert!(exists(&s.url(), &key).await);
    }
    assert!(g.unlock().await.unwrap());
    for s in &servers {
        assert!(!exists(&s.url(), &key).await);
    }
}

#[tokio::test]
async fn redlock_quorum_survives_one_node_down_not_two() {
    let mut servers = [
        RedisServer::start().await,
        RedisServer::start().await,
        RedisServer::start().await,
    ];
    let p = unique_prefix();
    let clients = node_clients(&servers, &p).await;
    let opts = LockOptions::new().kind(LockKind::Simple);
    let redlock = RedLock::new(clients.iter().map(|c| c.lock_with("rl", opts).unwrap()))
        .unwrap()
        .node_timeout(Duration::from_millis(100));
    assert_eq!(redlock.quorum(), 2);
    let key = clients[0].lock("rl").unwrap().key().to_owned();

    // All up.
    let g = redlock
        .try_lock(Duration::ZERO, LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(g.nodes_granted(), 3);
    assert!(g.validity() < LEASE && g.validity() > LEASE - Duration::from_millis(500));
    // A competing RedLock cannot get a majority while we hold it.
    let rivals = node_clients(&servers, &p).await;
    let rival = RedLock::new(rivals.iter().map(|c| c.lock_with("rl", opts).unwrap())).unwrap();
    assert!(
        rival
            .try_lock(Duration::from_millis(100), LEASE)
            .await
            .unwrap()
            .is_none()
    );
    assert!(g.unlock().await.unwrap());
    for s in &servers {
        assert!(!exists(&s.url(), &key).await, "released on every node");
    }

    // One of three down: still a majority.
    servers[0].kill();
    let mut g = redlock
        .try_lock(Duration::from_secs(1), LEASE)
        .await
        .unwrap()
        .expect("2 of 3 nodes are a quorum");
    assert_eq!(g.nodes_granted(), 2);
    assert!(g.extend(LEASE).await.unwrap());
    assert!(g.unlock().await.unwrap());

    // Two of three down: no majority, and nothing left behind on the survivor.
    servers[1].kill();
    let start = Instant::now();
    let got = redlock
        .try_lock(Duration::from_millis(300), LEASE)
        .await
        .unwrap();
    assert!(got.is_none());
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(
        !exists(&servers[2].url(), &key).await,
        "failed rounds are rolled back"
    );
}

#[tokio::test]
async fn redlock_validity_accounts_for_lease_and_drift() {
    let servers = [
        RedisServer::start().await,
        RedisServer::start().await,
        RedisServer::start().await,
    ];
    let clients = node_clients(&servers, &unique_prefix()).await;
    let redlock = RedLock::new(clients.iter().map(|c| c.lock("v").unwrap())).unwrap();
    let key = clients[0].lock("v").unwrap().key().to_owned();
    // A lease the drift allowance (1% + 2 ms) would eat is rejected outright.
    let err = redlock
        .try_lock(Duration::ZERO, Duration::from_millis(2))
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument());
    let g = redlock
        .try_lock(Duration::ZERO, Duration::from_millis(1000))
        .await
        .unwrap()
        .unwrap();
    assert!(g.validity() <= Duration::from_millis(988));
    assert!(g.validity() > Duration::from_millis(800));
    assert!(!g.is_lost());
    g.unlock().await.unwrap();
    for s in &servers {
        assert!(!exists(&s.url(), &key).await);
    }
}

#[tokio::test]
async fn subscriber_reconnects_and_wakes_waiters_after_a_restart() {
    let mut server = RedisServer::start().await;
    let port = server.port();
    let p = unique_prefix();
    let holder = node_clients(std::slice::from_ref(&server), &p)
        .await
        .remove(0);
    let (client, conn) = conn_for(&server.url()).await;
    let waiter = LockClient::builder(conn)
        .subscriber(client)
        .key_prefix(&p)
        .retry_interval(Duration::from_secs(10))
        .build()
        .unwrap();
    let g = holder
        .lock("rc")
        .unwrap()
        .try_lock(Duration::ZERO, Some(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    let wlock = waiter.lock("rc").unwrap();
    let task = tokio::spawn(async move {
        loop {
            // Errors while the server is down end a try_lock; retry them as a client would
            // (not a wait of the test's: the pause is this client's between its tries).
            match wlock.try_lock(Duration::from_secs(8), Some(LEASE)).await {
                Ok(Some(g)) => return g,
                Ok(None) => panic!("waiter never woke up"),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    });
    wait_for_waiter(&[server.url()], holder.lock("rc").unwrap().channel()).await;
    std::mem::forget(g);
    server.kill();
    let restarted_at = Instant::now();
    let _server = RedisServer::start_on(port).await;
    // The restart wiped the lock (no persistence) and its unlock message can
    // never come: only the subscriber's reconnect wake-up gets the waiter in.
    let wg = task.await.unwrap();
    assert!(
        restarted_at.elapsed() < Duration::from_secs(4),
        "{:?}",
        restarted_at.elapsed()
    );

    // The re-established subscription delivers unlock messages again.
    let hlock = holder.lock("rc").unwrap();
    let wlock = waiter.lock("rc").unwrap();
    assert!(wg.unlock().await.unwrap());
    // The holder's ConnectionManager fails its first request after the
    // restart and reconnects; wait for that before using it.
    wait_until(
        Duration::from_secs(10),
        "the holder reconnected",
        async || hlock.is_locked().await.is_ok(),
    )
    .await;
    let hg = hlock
        .try_lock(Duration::from_secs(2), Some(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    let task = tokio::spawn(async move {
        let got = wlock.try_lock(Duration::from_secs(5), Some(LEASE)).await;
        (got.unwrap().is_some(), Instant::now())
    });
    wait_for_waiter(&[server.url()], hlock.channel()).await;
    let unlocked_at = Instant::now();
    assert!(hg.unlock().await.unwrap());
    let (acquired, at) = task.await.unwrap();
    assert!(acquired);
    assert!(
        at - unlocked_at < Duration::from_millis(200),
        "{:?}",
        at - unlocked_at
    );
}

/// When its subscription source moves to another server (a Sentinel failover; the old server
/// still runs and the connection to it is fine), the lock subscriber resubscribes there, and a
/// waiter is woken by an unlock published on the new server, long before the holder's lease
/// would have let it in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriber_follows_its_source_to_another_server() {
    let (old, new) = (RedisServer::start().await, RedisServer::start().await);
    let p = unique_prefix();
    let holder = node_clients(std::slice::from_ref(&new), &p).await.remove(0);
    let g = holder
        .lock("mv")
        .unwrap()
        .try_lock(Duration::ZERO, Some(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    let source = MovingSource::new(old.url());
    let waiter = LockClient::builder(conn_for(&new.url()).await.1)
        .subscriber(source.clone())
        .key_prefix(&p)
        .retry_interval(Duration::from_secs(60))
        .build()
        .unwrap();
    let wlock = waiter.lock("mv").unwrap();
    let channel = wlock.channel().to_owned();
    let task =
        tokio::spawn(async move { wlock.try_lock(Duration::from_secs(50), Some(LEASE)).await });
    wait_for_waiter(&[old.url()], &channel).await;

    source.move_to(new.url());
    wait_for_waiter(&[new.url()], &channel).await;
    assert!(g.unlock().await.unwrap());
    let woken = tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("woken by the unlock on the new server, not by the lease's end")
        .unwrap()
        .unwrap();
    assert!(woken.is_some());
}
