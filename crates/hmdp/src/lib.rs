//! # hmdp
//!
//! The hm-dianping (黑马点评) local-life review backend, rebuilt in Rust: SMS-code login with
//! Redis sessions, a shop cache that cannot be knocked over, globally unique order ids and a
//! flash sale that never oversells. The HTTP API is the original's, so its pages run unchanged.
//!
//! ## The public surface
//! The service is a program, not a library: what another crate may use is how to configure
//! it, build it and run it.
//! - [`Config`] and the [`config`] module: every `HMDP_*` setting (defaults < TOML file <
//!   environment) and the types of their values.
//! - [`Application`]: the service built from a configuration, bound, then run until stopped;
//!   [`Dependencies`]: what a deployment may swap out (the [`SmsSender`]).
//! - [`cli`]: the `hmdp` command (`main.rs` hands over to it).
//! - `testing` (feature `test-util` only): the one door for this crate's tests and the bench
//!   to the internals they drive directly (the database, Redis keys, the worker, ...).
//!
//! ## The rooms inside, bottom to top (all crate-private)
//! - `config`, `domain`: settings; newtypes parsed at the edge (phone, code, token, ids).
//! - `storage`: SQLite or MySQL/MariaDB behind one `Db`, with embedded migrations.
//! - `kv`: Redis (node or cluster) behind one `RedisConn`; every key name (`Keys`); the
//!   managed `redis-server` of the embedded defaults.
//! - `metrics`: the Prometheus registry; `secret_files`: credentials on disk, mode 600.
//! - `auth`: login codes, sessions, SMS sending; `catalogue`: shops behind the cache.
//! - `order_stream`: the contract between the flash sale and the worker (entry fields, group,
//!   pending records, shard-count guard). `seckill` and `worker` meet only there.
//! - `seckill`: the flash sale (one Lua script decides; `voucher_hash` is the sale's hash).
//! - `worker`, `amqp`: orders written into the database, or relayed through RabbitMQ.
//! - `social`, `activity`, `uploads`: notes, likes, follows, feed; sign-in and visitors; photos.
//! - `http`: axum routers by resource, the envelope, errors, extractors.
//! - `startup`: one file per command (`serve`, `worker`, `reconcile`), components built from
//!   their settings; `telemetry`: logs.

// Internals are `pub(crate)`: what stays `pub` is reachable from the surface above or from
// `testing`, and the lint (on in every build that has `testing`) keeps it so.
#![cfg_attr(feature = "test-util", warn(unreachable_pub))]

mod activity;
mod amqp;
mod auth;
mod catalogue;
pub mod cli;
pub mod config;
mod domain;
mod http;
mod kv;
mod metrics;
mod order_life;
mod order_stream;
mod seckill;
mod secret_files;
mod social;
mod startup;
mod storage;
mod telemetry;
#[cfg(feature = "test-util")]
pub mod testing;
mod uploads;
mod worker;

pub use auth::{SmsError, SmsSender};
pub use config::Config;
pub use startup::{Application, Dependencies};
