//! Helpers for hmdp-lock's integration tests: lock clients on a real Redis (never mocked)
//! and raw connections to look behind the locks' backs. Servers, prefixes and clean-up come
//! from `hmdp-testkit`.
#![allow(dead_code)]

use hmdp_lock::LockClient;
use redis::aio::ConnectionManager;

use hmdp_testkit::redis_url;

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
