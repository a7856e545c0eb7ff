//! `ids`: the `hmdp-id` generators against raw `INCR` round trips, in the same run, on one
//! shared multiplexed connection (as `crates/hmdp-id/benches/ids.rs`, through the crate's
//! public API). Compatible mode needs one `INCR` per id, so raw `INCR` is its ceiling;
//! segment mode reserves blocks with `INCRBY` and should be far above it.

use std::{sync::Arc, time::Duration};

use hmdp_id::{IdGenerator, SegmentOptions};

use crate::{
    Cli,
    load::{Op, op_phase},
    report::{Report, Row},
};

/// Ids per call: one histogram entry per 16 sequential ids keeps the recording cost off the
/// in-memory segment path (millions of ids/s).
const PER_CALL: u64 = 16;

fn repeat<F, Fut>(f: F) -> Op
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let f = Arc::new(f);
    Arc::new(move |_| {
        let f = f.clone();
        Box::pin(async move {
            for _ in 0..PER_CALL {
                f().await?;
            }
            Ok(PER_CALL)
        })
    })
}

pub async fn run(cli: &Cli) -> anyhow::Result<Report> {
    let duration = Duration::from_secs(cli.seconds);
    let mut report = Report::new("ids", cli.connections);
    let conn = redis::Client::open(cli.redis_url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let prefix = format!("bench:ids:{}:", uuid::Uuid::new_v4().simple());
    let build = |biz: &str, seg: Option<SegmentOptions>| -> anyhow::Result<IdGenerator<_>> {
        let b = IdGenerator::builder(conn.clone(), biz).key_prefix(&prefix);
        Ok(match seg {
            Some(o) => b.segment(o),
            None => b.compatible(),
        }
        .build()?)
    };
    let compat = build("compat", None)?;
    let segment = build("seg", Some(SegmentOptions::new()))?;
    let raw_key = format!("{prefix}raw");
    for tasks in [1usize, cli.connections] {
        let mut rates = Vec::new();
        for subject in ["raw INCR", "compatible mode", "segment mode, step 1000"] {
            let ops: Vec<Op> =
                (0..tasks)
                    .map(|_| -> Op {
                        match subject {
                            "raw INCR" => {
                                let (conn, key) = (conn.clone(), raw_key.clone());
                                repeat(move || {
                                    let (mut conn, key) = (conn.clone(), key.clone());
                                    async move {
                                        redis::cmd("INCR")
                                            .arg(&key)
                                            .query_async::<i64>(&mut conn)
                                            .await
                                            .map(|_| ())
                                            .map_err(|e| format!("redis: {:?}", e.kind()))
                                    }
                                })
                            }
                            s => {
                                let ids = if s == "compatible mode" {
                                    compat.clone()
                                } else {
                                    segment.clone()
                                };
                                repeat(move || {
                                    let ids = ids.clone();
                                    async move {
                                        ids.next_id().await.map(|_| ()).map_err(|e| e.to_string())
                                    }
                                })
                            }
                        }
                    })
                    .collect();
            let o = op_phase(&format!("{subject}, {tasks} tasks"), duration, ops).await?;
            rates.push(o.rate());
            let ratio = o.rate() / rates[0];
            report.rows.push(
                Row::from_outcome(&format!("{subject}, {tasks} tasks"), &o)
                    .note(format!(
                        "{ratio:.2}× raw INCR with {tasks} tasks; latency per {PER_CALL} ids"
                    ))
                    .charted(),
            );
        }
        report.summary.push(format!(
            "{tasks} tasks: compatible {:.2}× raw INCR, segment {:.0}× raw INCR",
            rates[1] / rates[0],
            rates[2] / rates[0]
        ));
    }
    let mut c = conn.clone();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut c)
        .await?;
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL").arg(keys).query_async(&mut c).await?;
    }
    Ok(report)
}
