//! `login`: the SMS-code login flow and session reads.
//!
//! Phase 1: each operation logs a brand-new phone in — `POST /user/code`, read the code (the
//! capturing SMS sender in-process, Redis with `--url`), `POST /user/login`, `GET /user/me` —
//! so it measures code issuing, the rate-limit scripts, user creation and session creation.
//! Phase 2: `GET /user/me` with the tokens from phase 1 (the session lookup every logged-in
//! request pays), next to a raw `HGETALL` of a session-sized hash.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use super::{
    setup::{CodeSource, login, phones},
    shop::target,
};
use crate::{
    Cli,
    load::{ConnOp, Req, Stop, conn_phase, redis_phase, request_phase},
    report::{Report, Row},
    server,
};

pub async fn run(cli: &Cli) -> anyhow::Result<Report> {
    let duration = Duration::from_secs(cli.seconds);
    let c = cli.connections;
    let mut report = Report::new("login", c);
    let (addr, codes, _server) = match &cli.url {
        None => {
            let s = server::start_on(
                &cli.redis_url,
                &server::Database::from_flag(cli.database_url.as_deref()),
                |_| {},
            )
            .await?;
            (s.addr, CodeSource::Sms(s.sms.clone()), Some(s))
        }
        Some(url) => {
            let conn = redis::Client::open(cli.redis_url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            (
                target(url)?,
                CodeSource::Redis {
                    conn,
                    prefix: cli.redis_prefix.clone(),
                },
                None,
            )
        }
    };

    // Enough fresh phones for any rate this machine reaches.
    let pool = Arc::new(phones(200_000));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let (p, t) = (pool.clone(), tokens.clone());
    let op: ConnOp = Arc::new(move |mut conn, i| {
        let (p, t, codes) = (p.clone(), t.clone(), codes.clone());
        Box::pin(async move {
            let Some(phone) = p.get(i as usize) else {
                return (conn, Err("out of phones".to_owned()));
            };
            let r = login(&mut conn, &codes, phone).await;
            let r = match r {
                Ok(u) => {
                    t.lock().expect("tokens").push(u.token);
                    Ok(())
                }
                Err(e) => Err(e.to_string()),
            };
            (conn, r)
        })
    });
    let o = conn_phase(
        "login flow (code, login, me)",
        addr,
        c,
        Stop::After(duration),
        op,
    )
    .await?;
    report.rows.push(
        Row::from_outcome("new user: code + login + /user/me", &o)
            .note("one operation = 3 HTTP requests")
            .charted(),
    );

    let tokens = Arc::new(std::mem::take(&mut *tokens.lock().expect("tokens")));
    anyhow::ensure!(!tokens.is_empty(), "no login succeeded");
    let t = tokens.clone();
    let o = request_phase(
        "GET /user/me",
        addr,
        c,
        Stop::After(duration),
        false,
        Arc::new(move |i| {
            Req::get("/api/user/me").header("authorization", &t[(i as usize * 7919) % t.len()])
        }),
    )
    .await?;
    report
        .rows
        .push(Row::from_outcome("GET /api/user/me (session read)", &o).charted());

    let key = format!("bench:login:{}", uuid::Uuid::new_v4().simple());
    let mut conn = redis::Client::open(cli.redis_url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("id")
        .arg(1)
        .arg("nickName")
        .arg("user_k3j9x0q2mz")
        .arg("icon")
        .arg("")
        .query_async(&mut conn)
        .await?;
    let k = key.clone();
    let raw = redis_phase(
        "raw HGETALL",
        &cli.redis_url,
        c,
        duration,
        Arc::new(move |_| {
            let mut cmd = redis::cmd("HGETALL");
            cmd.arg(&k);
            cmd
        }),
    )
    .await?;
    let _: () = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
    report.rows.push(Row::from_outcome(
        &format!("raw Redis HGETALL, {c} connections, unpipelined"),
        &raw,
    ));
    report.summary.push(format!(
        "GET /user/me vs raw unpipelined HGETALL, same run: {:.2}×",
        o.rate() / raw.rate()
    ));
    Ok(report)
}
