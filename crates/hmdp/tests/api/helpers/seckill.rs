//! Flash-sale steps several test modules share: create a sale, log a crowd in, grab, read
//! orders and stock back from the database and Redis, run an order worker by hand.

use std::{collections::HashSet, sync::Arc, time::Duration};

use hmdp::{
    config::{Config, SeckillMode},
    testing::{
        FlashSale, domain::VoucherId, seckill::SaleCheck, seckill::voucher_hash::VoucherHash,
    },
};
use hmdp_testkit::redis_url;

use super::{
    ADMIN_TOKEN, Backend, Patience, TestApp, spawn_app_with, spawn_app_with_rabbitmq, wait_until,
};

/// How a sale test's service decides and moves orders: the database (`sync`), or the script
/// with the order stream drained by the worker, or relayed through RabbitMQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SalePath {
    Sync,
    Stream,
    RabbitMq,
}

/// The service on `backend` taking the `path`, with `adjust` applied after.
pub async fn spawn_on_path(
    backend: Backend,
    path: SalePath,
    adjust: impl FnOnce(&mut Config),
) -> TestApp {
    let mode = match path {
        SalePath::Sync => SeckillMode::Sync,
        SalePath::Stream | SalePath::RabbitMq => SeckillMode::Async,
    };
    let adjust = |c: &mut Config| {
        c.seckill.mode = mode;
        adjust(c)
    };
    match path {
        SalePath::RabbitMq => spawn_app_with_rabbitmq(backend, adjust).await,
        _ => spawn_app_with(backend, adjust).await,
    }
}

/// `hmdp reconcile` of one voucher, checking only: what it found.
pub async fn reconcile_one(app: &TestApp, voucher: i64) -> SaleCheck {
    let id = VoucherId::new(voucher).unwrap();
    let mut checks = app.state.seckill.reconcile(Some(id), false).await.unwrap();
    checks.remove(0)
}

/// Creates a flash-sale voucher on shop 1 whose sale runs from `begin` to `end` seconds from now.
pub async fn create_sale(app: &TestApp, stock: i64, begin: i64, end: i64) -> i64 {
    FlashSale::new(stock)
        .sub_title("测试")
        .rules("每人一张")
        .values(990, 5000)
        .from_now(begin, end)
        .create(&app.client, &app.url(""), ADMIN_TOKEN)
        .await
        .unwrap()
}

/// `n` distinct users logged in through the real API, `concurrency` at a time.
pub async fn login_many(app: &Arc<TestApp>, n: usize) -> Vec<String> {
    let sem = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = Vec::new();
    for i in 0..n {
        let (app, sem) = (app.clone(), sem.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = sem.acquire().await.unwrap();
            app.login(&format!("1390{:07}", i)).await
        }));
    }
    let mut tokens = Vec::new();
    for t in tasks {
        tokens.push(t.await.unwrap());
    }
    tokens
}

