//! `hot-voucher`: one voucher's sale on a private Redis Cluster of 1, 2 and 3 masters, its
//! stock in one key and in N stock buckets.
//!
//! A voucher kept in one key lives in one hash slot, so on one master: however many masters
//! the cluster has, one sale's grabs all run on one Redis core. Stock buckets put the sale on
//! several order-stream shards, whose hash tags spread over the masters. For each cluster size
//! the bench starts a private cluster and the service in-process on it (the same
//! `HMDP_SECKILL_SHARDS` in every case, so only the buckets differ), logs users in, and for each
//! bucket count sells one voucher whose stock is the users', each user grabbing once, with the
//! order worker stopped and every buyer's session read into the service's memory just before:
//! what Redis does during the load is the grab's alone. Per master it reads the EVALSHA calls
//! and their time (`INFO commandstats`, after `CONFIG RESETSTAT`) and the process's CPU time
//! (`/proc`), each per accepted grab; the busiest master is the one that spent the most time in
//! scripts. Then the worker drains the backlog and the sale is checked.
use std::{sync::Arc, time::Duration};

use hmdp::testing::{
    FlashSale,
    kv::{Keys, key_slot},
    seckill::voucher_hash::VoucherHash,
    worker::OrderWorker,
};
use hmdp_testkit::RedisCluster;
use serde::Serialize;

use super::{
    close::cpu_ns,
    seckill::db_orders,
    setup::{CodeSource, User, create_sale, create_users, db_stock},
};
use crate::{
    Cli,
    check::{Check, SaleState, check_sale},
    load::{Outcome, Req, Stop, request_phase},
    report::{Report, Row},
    server::{self, BenchServer, Database},
    svg::{XyLine, render_xy},
};

/// The scenario's knobs.
#[derive(Debug, Clone, clap::Args)]
pub struct HotVoucherArgs {
    /// Masters of the private clusters, one cluster each.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 3])]
    pub masters: Vec<usize>,
    /// Stock buckets of the voucher, one sale each on every cluster.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 12])]
    pub buckets: Vec<u32>,
    /// `HMDP_SECKILL_SHARDS`, the same in every case (buckets reach as many masters as their
    /// shards' hash tags do, so it should be at least the largest bucket count).
    #[arg(long, default_value_t = 12)]
    pub shards: u32,
    /// Users logged in on each cluster; each sale's stock, and every user grabs once (the load
    /// stops earlier when --seconds have passed).
    #[arg(long, default_value_t = 20_000)]
    pub users: usize,
    /// Each sale's stock (default: the users, so that every grab is accepted). Below the
    /// users, the last units are borrowed across buckets and the rest of the buyers refused.
    #[arg(long)]
    pub stock: Option<i64>,
    /// Seconds to wait for the order worker to write every accepted order before failing.
    #[arg(long, default_value_t = 120)]
    pub drain_timeout: u64,
}

/// What one master did during one sale's load.
#[derive(Debug, Clone, Serialize)]
struct MasterCost {
    port: u16,
    /// The order-stream shards whose hash tags this master serves.
    shards: Vec<u32>,
    /// How many of the sale's buckets live here.
    buckets: usize,
    /// Scripts run (EVALSHA calls but those answered NOSCRIPT).
    evalsha_calls: u64,
    evalsha_noscript: u64,
    evalsha_usec: u64,
    /// CPU time of the redis-server process, if `/proc` had it.
    cpu_ns: Option<u64>,
}

/// One sale: `masters` × `buckets`.
#[derive(Debug, Clone, Serialize)]
struct Case {
    masters: usize,
    buckets: u32,
    stock: i64,
    requests: u64,
    accepted: u64,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
    per_master: Vec<MasterCost>,
}

impl Case {
    fn accepted_per_second(&self) -> f64 {
        self.accepted as f64 / self.seconds.max(1e-9)
    }

    /// `x` per accepted grab.
    fn per_grab(&self, x: f64) -> f64 {
        x / self.accepted.max(1) as f64
    }

    /// Grabs not accepted.
    fn refused(&self) -> u64 {
        self.requests.saturating_sub(self.accepted)
    }

    /// Scripts all masters ran.
    fn scripts(&self) -> u64 {
        self.per_master.iter().map(|m| m.evalsha_calls).sum()
    }

    /// The master that spent the most time in scripts.
    fn busiest(&self) -> &MasterCost {
        self.per_master
            .iter()
            .max_by_key(|m| m.evalsha_usec)
            .expect("a cluster has a master")
    }
}

