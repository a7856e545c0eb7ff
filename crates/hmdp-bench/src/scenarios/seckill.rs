//! `seckill`: the flash sale end to end, then its invariants.
//!
//! N users log in through the real API, an admin creates a voucher with stock S, and C
//! connections fire `POST /voucher-order/seckill/{id}`: every user once first, then random
//! users (each user many times, the same user sometimes twice at once — the mix a real sale
//! sees, and the one that finds double orders). When the load stops the bench waits for the
//! order worker to write every accepted order, then checks the invariants (see
//! [`crate::check`]) and fails the run if one does not hold.
//!
//! In the same run it measures the raw baselines ([`super::baselines`]): the same Lua script
//! straight on Redis, pipelined and not, and plain batched `INSERT`s; and the drain rate of
//! the order worker.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use clap::ValueEnum;
use hmdp::{
    config::{OrderTransport, SeckillMode},
    testing::{
        kv::Keys,
        storage::Db,
        worker::{OrderWorker, WorkerStats},
    },
};

use super::{
    baselines::{pending_del_cost, pick_user, raw_grab, raw_insert},
    setup::{Target, User, create_users, create_voucher, db_stock},
};
use crate::{
    Cli,
    check::{SaleState, check_sale},
    load::{Outcome, Req, Stop, paced_request_phase, request_phase},
    report::{Goal, Report, Row},
    server::Database,
};

/// Which order path(s) to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    Async,
    Sync,
    /// Async then sync, each on a fresh in-process server.
    Both,
}

/// When the order worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Drain {
    /// During the load, as in production (drain rate = accepted orders / time from the start of
    /// the sale until the last is written; bounded by the accept rate).
    Live,
    /// Started after the load, on the whole backlog (in-process only): the worker's own rate.
    Backlog,
}

/// How accepted orders reach the database (async mode, in-process server).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportArg {
    /// The worker drains the Redis order stream (`HMDP_ORDER_TRANSPORT=stream`).
    Stream,
    /// Relayed through RabbitMQ with confirms, consumed from `direct.seckill.queue`.
    Rabbitmq,
}

/// The scenario's knobs.
#[derive(Debug, Clone, clap::Args)]
pub struct SeckillArgs {
    /// Users to log in through the API.
    #[arg(long, default_value_t = 2000)]
    pub users: usize,
    /// The voucher's stock.
    #[arg(long, default_value_t = 500)]
    pub stock: i64,
    /// async, sync or both (in-process). Against --url: a label; the server's
    /// HMDP_SECKILL_MODE decides.
    #[arg(long, value_enum, default_value_t = ModeArg::Both)]
    pub mode: ModeArg,
    /// When the order worker runs (backlog: in-process only).
    #[arg(long, value_enum, default_value_t = Drain::Live)]
    pub drain: Drain,
    /// Scripts per pipeline in the pipelined raw baseline.
    #[arg(long, default_value_t = 64)]
    pub pipeline: usize,
    /// Rows per transaction in the raw INSERT baseline (the worker's default batch).
    #[arg(long, default_value_t = 200)]
    pub insert_batch: usize,
    /// Seconds to wait for the worker to write every accepted order before failing.
    #[arg(long, default_value_t = 120)]
    pub drain_timeout: u64,
    /// Skip the raw baselines.
    #[arg(long)]
    pub no_baselines: bool,
    /// How accepted orders reach the database (async mode, in-process server).
    #[arg(long, value_enum, default_value_t = TransportArg::Stream)]
    pub transport: TransportArg,
    /// RabbitMQ for `--transport rabbitmq`. Its `direct.seckill.queue` is purged first, so
    /// give the bench a vhost of its own.
    #[arg(long, default_value = hmdp::config::DEFAULT_AMQP_URL)]
    pub amqp_url: String,
    /// Grabs per second over all connections (a steady sale below saturation, where the
    /// grab-to-row lag is the pipeline's own and not a backlog's); unset: as fast as answered.
    #[arg(long)]
    pub rate: Option<f64>,
    /// In-process: `HMDP_REDIS_WAIT_REPLICAS` (each accepted grab waits for this many replicas
    /// of `--redis-url`).
    #[arg(long, default_value_t = 0)]
    pub wait_replicas: u32,
}