/// The raw answer text of a grab (order ids exceed what f64 holds, so no JSON numbers here).
pub async fn grab_raw(app: &TestApp, voucher: i64, token: &str) -> (u16, String) {
    let r = app
        .client
        .post(app.url(&format!("/api/voucher-order/seckill/{voucher}")))
        .header("authorization", token)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

pub fn order_id_of(body: &str) -> Option<i64> {
    body.strip_prefix("{\"success\":true,\"data\":")?
        .strip_suffix('}')?
        .parse()
        .ok()
}

/// The order a `duplicate_order` refusal names (its `data.idStr`), if it names one.
pub fn prior_order_of(body: &str) -> Option<i64> {
    serde_json::from_str::<serde_json::Value>(body).unwrap()["data"]["idStr"]
        .as_str()?
        .parse()
        .ok()
}

pub fn code_of(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body).unwrap()["code"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// `tb_seckill_voucher.stock` of `voucher`.
pub async fn db_stock(app: &TestApp, voucher: i64) -> i64 {
    db_count(
        app,
        "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?",
        voucher,
    )
    .await
}

/// How many distinct users hold an order of `voucher`.
pub async fn db_buyers(app: &TestApp, voucher: i64) -> i64 {
    db_count(
        app,
        "SELECT COUNT(DISTINCT user_id) FROM tb_voucher_order WHERE voucher_id = ?",
        voucher,
    )
    .await
}

pub async fn db_count(app: &TestApp, sql: &str, voucher: i64) -> i64 {
    match &app.state.db {
        hmdp::testing::storage::Db::Sqlite(p) => sqlx::query_scalar(sql)
            .bind(voucher)
            .fetch_one(p)
            .await
            .unwrap(),
        hmdp::testing::storage::Db::MySql(p) => sqlx::query_scalar(sql)
            .bind(voucher)
            .fetch_one(p)
            .await
            .unwrap(),
    }
}

pub async fn db_order_ids(app: &TestApp, voucher: i64) -> Vec<i64> {
    let sql = "SELECT id FROM tb_voucher_order WHERE voucher_id = ?";
    match &app.state.db {
        hmdp::testing::storage::Db::Sqlite(p) => sqlx::query_scalar(sql)
            .bind(voucher)
            .fetch_all(p)
            .await
            .unwrap(),
        hmdp::testing::storage::Db::MySql(p) => sqlx::query_scalar(sql)
            .bind(voucher)
            .fetch_all(p)
            .await
            .unwrap(),
    }
}

/// Waits until the database holds `n` orders of the voucher (the worker drains the stream).
pub async fn wait_for_orders(app: &TestApp, voucher: i64, n: i64) {
    // Generous: a drain after a broker or Redis restart shares two cores with the suite (on
    // RabbitMQ each order is two confirmed quorum-queue messages: the order and its deadline).
    let patience = Patience::new(Duration::from_secs(180)).every(Duration::from_millis(100));
    let what = format!("{n} orders of voucher {voucher} written");
    let have = wait_until(patience, &what, async || {
        let sql = "SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ?";
        match db_count(app, sql, voucher).await {
            have if have >= n => Ok(have),
            have => Err(format!("only {have} of {n} orders written")),
        }
    })
    .await;
    assert_eq!(have, n, "more orders than expected");
}

/// Redis loses the voucher's hash and buyer set (the order stream survives).
pub async fn lose_voucher(app: &TestApp, voucher: i64) {
    let _: () = redis::AsyncCommands::del(
        &mut app.redis().await,
        &[
            app.state.keys.seckill_voucher(0, voucher),
            app.state.keys.seckill_buyers(0, voucher),
        ],
    )
    .await
    .unwrap();
}

pub async fn redis_stock(app: &TestApp, voucher: i64) -> Option<i64> {
    // Through the service's own connection: some tests run it on a private Redis.
    let key = app.state.keys.seckill_voucher(0, voucher);
    VoucherHash::read(&key, &mut app.state.redis.clone())
        .await
        .unwrap()
        .stock
}

/// Asserts that exactly the accepted orders are stored, without dumping thousands of ids.
pub fn assert_same_orders(stored: &HashSet<i64>, accepted: &HashSet<i64>) {
    let missing: Vec<_> = accepted.difference(stored).take(5).collect();
    let extra: Vec<_> = stored.difference(accepted).take(5).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{} accepted, {} stored; missing e.g. {missing:?}; not accepted but stored e.g. {extra:?}",
        accepted.len(),
        stored.len()
    );
}

/// A lock client on the app's Redis and key prefix, as the service builds its own (without
/// the pub/sub wake-ups: a waiting lock polls).
pub fn locks_of(app: &TestApp) -> hmdp_lock::LockClient<hmdp::testing::kv::RedisConn> {
    let s = &app.state;
    hmdp_lock::LockClient::builder(s.redis.clone())
        .key_prefix(s.keys.prefix())
        .build()
        .unwrap()
}

pub fn worker_for(app: &TestApp, consumer: &str) -> hmdp::testing::worker::OrderWorker {
    let s = &app.state;
    let mut settings = s.config.seckill.clone();
    settings.claim_idle = Duration::from_millis(300);
    settings.batch = 7;
    hmdp::testing::worker::OrderWorker::new(
        s.db.clone(),
        s.redis.clone(),
        s.config.redis_url_or_default().to_owned(),
        s.keys.clone(),
        settings,
        Some(consumer.to_owned()),
    )
}

/// Runs the worker's steps until the stream has nothing more for it.
pub async fn drain(worker: &hmdp::testing::worker::OrderWorker) {
    worker.ensure_group(0).await.unwrap();
    let mut reader = hmdp::testing::kv::RedisConn::connect(&redis_url())
        .await
        .unwrap();
    while worker.step_pending(0, &mut reader).await.unwrap() != hmdp::testing::worker::Step::Idle {}
    while worker
        .step_new(0, &mut reader, Duration::from_millis(50))
        .await
        .unwrap()
        != hmdp::testing::worker::Step::Idle
    {}
}

/// Starts a worker process with `spawn`, kills it (SIGKILL) as soon as an order of `voucher`
/// is in the database, starts another, waits until all `orders` are written and stops that one
/// with SIGTERM (it must exit cleanly). Then exactly the `accepted` orders are stored and the
/// stock is consistent. Returns how many orders were written when the first one died.
pub async fn kill_a_worker_process_mid_drain(
    app: &TestApp,
    voucher: i64,
    accepted: &HashSet<i64>,
    spawn: impl Fn() -> std::process::Child,
) -> usize {
    let mut first = spawn();
    // Asked often: the kill must land while the drain is still going on.
    let first_order = Patience::new(Duration::from_secs(30)).every(Duration::from_millis(2));
    wait_until(first_order, "the worker process writing", async || {
        !db_order_ids(app, voucher).await.is_empty()
    })
    .await;
    first.kill().unwrap();
    first.wait().unwrap();
    let after_kill = db_order_ids(app, voucher).await.len();
    eprintln!(
        "worker process killed after {after_kill} of {} orders were written",
        accepted.len()
    );
    assert!(after_kill < accepted.len(), "killed mid-drain");

    let mut second = spawn();
    wait_for_orders(app, voucher, accepted.len() as i64).await;
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(second.id() as i32, libc::SIGTERM) };
    assert!(second.wait().unwrap().success(), "graceful stop on SIGTERM");
    let stored: HashSet<i64> = db_order_ids(app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, accepted);
    assert_eq!(db_stock(app, voucher).await, 0);
    after_kill
}

/// `hmdp worker` (run in this process) on a configuration's Redis and database, its `/metrics`
/// and `/health` on a free port at `base`. Aborted if dropped without [`WorkerProcess::stop`].
pub struct WorkerProcess {
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl WorkerProcess {
    pub async fn start(config: hmdp::config::Config) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(hmdp::testing::startup::run_worker_with(
            config,
            Some(listener),
            async {
                let _ = stopped.await;
            },
        ));
        Self {
            base,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Sends the shutdown signal and waits for the worker to finish.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let task = self.task.take().unwrap();
        tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("the worker stops on the signal")
            .unwrap()
            .unwrap();
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
