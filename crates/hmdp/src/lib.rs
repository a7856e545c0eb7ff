//! # hmdp
//!
//! The hm-dianping (黑马点评) local-life review backend, rebuilt in Rust: SMS-code login with
//! Redis sessions, a shop cache that cannot be knocked over, globally unique order ids and a
//! flash sale that never oversells. The HTTP API is the original's, so its pages run unchanged.
//!
//! ## Layout
//! - [`config`]: defaults < TOML file < `HMDP_*` environment.
//! - [`domain`]: newtypes parsed at the edge (phone, login code, session token, ids).
//! - [`storage`]: SQLite or MySQL/MariaDB behind one [`storage::Db`], with embedded migrations.
//! - [`kv`]: Redis for a single node or a cluster behind one [`kv::RedisConn`]; key names;
//!   the managed `redis-server` of the embedded defaults.
//! - [`auth`]: login codes, sessions, SMS sending.
//! - [`catalogue`]: shops and shop types behind the cache, Bloom filter and GEO index.
//! - [`order_stream`]: the contract between the flash sale and the worker: entry fields, the
//!   consumer group, pending records, the shard-count guard, stream gauges.
//! - [`seckill`]: the flash sale: one Lua script decides, a stream carries the order.
//! - [`worker`]: the consumer group that writes accepted orders into the database, or relays
//!   them to RabbitMQ and consumes its queue.
//! - [`amqp`]: the RabbitMQ topology, order message and confirmed publisher.
//! - [`social`]: notes, likes (ZSET), follows (SET) and the followers' feed (push/pull).
//! - [`activity`]: sign-in (BITMAP) and unique visitors (HyperLogLog).
//! - [`uploads`]: note photos on disk.
//! - [`metrics`]: the Prometheus registry each module registers its metrics into.
//! - [`http`]: axum routers by resource, the envelope, errors and extractors.
//! - [`secret_files`]: credentials on disk (admin token, managed Redis password), mode 600.
//! - [`startup`]: wiring it all together; [`cli`]: the `hmdp` command.
//! - `testing` (feature `test-util`): what this crate's tests and the bench share.

pub mod activity;
pub mod amqp;
pub mod auth;
pub mod catalogue;
pub mod cli;
pub mod config;
pub mod domain;
pub mod http;
pub mod kv;
pub mod metrics;
pub mod order_stream;
pub mod seckill;
pub mod secret_files;
pub mod social;
pub mod startup;
pub mod storage;
pub mod telemetry;
#[cfg(feature = "test-util")]
pub mod testing;
pub mod uploads;
pub mod worker;

pub use config::Config;
pub use startup::{Application, Dependencies};
