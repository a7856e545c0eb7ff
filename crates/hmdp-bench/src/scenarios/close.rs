//! `close`: how fast the service closes unpaid orders whose pay deadlines fall due together.
//!
//! N users log in and grab a sale of N through the API (each once), on a server whose pay
//! timeout is short; the order worker writes the N orders, unpaid. Their deadlines (the id's
//! second + the timeout) are whatever seconds the grabs fell in, so the bench moves every member
//! of the deadline sets to the latest of them (never earlier than an order's own deadline): all
//! N fall due at one instant. From there the service's own closer does the work while the bench
//! counts the closed orders (status 4) in the database every `--sample-ms`; the k-th order's
//! close is the first sample that saw k, so its lag is that sample's time minus the due time.
//! Afterwards: every order closed, the database's and Redis's stock back to N, the deadline
//! sets empty, nothing closed before it was due.

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use hmdp::{
    config::{OrderTransport, SeckillMode},
    testing::{kv::Keys, seckill::voucher_hash::VoucherHash, storage::Db},
};

use super::setup::{Target, User, create_users, create_voucher, db_stock};
use crate::{
    Cli,
    check::Check,
    load::{Req, Stop, request_phase},
    report::{Report, Row},
    server::Database,
};

/// The scenario's knobs.
#[derive(Debug, Clone, clap::Args)]
pub struct CloseArgs {
    /// Orders to close (users = stock = orders).
    #[arg(long, default_value_t = 10_000)]
    pub orders: usize,
    /// HMDP_ORDER_PAY_TIMEOUT_SECS: long enough to grab and write every order before the first
    /// deadline (the users log in before the sale, outside it).
    #[arg(long, default_value_t = 30)]
    pub pay_timeout: u64,
    /// How often the closed orders are counted while closing (ms).
    #[arg(long, default_value_t = 20)]
    pub sample_ms: u64,
    /// Seconds to wait for the worker to write, and then for the closer to close, every order.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
}

/// Wall-clock milliseconds since the epoch (the deadlines' clock), with sub-ms precision.
fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

async fn count_status(db: &Db, voucher: i64, status: Option<i64>) -> anyhow::Result<i64> {
    Ok(hmdp::on_pool!(db, pool => {
        match status {
            Some(s) => sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ? AND status = ?",
            )
            .bind(voucher)
            .bind(s)
            .fetch_one(pool)
            .await?,
            None => sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ?",
            )
            .bind(voucher)
            .fetch_one(pool)
            .await?,
        }
    }))
}

/// CPU time (ns) of every live thread of process `pid`, from `/proc/<pid>/task/*/schedstat`
/// (nanosecond precision, where `stat`'s ticks are 10 ms).
pub(crate) fn cpu_ns(pid: u32) -> Option<u64> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let path = task.ok()?.path().join("schedstat");
        // A thread that ended between the listing and the read counts nothing.
        if let Ok(s) = std::fs::read_to_string(path) {
            total += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Some(total)
}

/// The processes whose CPU time the report shows: this one (the service, in-process, and the
/// bench's sampler), Redis, and MariaDB when the run is on it.
async fn processes(
    redis: &mut redis::aio::MultiplexedConnection,
    db: &Db,
) -> Vec<(&'static str, u32)> {
    let mut out = vec![(
        "hmdp (in-process, with the bench's sampler)",
        std::process::id(),
    )];
    if let Ok(info) = redis::cmd("INFO")
        .arg("server")
        .query_async::<String>(redis)
        .await
        && let Some(pid) = info
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse().ok())
    {
        out.push(("redis-server", pid));
    }
    if let Db::MySql(pool) = db
        && let Ok(file) = sqlx::query_scalar::<_, String>("SELECT @@pid_file")
            .fetch_one(pool)
            .await
        && let Ok(pid) = std::fs::read_to_string(&file)
        && let Ok(pid) = pid.trim().parse()
    {
        out.push(("mariadbd", pid));
    }
    out
}

/// `(closed so far, wall ms when seen)`, one entry per sample whose count grew.
type Samples = Vec<(u64, f64)>;

