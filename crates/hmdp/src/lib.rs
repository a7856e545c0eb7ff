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
//! ## The rooms inside
//! Every other module is crate-private. Which room holds what, and which may import which, is
//! the code map of `ARCHITECTURE.md` ("The service's rooms, bottom to top"), kept in one place.

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
