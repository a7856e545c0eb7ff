//! `lock`: `hmdp-lock` lock + unlock cycles against raw `SET NX PX` + `DEL` on one key, in the
//! same run (as `crates/hmdp-lock/benches/lock.rs`, through the crate's public API). Raw
//! spins on a failed `SET NX` — what a naive lock does — while the crate's waiters sleep until
//! an unlock message wakes one of them.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use hmdp_lock::{LockClient, LockKind, LockOptions};

use crate::{
    Cli,
    load::{Op, op_phase},
    report::{Report, Row},
};

const LEASE: Duration = Duration::from_secs(10);

pub async fn run(cli: &Cli) -> anyhow::Result<Report> {
    let duration = Duration::from_secs(cli.seconds);
    let mut report = Report::new("lock", cli.connections);
    let client = redis::Client::open(cli.redis_url.as_str())?;
    let conn = client.get_connection_manager().await?;
    let prefix = format!("bench:lock:{}:", uuid::Uuid::new_v4().simple());
    let locks = LockClient::builder(conn.clone())
        .subscriber(client)
        .key_prefix(&prefix)
        .build()?;
    let mut cell = 0;
    for tasks in [1usize, 8, cli.connections] {
        let mut rates = Vec::new();
        for subject in [
            "raw SET NX PX + DEL (spinning)",
            "hmdp-lock reentrant",
            "hmdp-lock simple",
        ] {
            cell += 1;
            let name = format!("k{cell}");
            let raw_key = format!("{prefix}raw:{name}");
            let mut ops: Vec<Op> = Vec::new();
            for t in 0..tasks {
                if subject.starts_with("raw") {
                    let (conn, key, token) = (conn.clone(), raw_key.clone(), format!("t{t}"));
                    ops.push(Arc::new(move |_| {
                        let (mut conn, key, token) = (conn.clone(), key.clone(), token.clone());
                        Box::pin(async move {
                            let give_up = Instant::now() + Duration::from_secs(5);
                            loop {
                                let ok: Option<String> = redis::cmd("SET")
                                    .arg(&key)
                                    .arg(&token)
                                    .arg("NX")
                                    .arg("PX")
                                    .arg(LEASE.as_millis() as u64)
                                    .query_async(&mut conn)
                                    .await
                                    .map_err(|e| format!("redis: {:?}", e.kind()))?;
                                if ok.is_some() {
                                    break;
                                }
                                if Instant::now() > give_up {
                                    return Err("timeout".to_owned());
                                }
                                tokio::task::yield_now().await;
                            }
                            redis::cmd("DEL")
                                .arg(&key)
                                .query_async::<i64>(&mut conn)
                                .await
                                .map_err(|e| format!("redis: {:?}", e.kind()))?;
                            Ok(1)
                        })
                    }));
                } else {
                    let kind = if subject.ends_with("simple") {
                        LockKind::Simple
                    } else {
                        LockKind::Reentrant
                    };
                    let lock = Arc::new(locks.lock_with(&name, LockOptions::new().kind(kind))?);
                    ops.push(Arc::new(move |_| {
                        let lock = lock.clone();
                        Box::pin(async move {
                            let g = lock
                                .try_lock(Duration::from_secs(5), Some(LEASE))
                                .await
                                .map_err(|e| e.to_string())?
                                .ok_or_else(|| "timeout".to_owned())?;
                            g.unlock().await.map_err(|e| e.to_string())?;
                            Ok(1)
                        })
                    }));
                }
            }
            let o = op_phase(&format!("{subject}, {tasks} tasks"), duration, ops).await?;
            rates.push(o.rate());
            report.rows.push(
                Row::from_outcome(&format!("{subject}, {tasks} tasks"), &o).note(format!(
                    "{:.2}× raw with {tasks} tasks",
                    o.rate() / rates[0]
                )),
            );
        }
        report.summary.push(format!(
            "{tasks} tasks: reentrant {:.2}× raw, simple {:.2}× raw",
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