impl TransportArg {
    fn setting(self) -> OrderTransport {
        match self {
            TransportArg::Stream => OrderTransport::Stream,
            TransportArg::Rabbitmq => OrderTransport::RabbitMq,
        }
    }
}

/// What one mode's run measured.
struct ModeResult {
    mode: SeckillMode,
    load: Outcome,
    accepted: usize,
    /// `(orders, seconds)` of the drain.
    drain: Option<(u64, f64)>,
    /// The in-process worker's own account of the drain: batches and database write time.
    worker_note: Option<String>,
    /// The in-process worker's grab-to-row lag (`hmdp_worker_order_lag_seconds`).
    lag: Option<Row>,
    /// The HTTP floor on the same server and connections: `(what, outcome)`.
    floors: Vec<(String, Outcome)>,
}

/// Pending-key delete cost per batch: `(one at a time, pipelined)` seconds.
async fn raw_pending_del(cli: &Cli, args: &SeckillArgs) -> anyhow::Result<(f64, f64)> {
    pending_del_cost(&cli.redis_url, args.insert_batch, 20).await
}

/// Where the drain's time went, from the worker's counters: batches, average batch size and
/// the share spent inside database transactions (the rest is stream reads, acks, trims and
/// waiting for the scheduler); for a backlog, also how long the worker took to write its first
/// order (its start: connections, the broker's topology) and the rate from there on.
fn worker_note(
    w: &WorkerStats,
    orders: u64,
    drain_secs: f64,
    first_write: Option<(u64, f64)>,
) -> String {
    // The histogram's sum is only exposed through the exposition, as a scraper reads it.
    let mut registry = hmdp::testing::metrics::Registry::default();
    w.register(&mut registry);
    let db_secs = hmdp::testing::metrics::encode(&registry)
        .lines()
        .find_map(|l| l.strip_prefix("hmdp_worker_write_seconds_sum "))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(f64::NAN);
    let (batches, persisted) = (w.batches.get(), w.persisted.get());
    let mut note = format!(
        "worker: {batches} batches, {:.0} orders/batch, {:.3}s inside database transactions of {:.3}s drain ({:.0} %)",
        persisted as f64 / batches.max(1) as f64,
        db_secs,
        drain_secs,
        db_secs / drain_secs.max(1e-9) * 100.0
    );
    if let Some((written, first)) = first_write {
        note += &format!(
            "; first orders written after {:.0} ms, {:.0} orders/s from there",
            first * 1e3,
            orders.saturating_sub(written) as f64 / (drain_secs - first).max(1e-9)
        );
    }
    note
}

/// The grab-to-row lag of every order the worker wrote, as a row whose latency columns are
/// the lag's quantiles: read from the worker's histogram the way `histogram_quantile` reads a
/// scrape (linear within a bucket), so within a bucket's width (~1.5×) of the exact value.
fn lag_row(w: &WorkerStats) -> Option<Row> {
    let mut registry = hmdp::testing::metrics::Registry::default();
    w.register(&mut registry);
    let text = hmdp::testing::metrics::encode(&registry);
    let buckets: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("hmdp_worker_order_lag_seconds_bucket{le=\"")?;
            let (le, count) = rest.split_once("\"} ")?;
            Some((le.parse().unwrap_or(f64::INFINITY), count.parse().ok()?))
        })
        .collect();
    let total = buckets.last().map_or(0.0, |b| b.1);
    if total == 0.0 {
        return None;
    }
    let ms = |q: f64| histogram_quantile(&buckets, q) * 1e3;
    let mut row = Row::figure(
        "grab → row lag (hmdp_worker_order_lag_seconds)",
        total as u64,
        0.0,
    )
    .note("latency columns: from the grab's stream entry to the commit, histogram estimates");
    row.rate = 0.0;
    (row.p50_ms, row.p90_ms, row.p99_ms) = (ms(0.5), ms(0.9), ms(0.99));
    row.max_ms = ms(1.0);
    Some(row)
}

