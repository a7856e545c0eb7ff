//! End-to-end tests: the real service on port 0, real Redis, real SQLite and MariaDB.
//!
//! One test binary (modules below) so the crate is linked once. Every test gets its own
//! database (a temp SQLite file or a fresh MariaDB database) and its own Redis key prefix, so
//! tests run in parallel on shared servers without seeing each other.
//!
//! Servers: Redis at `HMDP_TEST_REDIS_URL` (default `redis://127.0.0.1:6379`), MariaDB/MySQL at
//! `HMDP_TEST_MYSQL_URL` (default `mysql://root@127.0.0.1:3306`). Set `TEST_LOG=1` to see the
//! service's logs.

mod helpers;

mod abuse;
mod activity;
mod admin;
mod buckets;
mod cluster;
mod comments;
mod compat;
mod connections;
mod costly;
mod embedded;
mod failures;
mod login;
mod metrics;
mod observability;
mod openapi;
mod order_life;
mod order_pipeline;
mod pages;
mod profile;
mod rabbit_close;
mod rabbitmq;
mod replicas;
mod seckill;
mod sentinel;
mod shops;
mod sms;
mod social;
mod soldout;
mod static_files;
mod traces;
mod uploads;
mod vouchers;
