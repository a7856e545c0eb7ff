//! `conns`: memory with many open keep-alive connections (the goal: server RSS < 150 MB with
//! 10,000 open connections).
//!
//! Opens `count` connections, sends one `GET /health` on each (so the server has really
//! accepted and served it), keeps them all open and reads the RSS. Against `--url` with
//! `--server-pid` it reads the server's own `VmRSS`/`VmHWM`; in-process the server and the
//! 10,000 client connections share one process, so the figure is an upper bound for the server.
//! Needs a file-descriptor limit above `count` (twice in-process): `ulimit -n 65536`.

use std::time::{Duration, Instant};

use super::shop::target;
use crate::{
    Cli,
    load::{Conn, Req},
    report::{Goal, Report, Row},
    server,
};

/// `(VmRSS, VmHWM)` in MiB from a `/proc/<pid>/status` text.
pub fn parse_rss(status: &str) -> (f64, f64) {
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|kib| kib / 1024.0)
            .unwrap_or(f64::NAN)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn rss(pid: Option<u32>) -> (f64, f64) {
    let path = match pid {
        Some(p) => format!("/proc/{p}/status"),
        None => "/proc/self/status".to_owned(),
    };
    parse_rss(&std::fs::read_to_string(path).unwrap_or_default())
}

/// The soft limit on open files, from `/proc/self/limits`.
fn fd_limit() -> Option<u64> {
    std::fs::read_to_string("/proc/self/limits")
        .ok()?
        .lines()
        .find(|l| l.starts_with("Max open files"))?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

pub async fn run(cli: &Cli, count: usize, server_pid: Option<u32>) -> anyhow::Result<Report> {
    let mut report = Report::new("conns", count);
    let need = if cli.url.is_some() { count } else { 2 * count } as u64 + 256;
    if let Some(limit) = fd_limit() {
        anyhow::ensure!(
            limit >= need,
            "{count} connections need about {need} open files; the limit is {limit}: run `ulimit -n 65536` first"
        );
    }
    let (addr, _server) = match &cli.url {
        None => {
            let s = server::start(&cli.redis_url, |_| {}).await?;
            (s.addr, Some(s))
        }
        Some(u) => (target(u)?, None),
    };
    let pid = if cli.url.is_some() { server_pid } else { None };
    anyhow::ensure!(
        cli.url.is_none() || pid.is_some(),
        "with --url, pass --server-pid to read the server's memory"
    );
    let (before, _) = rss(pid);
    let started = Instant::now();
    let mut conns = Vec::with_capacity(count);
    let mut failed = 0u64;
    for i in 0..count {
        match Conn::connect(addr).await {
            Ok(mut c) => match c.call(&Req::get("/api/health")).await {
                Ok(a) if a.status < 500 => conns.push(c),
                _ => failed += 1,
            },
            Err(_) => failed += 1,
        }
        if i % 1000 == 999 {
            eprint!("\r  {} connections open", conns.len());
        }
    }
    eprintln!();
    let open_secs = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (after, hwm) = rss(pid);
    let whose = if pid.is_some() {
        "server process"
    } else {
        "bench process = server + clients (upper bound)"
    };
    report.rows.push(
        Row::figure(&format!("open connections ({whose})"), conns.len() as u64, open_secs)
            .note(format!(
                "RSS {before:.1} MiB before, {after:.1} MiB with {} open (peak {hwm:.1} MiB); {failed} failed",
                conns.len()
            )),
    );
    report.goals.push(Goal::new(
        format!("server RSS < 150 MB with {count} open connections"),
        format!("{after:.1} MiB ({whose}), {} open", conns.len()),
        after * 1.048_576 < 150.0 && conns.len() == count,
    ));
    drop(conns);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rss_from_proc_status() {
        let status = "Name:\thmdp\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t3\n";
        assert_eq!(parse_rss(status), (100.0, 200.0));
        assert!(parse_rss("").0.is_nan());
    }
}
