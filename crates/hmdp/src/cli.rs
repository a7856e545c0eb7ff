//! The `hmdp` command line: `hmdp [--config FILE] [serve|migrate|worker|reconcile|config]`.

use std::{
    collections::HashMap,
    io::Write,
    path::{Path, PathBuf},
};

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
    /// Compare each flash sale's Redis state with the database and the order streams (after a
    /// Redis failover, say). Exits 0 when they agree (or `--repair` fixed them), 3 on drift.
    Reconcile {
        /// Repair what differs: queue again the orders only Redis holds, then reload the sale
        /// from the database and the streams.
        #[arg(long)]
        repair: bool,
        /// Only this voucher (default: every flash-sale voucher on sale).
        #[arg(long, value_name = "ID")]
        voucher: Option<crate::domain::VoucherId>,
    },
    /// Print every setting, one a line: its variable, where its value comes from (default,
    /// file or environment) and the value, secrets hidden.
    Config,
}

/// The exit code of `hmdp reconcile` when Redis disagrees and nothing was repaired.
pub const EXIT_DRIFT: i32 = 3;

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
    // Held to the end: dropping it sends the traces still buffered.
    let _traces = telemetry::init(&config, crate::domain::SPAN_TARGET);
    // `hmdp config` lists it a setting a line; the log opens with the process's banner.
    tracing::debug!(config = %config.redacted_summary(), "effective configuration");
    let result = match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => match startup::Application::build(config).await {
            Ok(app) => app.run_until_stopped().await.map(|()| 0),
            Err(e) => Err(e),
        },
        Command::Worker => startup::run_worker(config).await.map(|()| 0),
        Command::Config => Ok(print_config(cli.config.as_deref())),
        Command::Migrate => startup::connect_database(&config).await.map(|db| {
            tracing::info!(data_dir = %startup::data_dir_display(&config).display(), "migrations done");
            drop(db);
            0
        }),
        Command::Reconcile { repair, voucher } => {
            startup::reconcile(&config, voucher, repair).await.map(|checks| {
                for check in &checks {
                    println!("{check}");
                }
                let drift = checks.iter().filter(|c| c.drift()).count();
                let left = checks.iter().filter(|c| c.drift() && !c.repaired).count();
                println!(
                    "{} sales checked, {drift} with drift, {} repaired",
                    checks.len(),
                    drift - left
                );
                if left > 0 { EXIT_DRIFT } else { 0 }
            })
        }
    };
    match result {
        Ok(code) => code,
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

/// `hmdp config`: every setting on stdout, `VARIABLE  source  value`, in columns.
fn print_config(file: Option<&Path>) -> i32 {
    let env: HashMap<String, String> = std::env::vars().collect();
    match Config::listing(file, &env) {
        Ok(settings) => {
            let width = settings.iter().map(|s| s.var.len()).max().unwrap_or(0);
            let mut out = std::io::stdout().lock();
            for s in settings {
                let source = s.source.to_string();
                // A reader that went away (`hmdp config | head`) ends the listing, no panic.
                if writeln!(out, "{:<width$}  {source:<11}  {}", s.var, s.value).is_err() {
                    break;
                }
            }
            0
        }
        Err(e) => {
            eprintln!("hmdp: {e}");
            2
        }
    }
}