/// One master's connection, its slot ranges and its process.
struct Node {
    port: u16,
    pid: Option<u32>,
    conn: redis::aio::MultiplexedConnection,
    ranges: Vec<(u16, u16)>,
}

impl Node {
    fn serves(&self, key: &str) -> bool {
        let slot = key_slot(key);
        self.ranges.iter().any(|(a, b)| (*a..=*b).contains(&slot))
    }
}

/// The cluster's masters with the slot ranges `CLUSTER SLOTS` gives each.
async fn nodes(cluster: &RedisCluster) -> anyhow::Result<Vec<Node>> {
    let mut out = Vec::new();
    for n in cluster.nodes() {
        let conn = redis::Client::open(n.url())?
            .get_multiplexed_async_connection()
            .await?;
        out.push(Node {
            port: n.port(),
            pid: n.pid(),
            conn,
            ranges: Vec::new(),
        });
    }
    let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut out[0].conn)
        .await?;
    for entry in slots {
        let redis::Value::Array(parts) = entry else {
            anyhow::bail!("CLUSTER SLOTS: an entry that is not an array");
        };
        let (first, last): (u16, u16) = (
            redis::from_redis_value_ref(&parts[0])?,
            redis::from_redis_value_ref(&parts[1])?,
        );
        let redis::Value::Array(master) = &parts[2] else {
            anyhow::bail!("CLUSTER SLOTS: a range without its master");
        };
        let port: u16 = redis::from_redis_value_ref(&master[1])?;
        let node = out
            .iter_mut()
            .find(|n| n.port == port)
            .ok_or_else(|| anyhow::anyhow!("CLUSTER SLOTS names an unknown master :{port}"))?;
        node.ranges.push((first, last));
    }
    Ok(out)
}

/// EVALSHA since the last `CONFIG RESETSTAT` (`cmdstat_evalsha` of `INFO commandstats`, whose
/// time includes the commands the scripts ran).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Evalsha {
    /// Scripts that ran.
    ran: u64,
    /// Calls answered NOSCRIPT (a node that had not loaded the script yet; the client loads it
    /// and calls again).
    noscript: u64,
    usec: u64,
}

/// [`Evalsha`] from an `INFO commandstats` text.
fn evalsha_of(info: &str) -> Evalsha {
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .map_or(Evalsha::default(), |fields| {
            let field = |name: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let failed = field("failed_calls");
            Evalsha {
                ran: field("calls").saturating_sub(failed),
                noscript: failed,
                usec: field("usec"),
            }
        })
}

async fn evalsha_stats(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<Evalsha> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(evalsha_of(&info))
}

/// The order-stream shard of each bucket of `voucher`.
fn bucket_shards(voucher: i64, buckets: u32, shards: u32) -> Vec<u32> {
    (0..buckets)
        .map(|b| Keys::seckill_bucket_shard(voucher, b, shards))
        .collect()
}

/// A hash-tagged key of order-stream shard `k`: every key of the shard hashes like it.
fn shard_tag(k: u32) -> String {
    format!("{{s{k}}}")
}

/// Runs the order worker until it wrote `orders` orders (or `timeout` passed); whether it did.
async fn drain(s: &BenchServer, target: &str, orders: u64, timeout: Duration) -> bool {
    let worker = OrderWorker::new(
        s.state.db.clone(),
        s.state.redis.clone(),
        target.to_owned(),
        s.state.keys.clone(),
        s.state.config.seckill.clone(),
        None,
    );
    let stats = worker.stats().clone();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(worker.run_until(async {
        let _ = rx.await;
    }));
    let deadline = tokio::time::Instant::now() + timeout;
    let done = loop {
        let persisted = stats.persisted.get();
        if persisted >= orders || tokio::time::Instant::now() >= deadline {
            break persisted >= orders;
        }
        eprint!("\r  waiting for the order worker: {persisted}/{orders} written   ");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprint!("\r{:80}\r", "");
    let _ = tx.send(());
    let _ = handle.await;
    done
}

/// The Redis stock left in the sale's buckets, all together (`i64::MIN` for a bucket without
/// its hash, so that the check fails).
async fn redis_stock(s: &BenchServer, voucher: i64, buckets: u32) -> anyhow::Result<i64> {
    let shards = s.state.config.seckill.shards;
    let mut total = 0i64;
    for b in 0..buckets {
        let shard = Keys::seckill_bucket_shard(voucher, b, shards);
        let key = s.state.keys.seckill_bucket(shard, voucher, b);
        let hash = VoucherHash::read(&key, &mut s.state.redis.clone()).await?;
        total = total.saturating_add(hash.stock.unwrap_or(i64::MIN));
    }
    Ok(total)
}

/// Everything one cluster size's cases share.
struct Cluster<'a> {
    server: &'a BenchServer,
    /// The service's `HMDP_REDIS_URL`.
    target: &'a str,
    nodes: &'a mut [Node],
    users: &'a Arc<Vec<User>>,
    masters: usize,
}