/// The `q` quantile of cumulative `(upper bound, count)` buckets, interpolated linearly within
/// its bucket as Prometheus's `histogram_quantile` does.
fn histogram_quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let total = buckets.last().map_or(0.0, |b| b.1);
    if total == 0.0 {
        return f64::NAN;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return lower;
            }
            let inside = count - below;
            return lower + (le - lower) * ((rank - below) / inside.max(1e-9));
        }
        (lower, below) = (le, count);
    }
    lower
}

/// Orders of a voucher in the database.
pub(super) async fn db_orders(db: &Db, voucher: i64) -> anyhow::Result<Vec<(i64, i64)>> {
    Ok(hmdp::on_pool!(db, pool => {
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT id, CAST(user_id AS SIGNED) FROM tb_voucher_order WHERE voucher_id = ?",
        )
        .bind(voucher)
        .fetch_all(pool)
        .await?
    }))
}

async fn db_order_count(db: &Db, voucher: i64) -> anyhow::Result<i64> {
    Ok(hmdp::on_pool!(db, pool => {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ?")
            .bind(voucher)
            .fetch_one(pool)
            .await?
    }))
}

/// Samples a growing count (orders written) in the background every `every`, remembering
/// when each new value was first seen, so the moment the last order was written is known
/// even though the bench only looks after the load ended.
struct Watch {
    seen: Arc<std::sync::Mutex<Vec<(u64, Instant)>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    handle: tokio::task::JoinHandle<()>,
}

/// When the count first reached `target`, from `(value, first seen)` samples in time order.
fn first_reached(seen: &[(u64, Instant)], target: u64) -> Option<Instant> {
    seen.iter().find(|(v, _)| *v >= target).map(|(_, t)| *t)
}

impl Watch {
    fn start<F, Fut>(every: Duration, mut count: F) -> Self
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = u64> + Send,
    {
        let seen: Arc<std::sync::Mutex<Vec<(u64, Instant)>>> = Arc::default();
        let stop: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let (s, st) = (seen.clone(), stop.clone());
        let handle = tokio::spawn(async move {
            let mut last = 0;
            while !st.load(std::sync::atomic::Ordering::Relaxed) {
                let n = count().await;
                if n != last {
                    s.lock().expect("watch").push((n, Instant::now()));
                    last = n;
                }
                tokio::time::sleep(every).await;
            }
        });
        Self { seen, stop, handle }
    }

    /// Waits (up to `timeout`) until the count reached `target`; when it first did, and the
    /// first count seen above zero with its time.
    async fn until(
        self,
        target: u64,
        timeout: Duration,
    ) -> (Option<Instant>, Option<(u64, Instant)>) {
        let deadline = Instant::now() + timeout;
        let reached = loop {
            let (r, n) = {
                let seen = self.seen.lock().expect("watch");
                (
                    first_reached(&seen, target),
                    seen.last().map_or(0, |(v, _)| *v),
                )
            };
            if r.is_some() || Instant::now() >= deadline {
                break r;
            }
            eprint!("\r  waiting for the order worker: {n}/{target} written   ");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        eprint!("\r{:80}\r", "");
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.handle.await;
        let moved = self.seen.lock().expect("watch").first().copied();
        (reached, moved)
    }
}

/// The in-process server for a mode, or the running one of `--url`.
async fn target_for(cli: &Cli, args: &SeckillArgs, mode: SeckillMode) -> anyhow::Result<Target> {
    let backlog = args.drain == Drain::Backlog;
    Target::connect(cli, |c| {
        c.seckill.mode = mode;
        c.seckill.transport = args.transport.setting();
        c.seckill.amqp_url = args.amqp_url.clone();
        c.seckill.wait_replicas = args.wait_replicas;
        if backlog {
            c.seckill.worker = false;
        }
        // Room for every connection's requests plus the worker.
        c.db_max_connections = c.db_max_connections.max(16);
    })
    .await
}

/// Empties `direct.seckill.queue` (declaring it first): messages of an earlier run would be
/// written into this run's database.
async fn purge_order_queue(url: &str) -> anyhow::Result<()> {
    let connection = hmdp::testing::amqp::connect(url, "hmdp-bench").await?;
    let channel = connection.create_channel().await?;
    hmdp::testing::amqp::topology::declare(&channel).await?;
    let purged = channel
        .queue_purge(
            hmdp::testing::amqp::topology::QUEUE.into(),
            lapin::options::QueuePurgeOptions::default(),
        )
        .await?;
    if purged > 0 {
        eprintln!("seckill: purged {purged} messages of an earlier run from the order queue");
    }
    let _ = connection.close(200, "purged".into()).await;
    Ok(())
}

/// The mode, and the transport when it is not the stream.
fn run_name(mode: SeckillMode, transport: TransportArg) -> &'static str {
    match (mode, transport) {
        (SeckillMode::Async, TransportArg::Rabbitmq) => "async+rabbitmq",
        _ => mode_name(mode),
    }
}

