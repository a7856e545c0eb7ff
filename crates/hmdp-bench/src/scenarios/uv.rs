//! `uv`: why unique visitors are counted in a HyperLogLog, and why shop reads buffer them.
//!
//! 1. `--visitors` (default 1,000,000) distinct visitors go into one HyperLogLog (`PFADD`) and
//!    into one SET (`SADD`), 1,000 members per command, 10 commands per pipeline: the time of
//!    each, their `MEMORY USAGE`, and the HyperLogLog's relative error (`PFCOUNT` against the
//!    true count).
//! 2. In-process only: the cached `GET /api/shop/1` with visits buffered in memory (what the
//!    service does), with a `PFADD` to the shop's and the site's day before each answer, and
//!    with no recording at all, on one server (`Activity::set_visit_mode`, feature
//!    `test-util`), in interleaved rounds. Readers are anonymous, so every request is a visit
//!    (the same one: the buffer keeps it once per flush).
//! 3. In-process only: a flood of 90-day site counts over 90 busy days (5,000 visitors a day,
//!    dense HyperLogLogs), with each count computed in Redis for its caller (the service before
//!    counts were shared, `Activity::set_count_sharing(false)`) and shared (the service), then
//!    every span of the site and two shops in turn (nothing to share: the budget holds it). The
//!    days are written straight into their day keys, so the shared phases' first counts merge
//!    the weeks that are over (`PFMERGE`, once). Each phase's Redis cost is Redis's own
//!    `INFO commandstats` time for `PFCOUNT` and `PFMERGE`, as a share of one core over the
//!    phase (the shared Redis: run it on a quiet one).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use hmdp::testing::activity::VisitMode;
use redis::aio::MultiplexedConnection;

use crate::{
    Cli,
    load::{Stop, http_phase},
    report::{Report, Row},
    server,
};

/// Members per command and commands per pipeline while filling.
const MEMBERS_PER_COMMAND: u64 = 1_000;
const COMMANDS_PER_PIPELINE: u64 = 10;

/// Rounds of the shop-read comparison.
const ROUNDS: usize = 3;

/// Adds `u:0` … `u:{n-1}` to `key` with `command` (`PFADD` or `SADD`); the time it took.
async fn fill(
    conn: &mut MultiplexedConnection,
    command: &str,
    key: &str,
    n: u64,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut next = 0;
    while next < n {
        let mut pipe = redis::pipe();
        for _ in 0..COMMANDS_PER_PIPELINE {
            if next >= n {
                break;
            }
            let end = (next + MEMBERS_PER_COMMAND).min(n);
            let members: Vec<String> = (next..end).map(|i| format!("u:{i}")).collect();
            pipe.cmd(command).arg(key).arg(members).ignore();
            next = end;
        }
        pipe.exec_async(conn).await?;
    }
    Ok(started.elapsed())
}

async fn memory_usage(conn: &mut MultiplexedConnection, key: &str) -> anyhow::Result<u64> {
    // SAMPLES 0: measure every element of the SET instead of estimating from 5.
    Ok(redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(conn)
        .await?)
}