/// One sale on one cluster: load, per-master costs, drain, checks.
async fn run_case(
    cli: &Cli,
    args: &HotVoucherArgs,
    c: &mut Cluster<'_>,
    buckets: u32,
    report: &mut Report,
) -> anyhow::Result<Case> {
    let (addr, n) = (c.server.addr, c.users.len());
    let stock = args.stock.unwrap_or(n as i64);
    let sale = FlashSale::new(stock)
        .title(format!(
            "hmdp-bench hot voucher of {stock}, {buckets} buckets"
        ))
        .buckets(i64::from(buckets));
    let voucher = create_sale(addr, &c.server.admin_token, sale).await?;
    let sale_shards = bucket_shards(voucher, buckets, args.shards);
    let users = c.users.clone();
    let make = Arc::new(move |i: u64| {
        Req::post(format!("/api/voucher-order/seckill/{voucher}"))
            .header("authorization", &users[i as usize].token)
    });
    // The buyers are on the sale's page: each session was read just now, so the service trusts
    // it from memory during the load (HMDP_SESSION_CACHE_MS) and the masters' scripts are the
    // sale's, not the session refreshes of users who logged in a while before.
    let users = c.users.clone();
    let me = Arc::new(move |i: u64| {
        Req::get("/api/user/me").header("authorization", &users[i as usize].token)
    });
    let seen = request_phase(
        "hot-voucher: the buyers' sessions",
        addr,
        cli.connections,
        Stop::Requests(n as u64),
        false,
        me,
    )
    .await?;
    anyhow::ensure!(
        seen.errors.is_empty(),
        "reading the buyers' sessions: {:?}",
        seen.errors
    );
    let mut cpu_before = Vec::new();
    for node in c.nodes.iter_mut() {
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut node.conn)
            .await?;
        cpu_before.push(node.pid.and_then(cpu_ns));
    }
    let name = format!("{} masters, {buckets} buckets", c.masters);
    let load: Outcome = request_phase(
        &format!("hot-voucher {name}"),
        addr,
        cli.connections,
        Stop::Within(Duration::from_secs(cli.seconds), n as u64),
        true,
        make,
    )
    .await?;
    let mut per_master = Vec::new();
    for (node, before) in c.nodes.iter_mut().zip(cpu_before) {
        let cpu = match (before, node.pid.and_then(cpu_ns)) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        let e = evalsha_stats(&mut node.conn).await?;
        let shards: Vec<u32> = (0..args.shards)
            .filter(|k| node.serves(&shard_tag(*k)))
            .collect();
        per_master.push(MasterCost {
            port: node.port,
            buckets: sale_shards.iter().filter(|k| shards.contains(k)).count(),
            shards,
            evalsha_calls: e.ran,
            evalsha_noscript: e.noscript,
            evalsha_usec: e.usec,
            cpu_ns: cpu,
        });
    }
    let returned: Vec<(i64, i64)> = load
        .successes
        .iter()
        .filter_map(|(i, data)| data.as_i64().map(|id| (id, c.users[*i as usize].id)))
        .collect();
    let ms = |q: f64| load.latency.value_at_quantile(q) as f64 / 1000.0;
    let case = Case {
        masters: c.masters,
        buckets,
        stock,
        requests: load.requests,
        accepted: returned.len() as u64,
        seconds: load.elapsed.as_secs_f64(),
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        per_master,
    };

    // The backlog, then the sale's invariants; every user tried (request i is user i's only).
    let timeout = Duration::from_secs(args.drain_timeout);
    let drained = drain(c.server, c.target, case.accepted, timeout).await;
    let db = &c.server.state.db;
    let mut checks = check_sale(&SaleState {
        stock,
        users: load.requests as i64,
        db_orders: db_orders(db, voucher).await?,
        db_stock: db_stock(db, voucher).await?,
        redis_stock: Some(redis_stock(c.server, voucher, buckets).await?),
        returned,
    });
    checks.insert(
        0,
        Check {
            name: "every accepted order written".into(),
            ok: drained,
            detail: format!(
                "{} accepted, drained by the order worker after the load (timeout {}s)",
                case.accepted, args.drain_timeout
            ),
        },
    );
    for check in &mut checks {
        check.name = format!("{name}: {}", check.name);
    }
    report.checks.extend(checks);

    let mut row = Row::from_outcome(&format!("{name}: POST grab"), &load).note(format!(
        "{} accepted of {} requests, {:.0} accepted grabs/s; voucher {voucher} on shards {:?}",
        case.accepted,
        case.requests,
        case.accepted_per_second(),
        sale_shards
    ));
    for m in &case.per_master {
        row = row.note(format!(
            ":{} (shards {:?}, {} of the sale's buckets): {:.2} EVALSHA{}, {:.1} µs in scripts, {} process CPU per accepted grab",
            m.port,
            m.shards,
            m.buckets,
            case.per_grab(m.evalsha_calls as f64),
            match m.evalsha_noscript {
                0 => String::new(),
                n => format!(" (+{n} answered NOSCRIPT)"),
            },
            case.per_grab(m.evalsha_usec as f64),
            m.cpu_ns.map_or("-".to_owned(), |ns| format!(
                "{:.1} µs",
                case.per_grab(ns as f64 / 1e3)
            ))
        ));
    }
    report.rows.push(row);
    Ok(case)
}

