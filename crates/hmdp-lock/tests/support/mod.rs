//! Helpers for hmdp-lock's integration tests: lock clients on a real Redis (never mocked),
//! raw connections to look behind the locks' backs, and waits until a waiter really waits (a
//! test that releases the lock earlier would prove nothing). Servers, prefixes and clean-up
//! come from `hmdp-testkit`.
#![allow(dead_code)]

use std::time::Duration;

use hmdp_lock::LockClient;
use redis::aio::ConnectionManager;

use hmdp_testkit::{redis_url, wait_until};

pub async fn conn_for(url: &str) -> (redis::Client, ConnectionManager) {
    let client = redis::Client::open(url).expect("valid redis url");
    let conn = client
        .get_connection_manager()
        .await
        .expect("redis reachable (set HMDP_TEST_REDIS_URL)");
    (client, conn)
}

/// A connection manager whose commands never time out on their own, so
/// only the lock crate's own limits bound a call to a hung server.
pub async fn conn_without_response_timeout(url: &str) -> (redis::Client, ConnectionManager) {
    let client = redis::Client::open(url).expect("valid redis url");
    let config = redis::aio::ConnectionManagerConfig::new().set_response_timeout(None);
    let conn = client
        .get_connection_manager_with_config(config)
        .await
        .expect("redis reachable");
    (client, conn)
}

/// A lock client on the shared test Redis with the given prefix.
pub async fn lock_client(prefix: &str) -> LockClient {
    lock_client_with(prefix, |b| b).await
}

pub async fn lock_client_with(
    prefix: &str,
    f: impl FnOnce(
        hmdp_lock::LockClientBuilder<ConnectionManager>,
    ) -> hmdp_lock::LockClientBuilder<ConnectionManager>,
) -> LockClient {
    let (client, conn) = conn_for(&redis_url()).await;
    f(LockClient::builder(conn)
        .subscriber(client)
        .key_prefix(prefix))
    .build()
    .expect("valid lock client")
}

/// A plain connection for inspecting keys behind the locks' backs.
pub async fn raw() -> ConnectionManager {
    conn_for(&redis_url()).await.1
}

/// Waits until a waiter has subscribed to `channel` (a lock's unlock messages) on one of the
/// Redis nodes at `urls`: it has found the lock held and now waits for its release.
pub async fn wait_for_waiter(urls: &[String], channel: &str) {
    let mut conns = Vec::new();
    for url in urls {
        conns.push(conn_for(url).await.1);
    }
    wait_until(Duration::from_secs(10), "a waiter subscribed", async || {
        let mut subscribers = 0;
        for conn in &mut conns {
            let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(channel)
                .query_async(conn)
                .await
                .unwrap();
            subscribers += counts[0].1;
        }
        subscribers > 0
    })
    .await;
}

/// The id Redis gives `conn`'s connection (`CLIENT ID`).
pub async fn client_id(conn: &mut ConnectionManager) -> i64 {
    redis::cmd("CLIENT")
        .arg("ID")
        .query_async(conn)
        .await
        .unwrap()
}

/// Waits until the connection `id` to the Redis at `url` has run a lock script since
/// [`client_id`] asked for its id: a waiter without a subscriber has made its first attempt.
pub async fn wait_for_attempt(url: &str, id: i64) {
    let mut conn = conn_for(url).await.1;
    wait_until(Duration::from_secs(10), "the first attempt", async || {
        let client: String = redis::cmd("CLIENT")
            .arg("LIST")
            .arg("ID")
            .arg(id)
            .query_async(&mut conn)
            .await
            .unwrap();
        client.contains("cmd=evalsha")
    })
    .await;
}
