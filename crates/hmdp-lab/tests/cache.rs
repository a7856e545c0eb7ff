//! The cache and login experiments, run for real: each broken version must fail and each fixed
//! one hold, on both databases where the database is what the cache stands in front of.

mod support;

use support::{Backend, as_taught};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_penetration_on_sqlite() {
    as_taught("cache-penetration", Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_penetration_on_mysql() {
    as_taught("cache-penetration", Backend::MySql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_breakdown_on_sqlite() {
    as_taught("cache-breakdown", Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_breakdown_on_mysql() {
    as_taught("cache-breakdown", Backend::MySql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_avalanche_on_sqlite() {
    as_taught("cache-avalanche", Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_avalanche_on_mysql() {
    as_taught("cache-avalanche", Backend::MySql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_consistency_on_sqlite() {
    as_taught("cache-consistency", Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_consistency_on_mysql() {
    as_taught("cache-consistency", Backend::MySql).await;
}

/// Sessions touch no database: one backend is enough.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session() {
    as_taught("session", Backend::Sqlite).await;
}