fn mode_name(m: SeckillMode) -> &'static str {
    match m {
        SeckillMode::Async => "async",
        SeckillMode::Sync => "sync",
    }
}

/// One mode: users, voucher, load, drain, invariants. Also runs the raw INSERT baseline on
/// the target's database when asked (it must be the same database the worker writes to).
async fn run_mode(
    cli: &Cli,
    args: &SeckillArgs,
    mode: SeckillMode,
    report: &mut Report,
    insert_baseline: &mut Option<Outcome>,
) -> anyhow::Result<ModeResult> {
    if args.transport == TransportArg::Rabbitmq && mode == SeckillMode::Async && cli.url.is_none() {
        purge_order_queue(&args.amqp_url).await?;
    }
    let t = target_for(cli, args, mode).await?;
    let name = run_name(mode, args.transport);
    eprintln!(
        "seckill/{name}: logging in {} users through the API…",
        args.users
    );
    let started = Instant::now();
    let users: Arc<Vec<User>> = Arc::new(create_users(t.addr, &t.codes, args.users, 32).await?);
    eprintln!(
        "seckill/{name}: {} users in {:.1}s; creating the voucher (stock {})",
        users.len(),
        started.elapsed().as_secs_f64(),
        args.stock
    );
    let voucher = create_voucher(t.addr, &t.admin_token, args.stock).await?;

    let n = users.len() as u64;
    let u2 = users.clone();
    let make = Arc::new(move |i: u64| {
        let u = &u2[pick_user(i, n) as usize];
        Req::post(format!("/api/voucher-order/seckill/{voucher}")).header("authorization", &u.token)
    });
    // The order worker's progress, watched from before the first order (live drain).
    let persisted = |stats: Arc<WorkerStats>| {
        move || {
            let stats = stats.clone();
            async move { stats.persisted.get() }
        }
    };
    let live_watch = match (&t.server, args.drain, mode) {
        (_, _, SeckillMode::Sync) | (Some(_), Drain::Backlog, _) => None,
        (Some(s), Drain::Live, _) => Some(Watch::start(
            Duration::from_millis(1),
            persisted(s.state.worker.clone().expect("the in-process worker runs")),
        )),
        (None, _, _) => {
            let db = t.db.clone();
            Some(Watch::start(Duration::from_millis(10), move || {
                let db = db.clone();
                async move { db_order_count(&db, voucher).await.unwrap_or(0) as u64 }
            }))
        }
    };
    let load_start = Instant::now();
    let load = paced_request_phase(
        &format!("seckill {name}"),
        t.addr,
        cli.connections,
        Stop::AtLeast(Duration::from_secs(cli.seconds), n),
        true,
        args.rate,
        make,
    )
    .await?;
    // The live drain is timed from the start of the sale (the load; its connections are opened
    // first, a few ms), not from the first accepted answer: under load the client may read that
    // answer after the worker has already written the order. From the start it includes the
    // selling time, so it is a lower bound of the worker's rate.
    let sale_start = load.first_success.map(|_| load_start);
    let returned: Vec<(i64, i64)> = load
        .successes
        .iter()
        .filter_map(|(i, data)| {
            data.as_i64()
                .map(|id| (id, users[pick_user(*i, n) as usize].id))
        })
        .collect();
    let accepted = returned.len();

    // Drain: the worker writes every accepted order (sync mode wrote them already).
    let timeout = Duration::from_secs(args.drain_timeout);
    let mut drain = None;
    let mut worker_stats: Option<Arc<WorkerStats>> =
        t.server.as_ref().and_then(|s| s.state.worker.clone());
    let mut drained = true;
    // Backlog: the worker's first written orders, and the seconds from its start to them.
    let mut first_write = None;
    if let Some(w) = live_watch {
        match (w.until(accepted as u64, timeout).await.0, sale_start) {
            (Some(done), Some(first)) => {
                drain = Some((accepted as u64, (done.max(first) - first).as_secs_f64()))
            }
            (None, _) => drained = false,
            _ => {}
        }
    } else if let (Some(s), Drain::Backlog, SeckillMode::Async) = (&t.server, args.drain, mode) {
        let worker = OrderWorker::new(
            s.state.db.clone(),
            s.state.redis.clone(),
            cli.redis_url.clone(),
            s.state.keys.clone(),
            s.state.config.seckill.clone(),
            None,
        );
        worker_stats = Some(worker.stats().clone());
        let w = Watch::start(Duration::from_millis(1), persisted(worker.stats().clone()));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let start = Instant::now();
        let handle = tokio::spawn(worker.run_until(async {
            let _ = rx.await;
        }));
        match w.until(accepted as u64, timeout).await {
            (Some(done), moved) => {
                drain = Some((accepted as u64, (done - start).as_secs_f64()));
                first_write = moved.map(|(n, m)| (n, (m - start).as_secs_f64()));
            }
            (None, _) => drained = false,
        }
        let _ = tx.send(());
        let _ = handle.await;
    }

    // Invariants.
    let db_orders = db_orders(&t.db, voucher).await?;
    let db_stock = db_stock(&t.db, voucher).await?;
    let redis_stock = if mode == SeckillMode::Async {
        let shard = Keys::seckill_shard(voucher, t.shards);
        let mut conn = redis::Client::open(cli.redis_url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        let key = t.keys.seckill_voucher(shard, voucher);
        let hash = hmdp::testing::seckill::voucher_hash::VoucherHash::read(&key, &mut conn).await?;
        Some(hash.stock.unwrap_or(i64::MIN))
    } else {
        None
    };
    let mut checks = check_sale(&SaleState {
        stock: args.stock,
        users: users.len() as i64,
        db_orders,
        db_stock,
        redis_stock,
        returned,
    });
    checks.insert(
        0,
        crate::check::Check {
            name: "every accepted order written".into(),
            ok: drained,
            detail: match mode {
                SeckillMode::Async => format!(
                    "{accepted} accepted, drained by the order worker (timeout {}s)",
                    args.drain_timeout
                ),
                SeckillMode::Sync => format!("{accepted} accepted, written before answering"),
            },
        },
    );
    for c in &mut checks {
        c.name = format!("{name}: {}", c.name);
    }
    report.checks.extend(checks);

    // The raw INSERT baseline runs on the same database the worker wrote to, after the load.
    if insert_baseline.is_none() && !args.no_baselines {
        *insert_baseline = Some(
            raw_insert(
                &t.db,
                args.insert_batch,
                Duration::from_secs(cli.seconds.clamp(1, 5)),
            )
            .await?,
        );
    }
    // The HTTP floor, after the sale, on the same server and connection count: what a request
    // costs with no flash-sale work at all (a 404 from the router: no Redis, no database), and
    // with only the session lookup that every grab starts with (`GET /user/me`: one Redis round
    // trip). The grab cannot be faster than these; they show where its time goes.
    let mut floors = Vec::new();
    if mode == SeckillMode::Async && !args.no_baselines {
        let secs = Duration::from_secs(cli.seconds.clamp(1, 5));
        let none: Arc<dyn Fn(u64) -> Req + Send + Sync> =
            Arc::new(|_| Req::get("/api/no-such-route"));
        let u3 = users.clone();
        let me: Arc<dyn Fn(u64) -> Req + Send + Sync> = Arc::new(move |i: u64| {
            let u = &u3[pick_user(i, n) as usize];
            Req::get("/api/user/me").header("authorization", &u.token)
        });
        for (what, make) in [
            ("HTTP floor: unknown route, 404 envelope (no Redis)", none),
            ("HTTP floor: GET /user/me (the session read alone)", me),
        ] {
            let o = request_phase(
                what,
                t.addr,
                cli.connections,
                Stop::After(secs),
                false,
                make,
            )
            .await?;
            floors.push((what.to_owned(), o));
        }
    }
    if let Some(s) = t.server {
        s.stop().await;
    }
    let lag = worker_stats.as_deref().and_then(lag_row);
    let worker_note = match (&worker_stats, drain) {
        (Some(w), Some((orders, secs))) => Some(worker_note(w, orders, secs, first_write)),
        _ => None,
    };
    Ok(ModeResult {
        worker_note,
        lag,
        mode,
        load,
        accepted,
        drain,
        floors,
    })
}

pub async fn run(cli: &Cli, args: &SeckillArgs) -> anyhow::Result<Report> {
    let c = cli.connections;
    let duration = Duration::from_secs(cli.seconds);
    let mut report = Report::new("seckill", c);
    let modes: Vec<SeckillMode> = match (args.mode, &cli.url) {
        (ModeArg::Sync, _) => vec![SeckillMode::Sync],
        (ModeArg::Async, _) | (ModeArg::Both, Some(_)) => vec![SeckillMode::Async],
        (ModeArg::Both, None) => vec![SeckillMode::Async, SeckillMode::Sync],
    };
    let users = args.users as u64;

    // Raw Redis baselines first, on their own keys.
    let mut raw_plain = None;
    let mut raw_piped = None;
    if !args.no_baselines {
        raw_plain = Some(raw_grab(&cli.redis_url, c, 1, duration, args.stock, users).await?);
        raw_piped = Some(
            raw_grab(
                &cli.redis_url,
                c,
                args.pipeline,
                duration,
                args.stock,
                users,
            )
            .await?,
        );
    }

    // What the worker's per-order pending-key deletes cost per batch (measured before the
    // load, on an idle runtime, so it is the round-trip cost alone).
    let del_cost = if args.no_baselines {
        None
    } else {
        Some(raw_pending_del(cli, args).await?)
    };

    let mut insert = None;
    let mut results = Vec::new();
    for mode in modes {
        results.push(run_mode(cli, args, mode, &mut report, &mut insert).await?);
    }

    if let Some(o) = &raw_plain {
        report.rows.push(Row::from_outcome(
            &format!("raw Redis GRAB script, {c} conns, unpipelined"),
            o,
        ));
    }
    if let Some(o) = &raw_piped {
        report.rows.push(Row::from_outcome(
            &format!(
                "raw Redis GRAB script, {} conns × pipeline {}",
                (c / args.pipeline.max(1)).max(1),
                args.pipeline
            ),
            o,
        ));
    }
    for r in &results {
        let name = run_name(r.mode, args.transport);
        report.rows.push(
            Row::from_outcome(&format!("POST /voucher-order/seckill ({name})"), &r.load)
                .note(format!(
                    "{} accepted, {} users, stock {}",
                    r.accepted, args.users, args.stock
                ))
                .charted(),
        );
        if let Some((orders, secs)) = r.drain {
            let how = match (args.drain, &cli.url) {
                (Drain::Backlog, None) => "backlog, worker started after the load",
                _ => "live: sale start → last order written",
            };
            let mut row = Row::figure(
                &format!("order drain into the database ({how})"),
                orders,
                secs,
            );
            if let Some(n) = &r.worker_note {
                row = row.note(n.clone());
            }
            report.rows.push(row);
        }
        if let Some(lag) = &r.lag {
            report.rows.push(lag.clone());
        }
        for (what, o) in &r.floors {
            report.rows.push(Row::from_outcome(what, o).note(format!(
                "the grab reaches {:.0} % of this rate",
                r.load.rate() / o.rate().max(1e-9) * 100.0
            )));
        }
    }
    if let Some((seq, piped)) = del_cost {
        report.rows.push(
            Row::figure(
                &format!(
                    "{} pending-key DELs, awaited one at a time",
                    args.insert_batch
                ),
                args.insert_batch as u64,
                seq,
            )
            .note(format!(
                "{:.2} ms per batch one at a time (the worker's first ack) vs {:.2} ms in one round trip (its ack now)",
                seq * 1e3,
                piped * 1e3
            )),
        );
    }
    if let Some(o) = &insert {
        report.rows.push(
            Row::from_outcome(
                &format!("raw batched INSERT rows ({} per tx)", args.insert_batch),
                o,
            )
            .note("rate is rows/s; latency is per batch transaction"),
        );
    }

    // Ratios and goals.
    let backend = match results.first() {
        Some(_) => match Database::from_flag(cli.database_url.as_deref()) {
            Database::MySql(_) => "MariaDB",
            Database::Sqlite if cli.url.is_some() => "the server's database",
            Database::Sqlite => "SQLite",
        },
        None => "",
    };
    let async_r = results.iter().find(|r| r.mode == SeckillMode::Async);
    let sync_r = results.iter().find(|r| r.mode == SeckillMode::Sync);
    if let (Some(a), Some(s)) = (async_r, sync_r) {
        report.summary.push(format!(
            "async vs sync seckill, same run: {:.2}× the requests/s ({:.0} vs {:.0})",
            a.load.rate() / s.load.rate().max(1e-9),
            a.load.rate(),
            s.load.rate()
        ));
    }
    if let Some(a) = async_r {
        let p99 = a.load.latency.value_at_quantile(0.99) as f64 / 1000.0;
        if let Some(raw) = &raw_plain {
            report.summary.push(format!(
                "async seckill vs raw unpipelined EVALSHA ({c} connections): {:.2}×",
                a.load.rate() / raw.rate()
            ));
        }
        if let Some(raw) = &raw_piped {
            let ratio = a.load.rate() / raw.rate();
            report.summary.push(format!(
                "async seckill vs raw pipelined EVALSHA (pipelines of {}): {ratio:.2}×",
                args.pipeline
            ));
            report.goals.push(Goal::new(
                "async seckill ≥ 50 % of raw pipelined EVALSHA of the same script",
                format!(
                    "{:.0} req/s vs {:.0} scripts/s = {:.0} %",
                    a.load.rate(),
                    raw.rate(),
                    ratio * 100.0
                ),
                ratio >= 0.5,
            ));
        }
        report.goals.push(Goal::new(
            format!("async seckill p99 < 25 ms at {c} connections (goal is stated for 256)"),
            format!("p99 {p99:.2} ms"),
            p99 < 25.0,
        ));
        if let (Some((orders, secs)), Some(ins)) = (a.drain, &insert) {
            let rate = orders as f64 / secs.max(1e-9);
            let ratio = rate / ins.rate();
            report.summary.push(format!(
                "order drain vs raw batched INSERT into {backend}: {ratio:.2}× ({rate:.0} vs {:.0} rows/s)",
                ins.rate()
            ));
            report.goals.push(Goal::new(
                format!("order drain ≥ 30 % of raw batched INSERT rows/s ({backend})"),
                format!(
                    "{rate:.0} vs {:.0} rows/s = {:.0} %",
                    ins.rate(),
                    ratio * 100.0
                ),
                ratio >= 0.3,
            ));
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_their_bucket_as_prometheus_does() {
        // 10 in (0, 1], 30 in (1, 2], 60 in (2, 4]; nothing above.
        let b = [
            (1.0, 10.0),
            (2.0, 40.0),
            (4.0, 100.0),
            (f64::INFINITY, 100.0),
        ];
        assert_eq!(histogram_quantile(&b, 0.05), 0.5);
        assert_eq!(histogram_quantile(&b, 0.25), 1.5);
        assert_eq!(histogram_quantile(&b, 0.7), 3.0);
        assert_eq!(histogram_quantile(&b, 1.0), 4.0);
        // Ranks in the +Inf bucket answer the highest finite bound.
        let over = [(1.0, 1.0), (f64::INFINITY, 2.0)];
        assert_eq!(histogram_quantile(&over, 0.99), 1.0);
        assert!(histogram_quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn first_time_a_count_was_reached() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let seen = [(10, at(1)), (150, at(5)), (200, at(9)), (230, at(12))];
        assert_eq!(first_reached(&seen, 200), Some(at(9)));
        assert_eq!(first_reached(&seen, 151), Some(at(9)));
        assert_eq!(first_reached(&seen, 5), Some(at(1)));
        assert_eq!(first_reached(&seen, 231), None);
    }
}
