//! Building and running the processes: `hmdp serve` ([`Application`], `serve.rs`), `hmdp
//! worker` ([`run_worker`], `worker.rs`) and `hmdp reconcile` ([`reconcile`]).
//!
//! The processes compose parts; they do not read raw settings. `connect.rs` reaches the stores
//! (the database, and Redis, connected in exactly one place, managed or not); `components.rs`
//! builds each part of the service from its settings (the flash sale, the shop cache, the order
//! worker, the sessions); `metrics.rs` is the one place stats types are registered. What every
//! process shares besides: the open-files limit (`limits.rs`), the admin token
//! (`admin_token.rs`), the scraper's listener (`ops.rs`), the banner the log opens with
//! (`banner.rs`) and the shutdown signal.
//!
//! [`Application::build`] does all the fallible set-up and binds the listener, so tests can
//! start the real service on port 0 and read [`Application::local_addr`] before it runs.

mod admin_token;
mod banner;
mod components;
mod connect;
mod failover;
mod limits;
mod metrics;
mod ops;
mod reconcile;
mod serve;
mod worker;

use std::path::PathBuf;

#[cfg(feature = "test-util")]
pub use components::order_id_generator;
pub(crate) use connect::connect_database;
#[cfg(feature = "test-util")]
pub use limits::raise_open_files_limit;
pub(crate) use reconcile::reconcile;
pub use serve::{Application, Dependencies};
pub(crate) use worker::run_worker;
#[cfg(feature = "test-util")]
pub use worker::run_worker_with;

use crate::config::Config;

/// Completes on SIGINT (Ctrl-C) or SIGTERM. SIGTERM is caught from the call on: one that
/// arrives while the process is still starting (connecting, checking the broker) stops it
/// gracefully once started, instead of killing it.
pub(crate) fn shutdown_signal() -> impl Future<Output = ()> + Send {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    async move {
        let ctrl_c = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        #[cfg(unix)]
        let term = async move {
            match term {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => tracing::info!("SIGINT received; shutting down"),
            _ = term => tracing::info!("SIGTERM received; shutting down"),
        }
    }
}

/// Where the data directory is, for messages.
pub(crate) fn data_dir_display(config: &Config) -> PathBuf {
    std::fs::canonicalize(&config.data_dir).unwrap_or_else(|_| config.data_dir.clone())
}
