//! Throughput of the id generators next to raw `INCR` round trips, measured
//! in the same run on the same multiplexed connection.
//!
//! Run with `cargo bench -p hmdp-id --bench ids`. Environment:
//!
//! * `HMDP_TEST_REDIS_URL` — the Redis to use (default `redis://127.0.0.1:6379`);
//! * `HMDP_BENCH_SECS` — seconds per measurement (default 1);
//! * `HMDP_BENCH_REPS` — repetitions per scenario (default 5).
//!
//! Keys live under a random `bench-<uuid>:` prefix and are deleted at the
//! end.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmdp_id::{IdGenerator, SegmentOptions};
use redis::aio::MultiplexedConnection;

/// Iterations between two looks at the clock.
const BATCH: u64 = 16;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `op` in `tasks` concurrent tasks for `secs` and returns ops/s.
async fn measure<F, Fut>(tasks: usize, secs: f64, op: Arc<F>) -> f64
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let mut handles = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        let op = Arc::clone(&op);
        handles.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                for _ in 0..BATCH {
                    op().await;
                }
                n += BATCH;
            }
            n
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

struct Row {
    name: String,
    tasks: usize,
    runs: Vec<f64>,
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; ignore arguments.
    let url = std::env::var("HMDP_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let secs: f64 = env_or("HMDP_BENCH_SECS", 1.0);
    let reps: usize = env_or("HMDP_BENCH_REPS", 5);
    let client = redis::Client::open(url.as_str()).unwrap();
    let conn: MultiplexedConnection = client.get_multiplexed_async_connection().await.unwrap();
    let prefix = format!("bench-{}:", uuid::Uuid::new_v4());
    println!(
        "hmdp-id bench: {url}, {reps} x {secs} s per scenario, {} tokio workers",
        tokio::runtime::Handle::current().metrics().num_workers()
    );

    type Op = Arc<dyn Fn() -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;
    let raw_key = format!("{prefix}raw");
    let raw: Op = {
        let conn = conn.clone();
        Arc::new(move || {
            let mut conn = conn.clone();
            let key = raw_key.clone();
            Box::pin(async move {
                let _: i64 = redis::cmd("INCR")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            })
        })
    };
    let generator = |ids: IdGenerator<MultiplexedConnection>| -> Op {
        Arc::new(move || {
            let ids = ids.clone();
            Box::pin(async move {
                ids.next_id().await.unwrap();
            })
        })
    };
    let build = |biz: &str, seg: Option<SegmentOptions>| {
        let b = IdGenerator::builder(conn.clone(), biz).key_prefix(&prefix);
        match seg {
            Some(o) => b.segment(o),
            None => b.compatible(),
        }
        .build()
        .unwrap()
    };
    let scenarios: Vec<(&str, Op)> = vec![
        ("raw INCR round trips", raw),
        ("compatible mode", generator(build("compat", None))),
        (
            "segment mode, step 1000",
            generator(build("seg", Some(SegmentOptions::new()))),
        ),
        (
            "segment mode, step 10000",
            generator(build("seg10k", Some(SegmentOptions::new().step(10_000)))),
        ),
    ];

    let mut rows = Vec::new();
    for tasks in [1usize, 64] {
        for (name, op) in &scenarios {
            let op = Arc::clone(op);
            // Warm-up (connections, first blocks, CPU frequency).
            let wrapped = Arc::new(move || op());
            measure(tasks, secs.min(0.3), Arc::clone(&wrapped)).await;
            let mut runs = Vec::with_capacity(reps);
            for _ in 0..reps {
                runs.push(measure(tasks, secs, Arc::clone(&wrapped)).await);
            }
            rows.push(Row {
                name: name.to_string(),
                tasks,
                runs,
            });
        }
    }

    println!();
    println!("| scenario | tasks | median ids/s | min | max | vs raw INCR (same tasks) |");
    println!("|---|---:|---:|---:|---:|---:|");
    for row in &rows {
        let raw = rows
            .iter()
            .find(|r| r.tasks == row.tasks && r.name.starts_with("raw"))
            .map(|r| median(r.runs.clone()))
            .unwrap();
        let med = median(row.runs.clone());
        let min = row.runs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = row.runs.iter().copied().fold(0.0, f64::max);
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.2}x |",
            row.name,
            row.tasks,
            med,
            min,
            max,
            med / raw
        );
    }

    // Clean up.
    let mut c = conn.clone();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut c)
            .await
            .unwrap();
        if !keys.is_empty() {
            let _: () = redis::cmd("DEL")
                .arg(&keys)
                .query_async(&mut c)
                .await
                .unwrap();
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
}
