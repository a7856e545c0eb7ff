//! # hmdp-lab
//!
//! The hm-dianping course teaches each technique as a row of versions, most of them wrong on
//! purpose: a sale that oversells, a lock that deletes another holder's lock, a cache that lets
//! a thousand readers rebuild the same key. This crate runs those versions for real, against
//! the same Redis and database as the service, beside hmdp's own way, and measures which of
//! them keep the chapter's invariant. The broken versions live here and never in the service;
//! the `hmdp` versions call the service's crates, never a copy of them.
//!
//! - [`experiments`]: one module per experiment, each a list of versions.
//! - [`Lab`]: what a version runs against: a Redis key prefix of its own, the lab database
//!   (the original's tables, without the unique key hmdp adds), and this binary, for versions
//!   that need a second process.
//! - [`Outcome`]: what a version measured, and whether the invariant held.
//! - [`trace`]: the events a version records as it runs, and the timeline that explains its
//!   outcome (`run --trace`).
//! - [`service_database_url`]: where the `hmdp` versions' service keeps its rows, beside the
//!   lab's database.

mod cli;
pub mod experiments;
mod glossary;
mod lab;
mod lang;
mod outcome;
mod render;
mod schema;
mod service;
mod setnx;
pub mod trace;

pub use cli::{Cli, run};
pub use experiments::{Experiment, Text, Version, find};
pub use lab::{Lab, LabOptions};
pub use lang::{COLUMNS, Lang, width as display_width};
pub use outcome::{Outcome, Report};
pub use service::database_url as service_database_url;
pub use trace::{Timeline, Trace};
