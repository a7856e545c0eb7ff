//! # hmdp-bench
//!
//! Benchmarks that print numbers, each next to a raw baseline measured in the same run (on a
//! shared 2-core machine only same-run ratios mean anything):
//!
//! - `seckill`: users log in through the API, an admin creates a flash-sale voucher, C
//!   connections grab it; then the order worker drains and the invariants are **verified**
//!   (the run exits non-zero if one fails). Baselines: the same Lua script on raw Redis,
//!   pipelined and not; raw batched `INSERT` rows/s; the worker's drain rate. Async and sync
//!   order paths in one run.
//! - `shop`: cached `GET /shop/{id}` (with and without the L1) against raw unpipelined Redis
//!   `GET`s; a penetration flood of unknown ids with and without the Bloom filter, counting the
//!   database queries it causes.
//! - `login`: the code + login flow (a new user each time) and `GET /user/me` (session reads).
//! - `ids`, `lock`: the `hmdp-id` and `hmdp-lock` crates against raw `INCR` and raw
//!   `SET NX` + `DEL`.
//! - `uv`: 1,000,000 visitors in a HyperLogLog against a SET (memory, error, time); cached
//!   shop reads with visits buffered against a `PFADD` per read.
//! - `conns`: the server's memory with many open connections.
//! - `social`: like toggles (one hot note and spread out, checking `tb_blog.liked` = the set's
//!   size after the burst), `/blog/hot`, feed reads, and publishing to 100,000 followers
//!   pushed vs pulled (time, Redis memory, inbox read latency), next to a raw pipelined
//!   `ZADD` fan-out.
//! - `queues`: the queues the course discusses for the asynchronous order (in-process, Redis
//!   List, Pub/Sub, Stream with a group, RabbitMQ with confirms), each with its consumer
//!   process killed (`kill -9`) mid-sale and restarted: orders accepted, written, lost, written
//!   twice, drain rate.
//! - `abuse`: cheap requests that cost a lot (sale stats, unknown voucher ids, a deep name
//!   search), each beside a grab load: what the attacker sustains, what it does to the grab.
//! - `close`: N unpaid orders whose pay deadlines fall due at once, closed by the service's
//!   closer: orders closed per second, the lag from deadline to close, stocks back (verified).
//! - `floor`, `tokens`: the bare server and the logged-in users of `scripts/wrk-floor.sh`, which
//!   measures hmdp against the floor with wrk (a C client) and a token on every request.
//! - `hot-voucher`: one voucher's sale on private Redis Clusters of 1, 2 and 3 masters, its stock
//!   in one key and in N stock buckets: per master, the script calls, script time and process
//!   CPU per accepted grab; the busiest master's should fall with the masters only with buckets.
//! - `publish-cost`: a RabbitMQ publish with a confirm inside each request (the course's
//!   design) against an `XADD` per request (hmdp's outbox) and the relay's confirmed batches.
//!
//! By default a scenario starts the service in-process on embedded defaults (a SQLite file in a
//! temporary folder — or a fresh MariaDB database with `--database-url mysql://…` — and the
//! Redis at `--redis-url` under a fresh key prefix), so one command measures everything;
//! `--url` targets a running server instead. Load comes from `--connections` keep-alive
//! HTTP/1.1 connections, each sending its next request when the previous answer arrived
//! (closed loop); latencies go into an HDR histogram and per-second buckets, which the
//! `--svg` chart draws.

