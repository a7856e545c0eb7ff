//! `shop`: cached shop reads and the penetration flood.

use std::{
    net::SocketAddr,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use crate::{
    Cli,
    load::{Stop, http_phase, redis_phase},
    report::{Report, Row},
    server::{self, BenchServer},
};

fn loads(s: &BenchServer) -> u64 {
    s.state
        .catalogue
        .cache()
        .stats()
        .loads
        .load(Ordering::SeqCst)
}

/// The socket address of a `http://host:port` URL.
pub fn target(url: &str) -> anyhow::Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    let hostport = url.trim_start_matches("http://").trim_end_matches('/');
    hostport
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| anyhow::anyhow!("cannot resolve {url}"))
}

pub async fn run(cli: &Cli, flood: u64) -> anyhow::Result<Report> {
    let duration = Duration::from_secs(cli.seconds);
    let c = cli.connections;
    let mut report = Report::new("shop", c);

    // Raw Redis GET of a cached shop-sized value: the baseline for the cached read.
    let probe_key = format!("bench:probe:{}", uuid::Uuid::new_v4().simple());
    {
        let mut conn = redis::Client::open(cli.redis_url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        let value = "x".repeat(400);
        let _: () = redis::cmd("SET")
            .arg(&probe_key)
            .arg(value)
            .arg("EX")
            .arg(600)
            .query_async(&mut conn)
            .await?;
    }
    let key = probe_key.clone();
    let raw = redis_phase(
        "raw Redis GET (unpipelined)",
        &cli.redis_url,
        c,
        duration,
        Arc::new(move |_| {
            let mut cmd = redis::cmd("GET");
            cmd.arg(&key);
            cmd
        }),
    )
    .await?;
    report.rows.push(Row::from_outcome(
        &format!("raw Redis GET, {c} connections, unpipelined"),
        &raw,
    ));
    let key = probe_key.clone();
    let raw1 = redis_phase(
        "raw Redis GET (1 connection)",
        &cli.redis_url,
        1,
        duration,
        Arc::new(move |_| {
            let mut cmd = redis::cmd("GET");
            cmd.arg(&key);
            cmd
        }),
    )
    .await?;
    report.rows.push(Row::from_outcome(
        "raw Redis GET, 1 connection, unpipelined",
        &raw1,
    ));

    let hot = Arc::new(|_| "/api/shop/1".to_owned());
    match &cli.url {
        Some(url) => {
            let addr = target(url)?;
            let o = http_phase(
                "GET /shop/1 (running server)",
                addr,
                c,
                Stop::After(duration),
                hot,
            )
            .await?;
            let ratio = o.rate() / raw.rate();
            report.rows.push(Row::from_outcome(
                "GET /api/shop/1 (hot, running server)",
                &o,
            ));
            report.summary.push(format!(
                "cached GET /shop/{{id}} vs raw Redis GET: {ratio:.2}×"
            ));
        }
        None => {
            let with_l1 = server::start(&cli.redis_url, |_| {}).await?;
            let o_l1 = http_phase(
                "GET /shop/1 with L1",
                with_l1.addr,
                c,
                Stop::After(duration),
                hot.clone(),
            )
            .await?;
            report.rows.push(
                Row::from_outcome("GET /api/shop/1 (hot key, L1 on: default)", &o_l1)
                    .note(format!("database queries: {}", loads(&with_l1))),
            );
            // The HTTP floor on the same server and connections: a 404 envelope from the
            // router, no cache, no Redis. An L1 hit cannot be much faster than this.
            let floor = http_phase(
                "HTTP floor (404)",
                with_l1.addr,
                c,
                Stop::After(duration),
                Arc::new(|_| "/api/no-such-route".to_owned()),
            )
            .await?;
            report.rows.push(
                Row::from_outcome("HTTP floor: unknown route, 404 envelope (no Redis)", &floor)
                    .note(format!(
                        "the L1 hit reaches {:.0} % of this rate; raw GET is {:.0} % of it",
                        o_l1.rate() / floor.rate().max(1e-9) * 100.0,
                        raw.rate() / floor.rate().max(1e-9) * 100.0
                    )),
            );
            drop(with_l1);

            let no_l1 =
                server::start(&cli.redis_url, |cfg| cfg.cache.l1_ttl = Duration::ZERO).await?;
            let o_redis = http_phase(
                "GET /shop/1 without L1",
                no_l1.addr,
                c,
                Stop::After(duration),
                hot.clone(),
            )
            .await?;
            report.rows.push(
                Row::from_outcome("GET /api/shop/1 (hot key, L1 off: Redis GET)", &o_redis)
                    .note(format!("database queries: {}", loads(&no_l1))),
            );
            let uniform = Arc::new(|i: u64| format!("/api/shop/{}", i % 6 + 1));
            let o_uniform = http_phase(
                "GET /shop/{1..6} without L1",
                no_l1.addr,
                c,
                Stop::After(duration),
                uniform,
            )
            .await?;
            report.rows.push(Row::from_outcome(
                "GET /api/shop/{1..6} (uniform, L1 off)",
                &o_uniform,
            ));
            drop(no_l1);

            report.goals.push(crate::report::Goal::new(
                "cached GET /shop/{id} ≥ raw unpipelined Redis GET rate",
                format!(
                    "{:.0} req/s (L1 on) vs {:.0} GET/s over {c} connections = {:.0} %",
                    o_l1.rate(),
                    raw.rate(),
                    o_l1.rate() / raw.rate() * 100.0
                ),
                o_l1.rate() >= raw.rate(),
            ));
            report.summary.push(format!(
                "cached GET /shop/{{id}} vs raw unpipelined Redis GET over {c} connections, same run: L1 on {:.2}×, L1 off {:.2}×",
                o_l1.rate() / raw.rate(),
                o_redis.rate() / raw.rate()
            ));
            report.summary.push(format!(
                "cached GET /shop/{{id}} vs raw unpipelined Redis GET over 1 connection, same run: L1 on {:.2}×, L1 off {:.2}×",
                o_l1.rate() / raw1.rate(),
                o_redis.rate() / raw1.rate()
            ));

            // Penetration: ids that never existed, random over 5,000 values.
            let flood_path =
                Arc::new(|_| format!("/api/shop/{}", rand::random_range(1_000_000..1_005_000)));
            let no_bloom = server::start(&cli.redis_url, |cfg| cfg.cache.bloom = false).await?;
            let before = loads(&no_bloom);
            let o = http_phase(
                "flood, no Bloom filter",
                no_bloom.addr,
                c,
                Stop::Requests(flood),
                flood_path.clone(),
            )
            .await?;
            let q_plain = loads(&no_bloom) - before;
            report.rows.push(
                Row::from_outcome("penetration flood, Bloom filter off", &o)
                    .note(format!("database queries: {q_plain} for {flood} requests over ≤5000 unknown ids (null caching)")),
            );
            drop(no_bloom);
            let bloom = server::start(&cli.redis_url, |_| {}).await?;
            let before = loads(&bloom);
            let o = http_phase(
                "flood, Bloom filter on",
                bloom.addr,
                c,
                Stop::Requests(flood),
                flood_path,
            )
            .await?;
            let q_bloom = loads(&bloom) - before;
            report.rows.push(
                Row::from_outcome("penetration flood, Bloom filter on", &o)
                    .note(format!("database queries: {q_bloom} for {flood} requests")),
            );
            report.summary.push(format!(
                "penetration flood of {flood} requests: {q_plain} database queries without the Bloom filter, {q_bloom} with it"
            ));
        }
    }
    let mut conn = redis::Client::open(cli.redis_url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let _: () = redis::cmd("DEL")
        .arg(&probe_key)
        .query_async(&mut conn)
        .await?;
    Ok(report)
}
