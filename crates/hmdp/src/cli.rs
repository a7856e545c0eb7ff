//! The `hmdp` command line: `hmdp [--config FILE] [serve|migrate]`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::{config::Config, startup, telemetry};

/// hmdp: the hm-dianping (黑马点评) backend in Rust.
#[derive(Debug, Parser)]
#[command(name = "hmdp", version, about)]
pub struct Cli {
    /// A TOML configuration file (environment variables override it).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP service (the default).
    Serve,
    /// Create or update the database schema, then exit.
    Migrate,
    /// Run only the order worker: drain accepted flash-sale orders into the database.
    Worker,
}

/// Runs the command line; returns the process exit code.
pub async fn run(cli: Cli) -> i32 {
    crate::secret_files::private_umask();
    let config = match Config::load(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hmdp: {e}");
            return 2;
        }
    };
    telemetry::init(&config);
    tracing::info!(config = %config.redacted_summary(), "effective configuration");
    let result = match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => match startup::Application::build(config).await {
            Ok(app) => app.run_until_stopped().await,
            Err(e) => Err(e),
        },
        Command::Worker => startup::run_worker(config).await,
        Command::Migrate => startup::connect_database(&config).await.map(|db| {
            tracing::info!(data_dir = %startup::data_dir_display(&config).display(), "migrations done");
            drop(db);
        }),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            // Exactly one line: through the log when it shows errors (so a JSON log stays all
            // JSON), else straight to stderr (e.g. `HMDP_LOG=off`) so it is never silent.
            if tracing::enabled!(tracing::Level::ERROR) {
                tracing::error!("{e:#}");
            } else {
                eprintln!("hmdp: {e:#}");
            }
            1
        }
    }
}
