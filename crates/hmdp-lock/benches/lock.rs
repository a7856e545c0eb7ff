//! Lock + unlock round trips per second against a real Redis, next to raw
//! `SET NX PX` + `DEL` in the same run.
//!
//! Run: `cargo bench -p hmdp-lock --bench lock`
//! Env: `HMDP_TEST_REDIS_URL` (default redis://127.0.0.1:6379),
//!      `BENCH_SECS` (window per measurement, default 1), `BENCH_RUNS` (default 5).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hmdp_lock::{LockClient, LockKind, LockOptions};
use redis::aio::ConnectionManager;
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(10);

#[derive(Clone, Copy)]
enum Subject {
    Reentrant,
    Simple,
    Raw,
}

impl Subject {
    fn label(self) -> &'static str {
        match self {
            Subject::Reentrant => "hmdp-lock reentrant",
            Subject::Simple => "hmdp-lock simple",
            Subject::Raw => "raw SET NX PX + DEL",
        }
    }
}

async fn measure(
    subject: Subject,
    tasks: usize,
    window: Duration,
    locks: &LockClient,
    conn: &ConnectionManager,
    key_name: &str,
) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = start + window;
    let mut handles = Vec::new();
    for t in 0..tasks {
        let done = done.clone();
        let kind = match subject {
            Subject::Simple => LockKind::Simple,
            _ => LockKind::Reentrant,
        };
        let lock = locks
            .lock_with(key_name, LockOptions::new().kind(kind))
            .unwrap();
        let raw_key = format!("{}raw:{key_name}", locks.key_prefix());
        let mut conn = conn.clone();
        handles.push(tokio::spawn(async move {
            let token = format!("bench:{t}");
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                match subject {
                    Subject::Raw => {
                        let ok: Option<String> = redis::cmd("SET")
                            .arg(&raw_key)
                            .arg(&token)
                            .arg("NX")
                            .arg("PX")
                            .arg(LEASE.as_millis() as u64)
                            .query_async(&mut conn)
                            .await
                            .unwrap();
                        if ok.is_none() {
                            // Spin: retry at once (what a naive raw lock does).
                            tokio::task::yield_now().await;
                            continue;
                        }
                        let _: i64 = redis::cmd("DEL")
                            .arg(&raw_key)
                            .query_async(&mut conn)
                            .await
                            .unwrap();
                    }
                    Subject::Reentrant | Subject::Simple => {
                        let Some(g) = lock.try_lock(end - now, Some(LEASE)).await.unwrap() else {
                            break;
                        };
                        assert!(g.unlock().await.unwrap());
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let url =
        std::env::var("HMDP_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let secs: f64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let window = Duration::from_secs_f64(secs);
    let client = redis::Client::open(url.as_str()).unwrap();
    let conn = client.get_connection_manager().await.unwrap();
    let prefix = format!("bench-{}:", uuid::Uuid::new_v4());
    let locks = LockClient::builder(conn.clone())
        .subscriber(client)
        .key_prefix(&prefix)
        .build()
        .unwrap();

    println!("hmdp-lock bench: {url}, {runs} runs x {secs} s per cell, median reported");
    println!("one ConnectionManager (multiplexed) shared by all tasks; lease 10 s; one key\n");
    println!(
        "| tasks | {:<20} | {:>12} | {:>12} | {:>12} |",
        "subject", "median op/s", "min op/s", "max op/s"
    );
    println!("|---|---|---:|---:|---:|");
    let mut rows = Vec::new();
    for tasks in [1usize, 8, 64] {
        // Interleave subjects run by run so background load hits all alike.
        let subjects = [Subject::Raw, Subject::Reentrant, Subject::Simple];
        let mut samples = vec![Vec::new(); subjects.len()];
        for run in 0..runs {
            for (i, subject) in subjects.iter().enumerate() {
                let name = format!("k{tasks}-{run}-{i}");
                samples[i].push(measure(*subject, tasks, window, &locks, &conn, &name).await);
            }
        }
        let mut cell = Vec::new();
        for (subject, samples) in subjects.iter().zip(samples) {
            let (lo, hi) = samples
                .iter()
                .fold((f64::MAX, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            let med = median(samples);
            println!(
                "| {tasks:>5} | {:<20} | {med:>12.0} | {lo:>12.0} | {hi:>12.0} |",
                subject.label()
            );
            cell.push(med);
        }
        rows.push((tasks, cell));
    }
    println!("\n| tasks | reentrant / raw | simple / raw |");
    println!("|---|---:|---:|");
    for (tasks, cell) in rows {
        println!(
            "| {tasks:>5} | {:>15.2} | {:>12.2} |",
            cell[1] / cell[0],
            cell[2] / cell[0]
        );
    }
    // Clean up whatever the runs left behind (all keys expire anyway).
    let mut conn = conn;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    if !keys.is_empty() {
        let _: i64 = redis::cmd("DEL")
            .arg(keys)
            .query_async(&mut conn)
            .await
            .unwrap_or(0);
    }
}
