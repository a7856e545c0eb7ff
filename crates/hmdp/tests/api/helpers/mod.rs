//! Test harness for the end-to-end tests (and, through `#[path]`, the browser test): the
//! service on port 0 with an isolated database and Redis prefix, MariaDB databases and dumps,
//! and the flash-sale steps several modules share. What other crates' tests need as well
//! (server URLs, private `redis-server`s, key clean-up) comes from `hmdp-testkit`.
//!
//! Everything is re-exported here, so tests name `crate::helpers::X` whatever file X is in.

mod app;
mod database;
mod images;
mod orders;
mod otlp;
mod seckill;

pub use app::{
    ADMIN_TOKEN, Backend, ChildGuard, PAY_SECRET, Resp, TestApp, assert_nothing_outside,
    client_from, raw_get, spawn_app, spawn_app_with, spawn_app_with_configured_sms,
    spawn_app_with_rabbitmq, spawn_with_config, test_config, wait_until_up,
};
pub use database::{DatabaseUser, ReadOnlyServer, SchemaDump, TestDatabase, mysql_via_proxy};
pub use hmdp_testkit::{
    CuttableProxy, Patience, RedisCluster, RedisServer, SentinelSet, free_port, redis_url,
    remove_keys, unique_prefix, wait_until,
};
pub use images::{multipart, square_png};
pub use orders::{
    db_orders_in, db_statuses, notice, open_payment, order_status, order_view, post_notice,
    signature, signed_notice, wait_for_status,
};
pub use otlp::{Receiver, TracedServe};
pub use seckill::{
    SalePath, WorkerProcess, assert_same_orders, code_of, create_sale, db_buyers, db_count,
    db_order_ids, db_stock, drain, grab_raw, kill_a_worker_process_mid_drain, locks_of, login_many,
    lose_voucher, order_id_of, prior_order_of, reconcile_one, redis_stock, spawn_on_path,
    wait_for_orders, worker_for,
};

/// Generates one `#[tokio::test]` per back end for each `async fn name(backend: Backend)`.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::helpers::Backend::Sqlite).await
                }
            )*
        }
        mod mysql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::helpers::Backend::MySql).await
                }
            )*
        }
    };
}
