//! The `hmdp-lab` command: `list` the experiments, `run` some of them.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::{
    Lab, LabOptions, Lang, Outcome, Report,
    experiments::{self, ALL, one_per_user, queues},
    render, trace,
};

/// Runs the versions the hm-dianping course teaches, the broken ones beside the fix, against
/// real Redis and a real database, and shows which keep the chapter's invariant.
#[derive(Debug, Parser)]
#[command(name = "hmdp-lab", version, verbatim_doc_comment)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// The language of the output: zh (中文) or en. Names and JSON keys stay as they are.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = Lang::Zh,
        env = "HMDP_LAB_LANG"
    )]
    pub lang: Lang,
}

/// What the experiments need running, shown under `run --help`.
const SERVICES: &str = "\
What each experiment needs / 各实验需要的服务:
  every experiment: Redis (--redis-url; `apt-get install redis-server`,
    then `redis-server --daemonize yes`)
  queues / rabbitmq: RabbitMQ (--amqp-url; `apt-get install rabbitmq-server`,
    then `rabbitmq-server -detached`); the other versions of queues need Redis only
  hot-voucher: redis-server and redis-cli on PATH (it starts a private three-master cluster)
  the database: a temporary SQLite file unless --database-url names one; for MariaDB or MySQL
    (`apt-get install mariadb-server`, then `service mariadb start`):
    --database-url mysql://root@127.0.0.1:3306/hmdp_lab";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Lists the experiments: name, chapter, versions.
    List {
        /// One JSON object per experiment per line: name, chapter, versions.
        #[arg(long)]
        json: bool,
    },
    /// Runs experiments by name (`all` for every one).
    #[command(after_help = SERVICES)]
    Run {
        #[arg(required = true)]
        names: Vec<String>,
        /// One JSON object per version per line instead of tables.
        #[arg(long)]
        json: bool,
        /// Under each table, what broke each broken version, as recorded while it ran
        /// (with --json: a "trace" array)
        #[arg(long, verbatim_doc_comment)]
        trace: bool,
        #[arg(
            long,
            env = "HMDP_LAB_REDIS_URL",
            default_value = "redis://127.0.0.1:6379"
        )]
        redis_url: String,
        /// RabbitMQ, for the versions that use it.
        #[arg(
            long,
            env = "HMDP_LAB_AMQP_URL",
            default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
        )]
        amqp_url: String,
        /// `mysql://root@127.0.0.1:3306/hmdp_lab` (the database is created when missing)
        /// or `sqlite://FILE`; default: a SQLite file in a new temporary folder, which is kept.
        #[arg(long, env = "HMDP_LAB_DATABASE_URL", verbatim_doc_comment)]
        database_url: Option<String>,
        /// No progress lines on stderr.
        #[arg(long, short)]
        quiet: bool,
    },
    /// One process of a version that runs as several; the lab starts these itself.
    #[command(hide = true)]
    Instance {
        #[command(subcommand)]
        of: Instance,
    },
    /// The consumer process of the `queues` experiment, which kills it (`kill -9`).
    #[command(hide = true)]
    QueuesConsumer(queues::QueuesConsumerArgs),
}

/// The versions that run as several processes, by experiment.
#[derive(Debug, Subcommand)]
pub enum Instance {
    /// `v4-local-lock-2-instances` and `v5-redis-lock`: half of each user's requests.
    OnePerUser(one_per_user::InstanceArgs),
}

/// Runs the command; the process's exit code: 0 when every version behaved as the course
/// teaches (the broken ones failed, the others held), 1 when one did not, 2 on an error.
pub async fn run(cli: Cli) -> i32 {
    match cli.command {
        Command::List { json } => {
            if json {
                for e in ALL {
                    println!("{}", render::list_json(e, cli.lang));
                }
            } else {
                print!("{}", render::list(ALL, cli.lang));
            }
            0
        }
        Command::Run {
            names,
            json,
            trace,
            redis_url,
            amqp_url,
            database_url,
            quiet,
        } => {
            let options = LabOptions {
                redis_url,
                amqp_url,
                database_url,
                exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("hmdp-lab")),
                progress: !quiet,
            };
            let print = Print {
                json,
                trace,
                lang: cli.lang,
            };
            match run_named(&names, options, print).await {
                Ok(true) => 0,
                Ok(false) => 1,
                Err(e) => {
                    eprintln!("hmdp-lab: {e:#}");
                    2
                }
            }
        }
        Command::Instance {
            of: Instance::OnePerUser(args),
        } => one_per_user::instance(args).await,
        Command::QueuesConsumer(args) => queues::consumer(args).await,
    }
}

/// How `run` prints.
#[derive(Debug, Clone, Copy)]
struct Print {
    json: bool,
    /// The broken versions' timelines.
    trace: bool,
    lang: Lang,
}

/// Runs the named experiments; whether every version behaved as taught.
async fn run_named(names: &[String], options: LabOptions, print: Print) -> anyhow::Result<bool> {
    let chosen: Vec<&experiments::Experiment> = if names.iter().any(|n| n == "all") {
        ALL.to_vec()
    } else {
        names
            .iter()
            .map(|n| {
                experiments::find(n).ok_or_else(|| {
                    anyhow::anyhow!("no experiment {n:?}; `hmdp-lab list` shows them")
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let lab = Lab::open(options).await?;
    let result = run_on(&lab, &chosen, print).await;
    // Clean up on every path: an error in one version still removes the run's keys.
    let cleaned = lab.clean_up().await;
    let as_taught = result?;
    cleaned?;
    Ok(as_taught)
}

/// Runs `chosen` on `lab`, printing as asked; whether every version behaved as taught.
async fn run_on(
    lab: &Lab,
    chosen: &[&experiments::Experiment],
    print: Print,
) -> anyhow::Result<bool> {
    let (json, lang) = (print.json, print.lang);
    lab.progress(format_args!("database: {}", lab.database_url));
    let mut as_taught = true;
    for e in chosen.iter().copied() {
        let mut rows: Vec<(&experiments::Version, Outcome)> = Vec::new();
        for v in e.versions {
            lab.progress(format_args!("{} / {} …", e.name, v.name));
            let outcome = (v.run)(lab)
                .await
                .map_err(|err| err.context(format!("experiment {} version {}", e.name, v.name)))?;
            as_taught &= outcome.held == v.holds;
            if json {
                let report = Report {
                    experiment: e.name,
                    version: v.name,
                    chapter: e.chapter,
                    invariant: e.invariant(lang),
                    held: outcome.held,
                    expected_to_hold: v.holds,
                    metrics: &outcome.metrics,
                    voucher_id: outcome.voucher_id,
                    trace: outcome
                        .trace
                        .as_ref()
                        .filter(|_| print.trace)
                        .map(|t| t.json()),
                    trace_left_out: outcome
                        .trace
                        .as_ref()
                        .filter(|_| print.trace)
                        .map(|t| t.left_out),
                };
                println!("{}", serde_json::to_string(&report)?);
            }
            rows.push((v, outcome));
        }
        if !json {
            let view: Vec<(&experiments::Version, &Outcome)> =
                rows.iter().map(|(v, o)| (*v, o)).collect();
            print!("{}", render::experiment(e, &view, lang));
            if print.trace {
                print!("{}", trace::timelines(&view, lang));
            }
        }
    }
    if !json {
        println!(
            "\n{}{}",
            lang.pick("实验数据库：", "the lab's database: "),
            lab.database_url
        );
    }
    Ok(as_taught)
}