/// The service on `cluster`, its users, and each bucket count's sale.
async fn run_cluster(
    cli: &Cli,
    args: &HotVoucherArgs,
    masters: usize,
    report: &mut Report,
) -> anyhow::Result<Vec<Case>> {
    eprintln!("hot-voucher: a Redis Cluster of {masters} masters…");
    let cluster = RedisCluster::with_masters(masters).await;
    let mut urls = cluster.urls();
    // One URL would make the service use a plain connection; the node twice keeps the
    // cluster client, so that only the masters differ between the cases.
    if urls.len() == 1 {
        urls.push(urls[0].clone());
    }
    let target = urls.join(",");
    let server = server::start_on(
        &target,
        &Database::from_flag(cli.database_url.as_deref()),
        |c| {
            c.seckill.shards = args.shards;
            c.seckill.worker = false;
            // The longest a session read is trusted: from the pass before a load to its end.
            c.session_cache = Duration::from_secs(60);
            c.db_max_connections = c.db_max_connections.max(16);
        },
    )
    .await?;
    let mut nodes = nodes(&cluster).await?;
    let started = std::time::Instant::now();
    let users = Arc::new(
        create_users(
            server.addr,
            &CodeSource::Sms(server.sms.clone()),
            args.users,
            32,
        )
        .await?,
    );
    eprintln!(
        "hot-voucher: {} users logged in in {:.1}s",
        users.len(),
        started.elapsed().as_secs_f64()
    );
    let mut c = Cluster {
        server: &server,
        target: &target,
        nodes: &mut nodes,
        users: &users,
        masters,
    };
    let mut cases = Vec::new();
    for &buckets in &args.buckets {
        cases.push(run_case(cli, args, &mut c, buckets, report).await?);
    }
    server.stop().await;
    Ok(cases)
}

