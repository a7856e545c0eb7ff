//! Test support shared by the hmdp crates, used as a dev-dependency (and by `hmdp-bench` and
//! `hmdp-lab`, for their private Redis Clusters).
//!
//! Every integration test suite in the workspace runs against real servers (Redis is never
//! mocked): the shared ones named by `HMDP_TEST_REDIS_URL`, `HMDP_TEST_MYSQL_URL` and
//! `HMDP_TEST_AMQP_URL`, private `redis-server` processes a test starts, stops, freezes, joins
//! into a cluster or puts under Sentinels, a RabbitMQ vhost of a test's own, a proxy in front of the broker that a
//! test cuts, or a private RabbitMQ node it restarts. What those suites have in common lives here once; what only one crate needs stays
//! in its own tests.

mod amqp;
mod keys;
mod sentinel;
mod server;
mod wait;

use std::net::TcpListener;

pub use amqp::{AmqpVhost, CuttableProxy, RabbitNode, amqp_socket_addr, amqp_url};
pub use keys::{KeyPrefix, remove_keys, unique_prefix};
pub use sentinel::SentinelSet;
pub use server::{RedisCluster, RedisServer};
pub use wait::{Patience, Ready, wait_until};

/// The shared test Redis: `HMDP_TEST_REDIS_URL`, default `redis://127.0.0.1:6379`.
pub fn redis_url() -> String {
    std::env::var("HMDP_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// The shared test MariaDB/MySQL server, without a database name: `HMDP_TEST_MYSQL_URL`,
/// default `mysql://root@127.0.0.1:3306`.
pub fn mysql_server_url() -> String {
    std::env::var("HMDP_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
        .trim_end_matches('/')
        .to_owned()
}

/// A connection manager to the Redis at `url`.
pub async fn connect(url: &str) -> redis::aio::ConnectionManager {
    redis::Client::open(url)
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap_or_else(|e| panic!("no Redis at {url} (set HMDP_TEST_REDIS_URL): {e}"))
}

/// A local port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .unwrap()
        .port()
}