pub mod check;
pub mod load;
pub mod report;
pub mod scenarios;
pub mod server;
pub mod svg;
pub mod timeline;

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
    /// In-process: `mysql://user@host:port` runs the server on a fresh MariaDB database
    /// (dropped afterwards) instead of SQLite. With --url: the running server's database
    /// (sqlite://… or mysql://…/db), read for the invariant checks.
    #[arg(long, global = true)]
    pub database_url: Option<String>,
    /// With --url: the server's HMDP_REDIS_PREFIX (login codes and flash-sale keys are read
    /// from Redis under it).
    #[arg(long, default_value = "", global = true)]
    pub redis_prefix: String,
    /// With --url: the server's admin token (default: $HMDP_ADMIN_TOKEN).
    #[arg(long, global = true)]
    pub admin_token: Option<String>,
    /// With --url: the server's HMDP_SECKILL_SHARDS.
    #[arg(long, default_value_t = 1, global = true)]
    pub seckill_shards: u32,
    /// Write the results as JSON to this file.
    #[arg(long, global = true)]
    pub json: Option<PathBuf>,
    /// Write an SVG chart of throughput and latency over time to this file.
    #[arg(long, global = true)]
    pub svg: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Scenario {
    /// Flash sale end to end with invariant checks; raw script, INSERT and drain baselines.
    Seckill(scenarios::seckill::SeckillArgs),
    /// Cached shop reads vs raw Redis GET; penetration flood with and without the Bloom filter.
    Shop {
        /// Requests in each penetration flood.
        #[arg(long, default_value_t = 20_000)]
        flood: u64,
    },
    /// Login flow (code + login, a new user each time) and session reads (GET /user/me).
    Login,
    /// hmdp-id generators (compatible, segment) vs raw INCR.
    Ids,
    /// hmdp-lock lock + unlock vs raw SET NX PX + DEL.
    Lock,
    /// Unique visitors: HyperLogLog vs SET memory and error for 1,000,000 visitors; cached
    /// shop reads with visits buffered vs a PFADD per read.
    Uv {
        /// Distinct visitors added to the HyperLogLog and the SET.
        #[arg(long, default_value_t = 1_000_000)]
        visitors: u64,
    },
    /// Like toggles, the hot list, feed reads, and a 100,000-follower fan-out: push vs hybrid.
    Social(scenarios::social::SocialArgs),
    /// Server memory with many open keep-alive connections.
    Conns {
        /// Connections to open.
        #[arg(long, default_value_t = 10_000)]
        count: usize,
        /// With --url: the server's process id, to read its RSS from /proc.
        #[arg(long)]
        server_pid: Option<u32>,
    },
    /// The course's order queues with the consumer killed (kill -9) mid-sale and restarted:
    /// accepted, written, lost, written twice, drain rate.
    Queues(scenarios::queues::QueuesArgs),
    /// Cheap requests that cost a lot (sale stats, unknown voucher ids, deep name search), each
    /// beside a grab load: what the attacker sustains and what it does to the grab.
    Abuse(scenarios::abuse::AbuseArgs),
    /// What publishing to RabbitMQ with a confirm inside each request (the course's design)
    /// costs, against an XADD per request and the relay's confirmed batches.
    PublishCost(scenarios::publish::PublishArgs),
    /// The bare server of the wrk comparison: every request answered `{"success":true}`; with
    /// `--grab-redis-url`, every POST runs hmdp's grab script once (the grab's own floor).
    Floor {
        /// Address to serve on.
        #[arg(long, default_value = "127.0.0.1:18094")]
        listen: std::net::SocketAddr,
        /// The Redis whose sale each POST grabs from, through hmdp's own connection type and
        /// script; other requests are answered 404.
        #[arg(long)]
        grab_redis_url: Option<String>,
    },
    /// Logs users in through the running hmdp of `--url`, writes their tokens one per line, and
    /// creates a flash-sale voucher (its id on stdout): the wrk comparison's set-up.
    Tokens {
        /// Users to log in.
        #[arg(long, default_value_t = 2000)]
        users: usize,
        /// The voucher's stock.
        #[arg(long, default_value_t = 1)]
        stock: i64,
        /// Where the tokens go.
        #[arg(long)]
        out: PathBuf,
    },
    /// One voucher's sale on a private Redis Cluster of 1, 2 and 3 masters, its stock in one key
    /// and in N buckets: grabs/s, latency, and per master the script calls, script time and
    /// process CPU per accepted grab.
    HotVoucher(scenarios::hot_voucher::HotVoucherArgs),
    /// Unpaid orders closed at their pay deadline: N deadlines due at once, the closing rate
    /// and the lag from deadline to close; stocks back to the sale's.
    Close(scenarios::close::CloseArgs),
    /// The consumer process of `queues` (started and killed by it).
    #[command(hide = true)]
    QueuesConsumer(scenarios::queues::ConsumerArgs),
}

/// Runs the chosen scenario, prints its report, writes the JSON and SVG files; fails when an
/// invariant check failed.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let report = match &cli.scenario {
        Scenario::Seckill(args) => scenarios::seckill::run(&cli, args).await?,
        Scenario::Shop { flood } => scenarios::shop::run(&cli, *flood).await?,
        Scenario::Login => scenarios::login::run(&cli).await?,
        Scenario::Ids => scenarios::ids::run(&cli).await?,
        Scenario::Lock => scenarios::lock::run(&cli).await?,
        Scenario::Uv { visitors } => scenarios::uv::run(&cli, *visitors).await?,
        Scenario::Social(args) => scenarios::social::run(&cli, args).await?,
        Scenario::Conns { count, server_pid } => {
            scenarios::conns::run(&cli, *count, *server_pid).await?
        }
        Scenario::Queues(args) => scenarios::queues::run(&cli, args).await?,
        Scenario::PublishCost(args) => scenarios::publish::run(&cli, args).await?,
        Scenario::Abuse(args) => scenarios::abuse::run(&cli, args).await?,
        Scenario::Close(args) => scenarios::close::run(&cli, args).await?,
        Scenario::HotVoucher(args) => scenarios::hot_voucher::run(&cli, args).await?,
        // The wrk comparison's pieces print no report (the floor runs until killed).
        Scenario::Floor {
            listen,
            grab_redis_url: None,
        } => return scenarios::floor::serve_floor(*listen).await,
        Scenario::Floor {
            listen,
            grab_redis_url: Some(url),
        } => return scenarios::floor::serve_grab_floor(*listen, url).await,
        Scenario::Tokens { users, stock, out } => {
            return scenarios::floor::tokens(&cli, *users, *stock, out).await;
        }
        // Runs until killed; prints no report.
        Scenario::QueuesConsumer(args) => {
            return scenarios::queues::consume(&cli.redis_url, args).await;
        }
    };
    report.print();
    if let Some(path) = &cli.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
        eprintln!("results written to {}", path.display());
    }
    if let Some(path) = &cli.svg {
        let chart = report.chart_svg.clone().unwrap_or_else(|| {
            let title = format!(
                "hmdp-bench {} — {} connections — {}",
                report.scenario, report.connections, report.machine
            );
            svg::render(&title, &report.chart_series())
        });
        std::fs::write(path, chart)?;
        eprintln!("chart written to {}", path.display());
    }
    anyhow::ensure!(report.passed(), "an invariant check failed (see above)");
    Ok(())
}
