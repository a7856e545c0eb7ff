//! The order and lock experiments, run for real: each broken version must fail and each fixed
//! one hold, on both databases where a database is involved (the lock experiments use Redis
//! only, so one run each).

mod support;

use support::{Backend, as_taught};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_per_user_on_sqlite() {
    as_taught("one-per-user", Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_per_user_on_mysql() {
    as_taught("one-per-user", Backend::MySql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_misdelete() {
    as_taught("lock-misdelete", Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_reentrancy() {
    as_taught("lock-reentrancy", Backend::Sqlite).await;
}

#[test]
fn the_service_database_sits_beside_the_labs() {
    assert_eq!(
        hmdp_lab::service_database_url("sqlite:///tmp/x/lab.db?mode=rwc").unwrap(),
        "sqlite:///tmp/x/lab-hmdp.db"
    );
    assert_eq!(
        hmdp_lab::service_database_url("mysql://root@127.0.0.1:3306/hmdp_lab").unwrap(),
        "mysql://root@127.0.0.1:3306/hmdp_lab_hmdp"
    );
    assert_eq!(
        hmdp_lab::service_database_url("mysql://root@h/lab?ssl-mode=disabled").unwrap(),
        "mysql://root@h/lab_hmdp?ssl-mode=disabled"
    );
}