pub async fn run(cli: &Cli, args: &HotVoucherArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(
        cli.url.is_none(),
        "hot-voucher starts its own clusters and server: --url does not apply"
    );
    anyhow::ensure!(
        args.masters.iter().all(|m| *m >= 1) && args.buckets.iter().all(|b| *b >= 1),
        "--masters and --buckets are counts of at least 1"
    );
    anyhow::ensure!(
        args.stock.is_none_or(|s| s >= 1),
        "--stock is a count of at least 1"
    );
    let mut report = Report::new("hot-voucher", cli.connections);
    let mut cases = Vec::new();
    for &masters in &args.masters {
        cases.extend(run_cluster(cli, args, masters, &mut report).await?);
    }

    let stock = match args.stock {
        None => format!("{} users = each sale's stock", args.users),
        Some(s) => format!("{} users, each sale's stock {s}", args.users),
    };
    report.summary.push(format!(
        "HMDP_SECKILL_SHARDS={}, {stock}, one grab each, the order worker stopped during the \
         load; per accepted grab, on the master that spent the most in scripts:",
        args.shards
    ));
    report.summary.push(String::new());
    report.summary.push(
        "| masters | buckets | accepted grabs/s | p50 ms | p99 ms | busiest master: EVALSHA | script µs | process CPU µs | all masters: EVALSHA | script µs |"
            .into(),
    );
    report
        .summary
        .push("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|".into());
    for case in &cases {
        let b = case.busiest();
        let all = |f: fn(&MasterCost) -> u64| case.per_master.iter().map(f).sum::<u64>() as f64;
        report.summary.push(format!(
            "| {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.1} | {} | {:.2} | {:.1} |",
            case.masters,
            case.buckets,
            case.accepted_per_second(),
            case.p50_ms,
            case.p99_ms,
            case.per_grab(b.evalsha_calls as f64),
            case.per_grab(b.evalsha_usec as f64),
            b.cpu_ns.map_or("-".to_owned(), |ns| format!(
                "{:.1}",
                case.per_grab(ns as f64 / 1e3)
            )),
            case.per_grab(all(|m| m.evalsha_calls)),
            case.per_grab(all(|m| m.evalsha_usec)),
        ));
    }
    report.summary.push(String::new());
    report.summary.push(
        "the whole sale's scripts, refusals included (a split sale's refusal before the sale is \
         known sold out claims, asks every other bucket and drops the claim):"
            .into(),
    );
    report.summary.push(String::new());
    report.summary.push(
        "| masters | buckets | stock | accepted | refused | EVALSHA, all masters | per request | busiest master's share |"
            .into(),
    );
    report
        .summary
        .push("|---:|---:|---:|---:|---:|---:|---:|---:|".into());
    for case in &cases {
        let scripts = case.scripts();
        report.summary.push(format!(
            "| {} | {} | {} | {} | {} | {} | {:.2} | {:.0} % |",
            case.masters,
            case.buckets,
            case.stock,
            case.accepted,
            case.refused(),
            scripts,
            scripts as f64 / case.requests.max(1) as f64,
            100.0 * case.busiest().evalsha_calls as f64 / scripts.max(1) as f64,
        ));
    }
    report.summary.push(String::new());
    let busiest_us = |case: &Case| case.per_grab(case.busiest().evalsha_usec as f64);
    let mut lines = Vec::new();
    for &buckets in &args.buckets {
        let points: Vec<(f64, f64)> = cases
            .iter()
            .filter(|c| c.buckets == buckets)
            .map(|c| (c.masters as f64, busiest_us(c)))
            .collect();
        report.summary.push(format!(
            "busiest master's script µs per accepted grab, {buckets} bucket(s), over {} masters: {}",
            args.masters
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            points
                .iter()
                .map(|(_, us)| format!("{us:.1}"))
                .collect::<Vec<_>>()
                .join(" → ")
        ));
        lines.push(XyLine {
            name: format!(
                "{buckets} stock bucket{}",
                if buckets == 1 { "" } else { "s" }
            ),
            points,
        });
    }
    let xs: Vec<f64> = args.masters.iter().map(|m| *m as f64).collect();
    report.chart_svg = Some(render_xy(
        &format!(
            "hmdp-bench hot-voucher — {} connections — {}",
            cli.connections, report.machine
        ),
        "masters in the Redis Cluster",
        "busiest master's script time (EVALSHA µs) per accepted grab",
        &xs,
        &lines,
    ));
    report.data = Some(serde_json::to_value(&cases)?);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_the_voucher_around_the_shards() {
        assert_eq!(bucket_shards(25, 1, 12), vec![1]);
        assert_eq!(bucket_shards(25, 3, 12), vec![1, 2, 3]);
        assert_eq!(bucket_shards(10, 4, 12), vec![10, 11, 0, 1]);
        assert_eq!(bucket_shards(7, 12, 12).len(), 12);
        assert_eq!(shard_tag(3), "{s3}");
    }

    #[test]
    fn noscript_answers_are_not_scripts_run() {
        let info = "# Commandstats\r\ncmdstat_evalsha_ro:calls=9,usec=9,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n\
                    cmdstat_evalsha:calls=2023,usec=92783,usec_per_call=45.86,rejected_calls=0,failed_calls=23\r\n";
        assert_eq!(
            evalsha_of(info),
            Evalsha {
                ran: 2000,
                noscript: 23,
                usec: 92783
            }
        );
        assert_eq!(evalsha_of("# Commandstats\r\n"), Evalsha::default());
    }

    #[test]
    fn the_busiest_master_spent_the_most_in_scripts() {
        let m = |port, calls, usec| MasterCost {
            port,
            shards: vec![],
            buckets: 0,
            evalsha_calls: calls,
            evalsha_noscript: 0,
            evalsha_usec: usec,
            cpu_ns: None,
        };
        let case = Case {
            masters: 2,
            buckets: 12,
            stock: 500,
            requests: 1000,
            accepted: 500,
            seconds: 0.5,
            p50_ms: 1.0,
            p99_ms: 2.0,
            per_master: vec![m(1, 900, 5000), m(2, 700, 9000)],
        };
        assert_eq!(case.busiest().port, 2);
        assert_eq!(case.per_grab(9000.0), 18.0);
        assert_eq!(case.accepted_per_second(), 1000.0);
        assert_eq!((case.refused(), case.scripts()), (500, 1600));
    }
}
