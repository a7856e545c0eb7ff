//! The queues experiment, run for real: each transport's consumer killed mid-drain; the ones
//! the course calls lossy must lose orders on every run, the Stream and RabbitMQ none, on both
//! databases. RabbitMQ runs on a vhost of the test's own.

mod support;

use hmdp_testkit::AmqpVhost;
use support::{Backend, TestLab, assert_then_close, one_at_a_time};

async fn as_taught(backend: Backend) {
    let _alone = one_at_a_time().await;
    let vhost = AmqpVhost::create().await;
    let lab = TestLab::open_with_amqp(backend, &vhost.url()).await;
    assert_then_close(lab, "queues").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_on_sqlite() {
    as_taught(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_on_mysql() {
    as_taught(Backend::MySql).await;
}