fn mib(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

/// Busy days filled for the count flood, and visitors per day.
const BUSY_DAYS: u64 = 90;
const VISITORS_PER_DAY: u64 = 5_000;

/// `PFCOUNT` + `PFMERGE` calls and µs since the last `CONFIG RESETSTAT` (`INFO commandstats`;
/// a command a script runs is counted under its own name).
async fn hll_cost(conn: &mut MultiplexedConnection) -> anyhow::Result<(u64, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let (mut calls, mut usec) = (0, 0);
    for fields in info.lines().filter_map(|l| {
        l.strip_prefix("cmdstat_pfcount:")
            .or_else(|| l.strip_prefix("cmdstat_pfmerge:"))
    }) {
        let field = |name: &str| {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        };
        calls += field("calls");
        usec += field("usec");
    }
    Ok((calls, usec))
}

/// Which path the i-th request of a phase asks for.
type Paths = Arc<dyn Fn(u64) -> String + Send + Sync>;

/// Part 3: the Redis cost of a flood of long visitor counts, unshared and shared.
async fn count_flood(
    report: &mut Report,
    s: &server::BenchServer,
    conn: &mut MultiplexedConnection,
    c: usize,
    duration: Duration,
) -> anyhow::Result<()> {
    let keys = hmdp::testing::kv::Keys::new(s.prefix.clone());
    let today = s.state.activity.today();
    for back in 0..BUSY_DAYS {
        let day = (today - chrono::Days::new(back))
            .format("%Y%m%d")
            .to_string();
        let members: Vec<String> = (0..VISITORS_PER_DAY)
            .map(|i| format!("u:{}", back * VISITORS_PER_DAY + i))
            .collect();
        for shop in [1, 2] {
            let _: () = redis::cmd("PFADD")
                .arg(keys.uv_shop(shop, &day))
                .arg(&members)
                .query_async(conn)
                .await?;
        }
        let _: () = redis::cmd("PFADD")
            .arg(keys.uv_site(&day))
            .arg(&members)
            .query_async(conn)
            .await?;
    }
    let same = Arc::new(|_| "/api/shop/uv/site?days=90".to_owned());
    let varied = Arc::new(|i: u64| {
        let days = i % 90 + 1;
        match i % 3 {
            0 => format!("/api/shop/uv/site?days={days}"),
            n => format!("/api/shop/{n}/uv?days={days}"),
        }
    });
    let phases: [(&str, bool, Paths); 3] = [
        (
            "90-day site counts, each computed (before)",
            false,
            same.clone(),
        ),
        ("90-day site counts, shared (service)", true, same),
        ("every span of 3 scopes, shared + budget", true, varied),
    ];
    let mut shares = Vec::new();
    for (name, shared, path) in phases {
        s.state.activity.set_count_sharing(shared);
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(conn)
            .await?;
        let o = http_phase(name, s.addr, c, Stop::After(duration), path).await?;
        let (calls, usec) = hll_cost(conn).await?;
        let share = usec as f64 / o.elapsed.as_micros() as f64 * 100.0;
        shares.push((share, o.rate(), calls));
        report.rows.push(Row::from_outcome(name, &o).note(format!(
            "{} answered; Redis: {calls} PFCOUNT/PFMERGE, {usec} µs = {share:.2} % of one core, {:.0} µs per command",
            o.ok_count(),
            usec as f64 / calls.max(1) as f64
        )));
    }
    s.state.activity.set_count_sharing(true);
    report.summary.push(format!(
        "a flood of 90-day site counts over {BUSY_DAYS} busy days: each computed {:.0} req/s costing Redis {:.1} % of a core; shared {:.0} req/s costing {:.2} % ({} PFCOUNT/PFMERGE); every span of 3 scopes: {:.2} % ({} PFCOUNT/PFMERGE, the rest answered 429)",
        shares[0].1, shares[0].0, shares[1].1, shares[1].0, shares[1].2, shares[2].0, shares[2].2
    ));
    Ok(())
}

pub async fn run(cli: &Cli, visitors: u64) -> anyhow::Result<Report> {
    let c = cli.connections;
    let mut report = Report::new("uv", c);
    let mut conn = redis::Client::open(cli.redis_url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let prefix = format!("bench:uv:{}:", uuid::Uuid::new_v4().simple());
    let (hll, set) = (format!("{prefix}hll"), format!("{prefix}set"));

    let hll_time = fill(&mut conn, "PFADD", &hll, visitors).await?;
    let set_time = fill(&mut conn, "SADD", &set, visitors).await?;
    let hll_bytes = memory_usage(&mut conn, &hll).await?;
    let set_bytes = memory_usage(&mut conn, &set).await?;
    let estimate: u64 = redis::cmd("PFCOUNT")
        .arg(&hll)
        .query_async(&mut conn)
        .await?;
    let exact: u64 = redis::cmd("SCARD").arg(&set).query_async(&mut conn).await?;
    let error = (estimate as f64 - visitors as f64) / visitors as f64 * 100.0;
    let _: () = redis::cmd("DEL")
        .arg(&hll)
        .arg(&set)
        .query_async(&mut conn)
        .await?;
    report.rows.push(
        Row::figure(
            &format!("PFADD {visitors} distinct visitors into 1 HLL"),
            visitors,
            hll_time.as_secs_f64(),
        )
        .note(format!(
            "{:.2} s; MEMORY USAGE {hll_bytes} B ({}); PFCOUNT {estimate}: relative error {error:+.3} %",
            hll_time.as_secs_f64(),
            mib(hll_bytes)
        )),
    );
    report.rows.push(
        Row::figure(
            &format!("SADD {visitors} distinct visitors into 1 SET"),
            visitors,
            set_time.as_secs_f64(),
        )
        .note(format!(
            "{:.2} s; MEMORY USAGE {set_bytes} B ({}); SCARD {exact}",
            set_time.as_secs_f64(),
            mib(set_bytes)
        )),
    );
    report.summary.push(format!(
        "{visitors} visitors: HyperLogLog {} vs SET {} ({:.0}× smaller), error {error:+.3} % (standard error 0.81 %)",
        mib(hll_bytes),
        mib(set_bytes),
        set_bytes as f64 / hll_bytes.max(1) as f64
    ));

    if cli.url.is_some() {
        report
            .summary
            .push("shop-read comparison skipped: it needs the in-process server".to_owned());
        return Ok(report);
    }
    let duration = Duration::from_secs(cli.seconds);
    let s = server::start(&cli.redis_url, |_| {}).await?;
    let hot = Arc::new(|_| "/api/shop/1".to_owned());
    let modes = [
        (
            VisitMode::Buffered,
            "GET /api/shop/1, visits buffered (service)",
        ),
        (VisitMode::WriteThrough, "GET /api/shop/1, PFADD per read"),
        (VisitMode::Off, "GET /api/shop/1, visits not recorded"),
    ];
    // Interleaved rounds, the median round of each mode reported: on a shared machine one
    // pass of each would mostly measure the neighbours.
    let mut outcomes: Vec<Vec<crate::load::Outcome>> = modes.iter().map(|_| Vec::new()).collect();
    for round in 1..=ROUNDS {
        for (i, (mode, name)) in modes.iter().enumerate() {
            s.state.activity.set_visit_mode(*mode);
            let phase = format!("{name} ({round}/{ROUNDS})");
            let o = http_phase(&phase, s.addr, c, Stop::After(duration), hot.clone()).await?;
            outcomes[i].push(o);
        }
    }
    let mut rates = Vec::new();
    for ((_, name), mut runs) in modes.iter().zip(outcomes) {
        runs.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
        let all: Vec<String> = runs.iter().map(|o| format!("{:.0}", o.rate())).collect();
        let median = &runs[runs.len() / 2];
        rates.push(median.rate());
        report
            .rows
            .push(Row::from_outcome(name, median).note(format!(
                "median of {ROUNDS} interleaved rounds: {} req/s",
                all.join(", ")
            )));
    }
    s.state.activity.set_visit_mode(VisitMode::Buffered);
    s.state.activity.flush_visits().await;
    count_flood(&mut report, &s, &mut conn, c, duration).await?;
    let stats = s.state.activity.uv_stats();
    report.summary.push(format!(
        "cached GET /shop/{{id}} over {c} connections: buffered {:.0} req/s = {:.0} % of no recording; a PFADD per read {:.0} req/s = {:.0} % (buffered is {:.2}× it); buffer: {} visits flushed, {} dropped",
        rates[0],
        rates[0] / rates[2] * 100.0,
        rates[1],
        rates[1] / rates[2] * 100.0,
        rates[0] / rates[1],
        stats.flushed.get(),
        stats.dropped.get(),
    ));
    s.stop().await;
    Ok(report)
}
