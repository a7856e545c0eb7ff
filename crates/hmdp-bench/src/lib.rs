//! # hmdp-bench
//!
//! Benchmarks that print numbers, each next to a raw baseline measured in the same run:
//!
//! - `shop`: cached `GET /shop/{id}` (with and without the L1) against raw unpipelined Redis
//!   `GET`s; a penetration flood of unknown ids with and without the Bloom filter, counting the
//!   database queries it causes.
//!
//! By default a scenario starts the service in-process on embedded defaults (a SQLite file in a
//! temporary folder, the Redis at `--redis-url` under a fresh key prefix), so one command
//! measures everything; `--url` targets a running server instead (database counts are then
//! not available). Load comes from `--connections` keep-alive HTTP/1.1 connections, each
//! sending its next request when the previous answer arrived (closed loop); latencies go into an
//! HDR histogram.

pub mod load;
pub mod report;
pub mod scenarios;
pub mod server;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// hmdp load generator and benchmarks.
#[derive(Debug, Parser)]
#[command(name = "hmdp-bench", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub scenario: Scenario,
    /// Concurrent connections (closed loop).
    #[arg(long, short = 'c', default_value_t = 64, global = true)]
    pub connections: usize,
    /// Seconds each measured phase runs.
    #[arg(long, short = 'd', default_value_t = 10, global = true)]
    pub seconds: u64,
    /// Redis for the in-process server and the raw baselines.
    #[arg(long, default_value = "redis://127.0.0.1:6379", global = true)]
    pub redis_url: String,
    /// Target a running server (e.g. http://127.0.0.1:8081) instead of starting one in-process.
    #[arg(long, global = true)]
    pub url: Option<String>,
    /// Write the results as JSON to this file.
    #[arg(long, global = true)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Scenario {
    /// Cached shop reads vs raw Redis GET; penetration flood with and without the Bloom filter.
    Shop {
        /// Requests in each penetration flood.
        #[arg(long, default_value_t = 20_000)]
        flood: u64,
    },
}

/// Runs the chosen scenario and prints its report.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let report = match &cli.scenario {
        Scenario::Shop { flood } => scenarios::shop::run(&cli, *flood).await?,
    };
    report.print();
    if let Some(path) = &cli.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
        eprintln!("results written to {}", path.display());
    }
    Ok(())
}