/// When the count first reached `k`, from samples in time order.
fn reached(samples: &[(u64, f64)], k: u64) -> Option<f64> {
    samples.iter().find(|(n, _)| *n >= k).map(|(_, t)| *t)
}

/// The closed count at every `step` ms after `due` until the last sample: "100: 0, 200: 2000, …".
fn curve(samples: &[(u64, f64)], due: f64, step: f64) -> String {
    let Some(&(_, end)) = samples.last() else {
        return String::new();
    };
    let mut out = Vec::new();
    let mut at = step;
    loop {
        let n = samples
            .iter()
            .take_while(|(_, t)| *t <= due + at)
            .last()
            .map_or(0, |(n, _)| *n);
        out.push(format!("{at:.0}: {n}"));
        if due + at >= end {
            break;
        }
        at += step;
    }
    out.join(", ")
}

/// The lag of the order at quantile `q` (the ⌈q·n⌉-th to close) from `due`, in ms.
fn lag_at(samples: &[(u64, f64)], n: u64, q: f64, due: f64) -> Option<f64> {
    let k = ((q * n as f64).ceil() as u64).clamp(1, n);
    reached(samples, k).map(|t| t - due)
}

pub async fn run(cli: &Cli, args: &CloseArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(
        cli.url.is_none(),
        "close runs its own server (its pay timeout and deadline sets are set up here)"
    );
    let n = args.orders;
    let backend = match Database::from_flag(cli.database_url.as_deref()) {
        Database::MySql(_) => "MariaDB",
        Database::Sqlite => "SQLite",
    };
    let mut report = Report::new("close", cli.connections);
    let t = Target::connect(cli, |c| {
        c.seckill.mode = SeckillMode::Async;
        c.seckill.transport = OrderTransport::Stream;
        c.seckill.pay_timeout = Duration::from_secs(args.pay_timeout);
        c.db_max_connections = c.db_max_connections.max(16);
    })
    .await?;
    let mut redis = redis::Client::open(cli.redis_url.as_str())?
        .get_multiplexed_async_connection()
        .await?;

    eprintln!("close/{backend}: logging in {n} users through the API…");
    let started = Instant::now();
    let users: Arc<Vec<User>> = Arc::new(create_users(t.addr, &t.codes, n, 32).await?);
    eprintln!(
        "close/{backend}: {} users in {:.1}s; creating the sale of {n} and grabbing it",
        users.len(),
        started.elapsed().as_secs_f64()
    );
    let voucher = create_voucher(t.addr, &t.admin_token, n as i64).await?;
    let u = users.clone();
    let make = Arc::new(move |i: u64| {
        Req::post(format!("/api/voucher-order/seckill/{voucher}"))
            .header("authorization", &u[i as usize].token)
    });
    let grab = request_phase(
        "grab",
        t.addr,
        cli.connections,
        Stop::Requests(n as u64),
        false,
        make,
    )
    .await?;
    let accepted = grab.ok_count();
    anyhow::ensure!(
        accepted == n as u64,
        "{accepted} of {n} grabs accepted ({:?})",
        grab.errors
    );

    // Every order written, unpaid.
    let timeout = Duration::from_secs(args.timeout);
    let waiting = Instant::now();
    loop {
        let written = count_status(&t.db, voucher, None).await?;
        if written == n as i64 {
            break;
        }
        anyhow::ensure!(
            waiting.elapsed() < timeout,
            "only {written} of {n} orders written after {}s",
            args.timeout
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let written_after = waiting.elapsed();

    // The deadlines as the grab script recorded them, then all moved to the latest.
    let mut sets: Vec<(String, Vec<(String, f64)>)> = Vec::new();
    for shard in 0..t.shards {
        let key = t.keys.seckill_deadlines(shard);
        let scored: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut redis)
            .await?;
        sets.push((key, scored));
    }
    let scores = || sets.iter().flat_map(|(_, m)| m.iter().map(|(_, s)| *s));
    let recorded = scores().count();
    anyhow::ensure!(
        recorded == n,
        "{recorded} deadlines recorded for {n} orders"
    );
    let first = scores().fold(f64::INFINITY, f64::min);
    let due = scores().fold(f64::NEG_INFINITY, f64::max);
    let seconds_spanned = ((due - first) / 1e3).round() as u64 + 1;
    anyhow::ensure!(
        now_ms() + 500.0 < first,
        "the first deadline is (nearly) due before every order was written: raise --pay-timeout"
    );
    let mut pipe = redis::pipe();
    for (key, members) in &sets {
        for chunk in members.chunks(1000) {
            let mut zadd = redis::cmd("ZADD");
            zadd.arg(key).arg("XX");
            for (m, _) in chunk {
                zadd.arg(due).arg(m);
            }
            pipe.add_command(zadd).ignore();
        }
    }
    let () = pipe.query_async(&mut redis).await?;
    eprintln!(
        "close/{backend}: {n} orders written {:.1}s after the grab; their deadlines spanned \
         {seconds_spanned} s, all moved to the latest; due in {:.1}s",
        written_after.as_secs_f64(),
        (due - now_ms()) / 1e3
    );

    // Sample the closed count from a little before the due time until all are closed.
    let lead = Duration::from_secs_f64(((due - now_ms()) / 1e3 - 0.3).max(0.0));
    tokio::time::sleep(lead).await;
    let procs = processes(&mut redis, &t.db).await;
    let cpu_before: Vec<Option<u64>> = procs.iter().map(|(_, pid)| cpu_ns(*pid)).collect();
    let mut samples: Samples = Vec::new();
    let mut polls = 0u64;
    let every = Duration::from_millis(args.sample_ms.max(1));
    let deadline = Instant::now() + timeout;
    let mut last = 0u64;
    let mut closed_before_due = 0u64;
    loop {
        let tick = Instant::now();
        let closed = count_status(&t.db, voucher, Some(4)).await? as u64;
        let seen = now_ms();
        polls += 1;
        if closed != last {
            if seen < due {
                closed_before_due = closed;
            }
            samples.push((closed, seen));
            last = closed;
        }
        if closed >= n as u64 || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep_until((tick + every).into()).await;
    }
    let cpu_after: Vec<Option<u64>> = procs.iter().map(|(_, pid)| cpu_ns(*pid)).collect();
    let all_closed = last == n as u64;

    // The deadline sets empty: the closer removes a deadline after the unit is back in Redis,
    // a moment after the commit the sampler saw.
    let empty_by = Instant::now() + Duration::from_secs(10);
    let left = loop {
        let mut left = 0i64;
        for shard in 0..t.shards {
            let c: i64 = redis::cmd("ZCARD")
                .arg(t.keys.seckill_deadlines(shard))
                .query_async(&mut redis)
                .await?;
            left += c;
        }
        if left == 0 || Instant::now() >= empty_by {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stock_db = db_stock(&t.db, voucher).await?;
    let shard = Keys::seckill_shard(voucher, t.shards);
    let hash = VoucherHash::read(&t.keys.seckill_voucher(shard, voucher), &mut redis).await?;
    let stock_redis = hash.stock.unwrap_or(i64::MIN);
    let closed_final = count_status(&t.db, voucher, Some(4)).await?;
    if let Some(s) = t.server {
        s.stop().await;
    }

    let name = |s: &str| format!("{backend}: {s}");
    report.rows.push(
        Row::from_outcome(&name("grab, each user once"), &grab)
            .note(format!("{accepted} accepted, sale of {n}")),
    );
    let first_close = samples.first().map(|s| s.1 - due);
    let last_close = samples.last().map(|s| s.1);
    if let (true, Some(last_close)) = (all_closed, last_close) {
        let secs = ((last_close - due) / 1e3).max(1e-9);
        let mut row = Row::figure(
            &name(&format!("close {n} due at once (due → last closed)")),
            n as u64,
            secs,
        )
        .note(format!(
            "latency columns: deadline → close per order (p50, p90, p99, max), sampled every \
             {} ms ({polls} samples)",
            args.sample_ms
        ));
        let nn = n as u64;
        row.p50_ms = lag_at(&samples, nn, 0.5, due).unwrap_or(f64::NAN);
        row.p90_ms = lag_at(&samples, nn, 0.9, due).unwrap_or(f64::NAN);
        row.p99_ms = lag_at(&samples, nn, 0.99, due).unwrap_or(f64::NAN);
        row.max_ms = lag_at(&samples, nn, 1.0, due).unwrap_or(f64::NAN);
        if let Some(f) = first_close {
            row = row.note(format!(
                "first close seen {f:.0} ms after the due time (the idle closer looks every \
                 200 ms); first → last close seen: {:.0} orders/s",
                n as f64 / ((last_close - due - f) / 1e3).max(1e-3)
            ));
        }
        row = row.note(format!(
            "closed by due + ms: {}",
            curve(&samples, due, 100.0)
        ));
        let window = (last_close - due) / 1e3;
        let cpu: Vec<String> = procs
            .iter()
            .zip(cpu_before.iter().zip(&cpu_after))
            .filter_map(|((what, _), (b, a))| {
                let s = (a.as_ref()? - b.as_ref()?) as f64 / 1e9;
                Some(format!("{what} {s:.2} s"))
            })
            .collect();
        if !cpu.is_empty() {
            row = row.note(format!(
                "CPU from 0.3 s before the due time to the last close ({:.2} s wall): {}",
                window + 0.3,
                cpu.join(", ")
            ));
        }
        report.summary.push(format!(
            "{backend}: {n} unpaid orders closed in {window:.3} s from their common deadline = \
             {:.0} orders/s; lag p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            n as f64 / window.max(1e-9),
            row.p50_ms,
            row.p99_ms,
            row.max_ms
        ));
        report.rows.push(row);
    }
    report.summary.push(format!(
        "{backend}: the grabs' deadlines spanned {seconds_spanned} s (second-precision ids); \
         the bench moved them all to the latest ({}), so none closes before its own deadline",
        chrono::DateTime::from_timestamp_millis(due as i64)
            .map(|d| d.format("%H:%M:%S%.3f UTC").to_string())
            .unwrap_or_default()
    ));

    let check = |name: &str, ok: bool, detail: String| Check {
        name: format!("{backend}: {name}"),
        ok,
        detail,
    };
    report.checks.extend([
        check(
            "every order closed (status 4)",
            closed_final == n as i64,
            format!(
                "{closed_final} of {n} closed (timeout {}s after the due time)",
                args.timeout
            ),
        ),
        check(
            "nothing closed before it was due",
            closed_before_due == 0,
            format!("{closed_before_due} seen closed before the due time"),
        ),
        check(
            "database stock back to the sale's",
            stock_db == n as i64,
            format!("tb_seckill_voucher.stock = {stock_db}, sale of {n}"),
        ),
        check(
            "Redis stock back to the sale's",
            stock_redis == n as i64,
            format!("the voucher hash's stock = {stock_redis}, sale of {n}"),
        ),
        check(
            "deadline sets empty",
            left == 0,
            format!("{left} deadlines left 10 s after the last close"),
        ),
    ]);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kth_close_is_the_first_sample_that_saw_k() {
        let samples = [
            (0, 0.0),
            (500, 100.0),
            (1000, 150.0),
            (9990, 900.0),
            (10_000, 1000.0),
        ];
        assert_eq!(reached(&samples, 1), Some(100.0));
        assert_eq!(reached(&samples, 501), Some(150.0));
        assert_eq!(reached(&samples, 10_001), None);
        // Due at 50 ms: the median order (5,000th) was first seen at 900 ms.
        assert_eq!(lag_at(&samples, 10_000, 0.5, 50.0), Some(850.0));
        assert_eq!(lag_at(&samples, 10_000, 0.999, 50.0), Some(850.0));
        assert_eq!(lag_at(&samples, 10_000, 1.0, 50.0), Some(950.0));
        assert_eq!(lag_at(&samples, 10_000, 0.0, 50.0), Some(50.0));
        assert_eq!(
            curve(&samples, 50.0, 400.0),
            "400: 1000, 800: 1000, 1200: 10000"
        );
    }
}
