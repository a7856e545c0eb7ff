//! Logging: `tracing` to stderr, human-readable or JSON (`HMDP_LOG_FORMAT`).

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::config::{Config, LogFormat};

/// Installs the global subscriber. Call once, from `main`.
pub(crate) fn init(config: &Config) {
    let filter = EnvFilter::try_new(&config.log_filter).unwrap_or_else(|e| {
        eprintln!(
            "invalid HMDP_LOG filter {:?} ({e}); using \"info\"",
            config.log_filter
        );
        EnvFilter::new("info")
    });
    let registry = tracing_subscriber::registry().with(filter);
    match config.log_format {
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_writer(std::io::stderr),
            )
            .init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .init(),
    }
}
