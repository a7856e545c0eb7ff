//! The order pipeline under the faults a review found: transient database errors, bursts of
//! failures, a changed shard count, dead letters and warm-ups, lost buyer sets, colliding
//! orders, incomplete voucher hashes, a crash between commit and acknowledgement, and the
//! worker's housekeeping (claim cursor, idle consumers).

use std::{
    collections::HashSet,
    sync::{Arc, atomic::Ordering::SeqCst},
    time::{Duration, Instant},
};

use hmdp::testing::{
    domain::{OrderId, UserId, VoucherId},
    seckill::{
        SeckillError, ShardCountMismatch,
        voucher_hash::{FIELD_BEGIN, FIELD_END, FIELD_STOCK},
    },
    storage::{
        Db,
        orders::{self, NewOrder},
    },
    worker::{GROUP, OrderWorker, Step, WorkerError},
};
use sqlx::{Connection, Executor};

use crate::helpers::{
    Backend, Patience, TestApp, WorkerProcess, assert_same_orders, code_of, create_sale, db_buyers,
    db_count, db_order_ids, db_stock, drain, grab_raw, locks_of, login_many, lose_voucher,
    order_id_of, prior_order_of, redis_stock, redis_url, spawn_app_with, wait_for_orders,
    wait_until, worker_for,
};

/// Runs one statement with integer parameters on the test's database.
async fn exec(app: &TestApp, sql: &str, args: &[i64]) {
    match &app.state.db {
        Db::Sqlite(p) => {
            let mut q = sqlx::query(sql);
            for a in args {
                q = q.bind(*a);
            }
            q.execute(p).await.unwrap();
        }
        Db::MySql(p) => {
            let mut q = sqlx::query(sql);
            for a in args {
                q = q.bind(*a);
            }
            q.execute(p).await.unwrap();
        }
    }
}

/// A worker with its own settings and database.
fn worker_with(
    app: &TestApp,
    db: Db,
    consumer: &str,
    adjust: impl FnOnce(&mut hmdp::config::SeckillSettings),
) -> OrderWorker {
    let s = &app.state;
    let mut settings = s.config.seckill.clone();
    adjust(&mut settings);
    OrderWorker::new(
        db,
        s.redis.clone(),
        redis_url(),
        s.keys.clone(),
        settings,
        Some(consumer.to_owned()),
    )
}

/// A MariaDB pool whose row-lock waits give up after one second (the minimum).
fn impatient_db(app: &TestApp) -> Db {
    Db::MySql(
        sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(2)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    conn.execute("SET SESSION innodb_lock_wait_timeout = 1")
                        .await?;
                    Ok(())
                })
            })
            .connect_lazy(&app.state.config.database_url)
            .unwrap(),
    )
}

async fn reader() -> hmdp::testing::kv::RedisConn {
    hmdp::testing::kv::RedisConn::connect(&redis_url())
        .await
        .unwrap()
}

/// Buys one voucher per token; the order ids.
async fn grab_all(app: &TestApp, voucher: i64, tokens: &[String]) -> Vec<i64> {
    let mut ids = Vec::new();
    for t in tokens {
        let body = grab_raw(app, voucher, t).await.1;
        ids.push(order_id_of(&body).unwrap_or_else(|| panic!("accepted: {body}")));
    }
    ids
}

async fn state_of(app: &TestApp, order: i64, token: &str) -> String {
    let r = app
        .get(&format!("/api/voucher-order/{order}"), Some(token))
        .await;
    r.body["data"]["state"]
        .as_str()
        .unwrap_or_else(|| panic!("no state: {r:?}"))
        .to_owned()
}

async fn xlen(app: &TestApp, key: &str) -> i64 {
    redis::AsyncCommands::xlen(&mut app.redis().await, format!("{}{key}", app.prefix))
        .await
        .unwrap()
}

/// Trims the whole order stream (every entry in it is written or dead-lettered).
async fn trim_all(app: &TestApp) {
    let _: i64 = redis::cmd("XTRIM")
        .arg(format!("{}seckill:{{s0}}:orders", app.prefix))
        .arg("MAXLEN")
        .arg(0)
        .query_async(&mut app.redis().await)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_wait_timeout_is_waited_out_not_dead_lettered() {
    let (app, tokens) = app_with_users(Backend::MySql, 3, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let won: HashSet<i64> = grab_all(&app, voucher, &tokens).await.into_iter().collect();

    // Another session holds the voucher's stock row, so the worker's stock update waits for
    // its lock and gives up after a second (MariaDB error 1205).
    let mut holder = sqlx::MySqlConnection::connect(&app.state.config.database_url)
        .await
        .unwrap();
    let mut tx = holder.begin().await.unwrap();
    let _: i64 = sqlx::query_scalar(
        "SELECT CAST(stock AS SIGNED) FROM tb_seckill_voucher WHERE voucher_id = ? FOR UPDATE",
    )
    .bind(voucher)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    // One failure would be enough to dead-letter an order if a lock wait counted as one.
    let (handle, stats) = spawn_impatient_worker(&app, impatient_db(&app));
    wait_until(
        Duration::from_secs(20),
        "the worker never met the lock",
        async || stats.db_outages.get() >= 2,
    )
    .await;
    assert!(db_order_ids(&app, voucher).await.is_empty());
    tx.rollback().await.unwrap();

    wait_for_orders(&app, voucher, 3).await;
    handle.abort();
    assert_eq!(
        stats.dead_lettered.get(),
        0,
        "a lock wait is not a poison order"
    );
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, &won);
    let stock = db_stock(&app, voucher).await;
    assert_eq!(stock, 2);
}

/// A worker on `db` impatient enough that one failed delivery would dead-letter an order,
/// running for at most a minute; its handle and counters.
fn spawn_impatient_worker(
    app: &TestApp,
    db: Db,
) -> (
    tokio::task::JoinHandle<()>,
    std::sync::Arc<hmdp::testing::worker::WorkerStats>,
) {
    let worker = worker_with(app, db, "w", |s| {
        s.max_deliveries = 1;
        s.claim_idle = Duration::from_millis(300);
    })
    .with_dead_letter_after(Duration::ZERO);
    let stats = worker.stats().clone();
    // A minute at most: a bound on the worker's life, not a wait.
    let handle = tokio::spawn(
        worker
            .clone()
            .run_until(tokio::time::sleep(Duration::from_secs(60))),
    );
    (handle, stats)
}

/// The database refuses every write (`refuse`) while a worker on `worker_db` meets three
/// orders, impatient enough that one failure would dead-letter an order: it must wait instead,
/// the buyers see `pending`, and once the database takes writes again (`allow`) every order is
/// written and none is a dead letter.
async fn orders_wait_out_a_refusing_database(
    app: &TestApp,
    tokens: &[String],
    worker_db: Db,
    refuse: impl AsyncFnOnce(),
    allow: impl AsyncFnOnce(),
) {
    let voucher = create_sale(app, 5, -60, 3600).await;
    let ids = grab_all(app, voucher, tokens).await;
    refuse().await;
    let (handle, stats) = spawn_impatient_worker(app, worker_db);
    wait_until(
        Duration::from_secs(20),
        "the worker never met the refusal",
        async || stats.db_outages.get() >= 2 || stats.dead_lettered.get() > 0,
    )
    .await;
    assert_eq!(
        stats.dead_lettered.get(),
        0,
        "a database refusing every write is an outage, not a poison order"
    );
    assert!(db_order_ids(app, voucher).await.is_empty());
    for (id, token) in ids.iter().zip(tokens) {
        assert_eq!(state_of(app, *id, token).await, "pending");
    }
    allow().await;
    wait_for_orders(app, voucher, ids.len() as i64).await;
    handle.abort();
    assert_eq!(stats.dead_lettered.get(), 0);
    assert_eq!(xlen(app, "seckill:{s0}:orders:dead").await, 0);
    for (id, token) in ids.iter().zip(tokens) {
        assert_eq!(state_of(app, *id, token).await, "created");
    }
    assert_eq!(db_stock(app, voucher).await, 5 - ids.len() as i64);
}

/// SQLite answers `SQLITE_READONLY` (the error of a read-only file): as root the tests ignore
/// file modes, and a file already open stays writable anyway, so the worker's one connection is
/// made read-only with `PRAGMA query_only`, which yields the same error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_sqlite_database_holds_the_orders() {
    let (app, tokens) = app_with_users(Backend::Sqlite, 3, |c| c.seckill.worker = false).await;
    let pool = one_sqlite_connection(&app).await;
    let pragma = async |sql: &str| {
        sqlx::query(sql).execute(&pool).await.unwrap();
    };
    orders_wait_out_a_refusing_database(
        &app,
        &tokens,
        Db::Sqlite(pool.clone()),
        async || pragma("PRAGMA query_only = ON").await,
        async || pragma("PRAGMA query_only = OFF").await,
    )
    .await;
}

/// A pool of one connection to the test's SQLite file (for `PRAGMA query_only`).
async fn one_sqlite_connection(app: &TestApp) -> sqlx::SqlitePool {
    let url = app.state.config.database_url.clone();
    sqlx::sqlite::SqlitePoolOptions::new()
        .min_connections(1)
        .max_connections(1)
        .connect_with(
            url.parse::<sqlx::sqlite::SqliteConnectOptions>()
                .unwrap()
                .busy_timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap()
}

/// Milliseconds an order's status record has left (negative: none, or no expiry).
async fn pending_ttl(app: &TestApp, order: i64) -> i64 {
    redis::cmd("PTTL")
        .arg(app.state.keys.seckill_pending(order))
        .query_async(&mut app.redis().await)
        .await
        .unwrap()
}

/// An outage outlasting the status records (a day): while the worker holds the orders it
/// renews their records, so their buyers keep seeing `pending`, not `order_not_found`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_held_through_a_long_outage_keep_their_status() {
    let (app, tokens) = app_with_users(Backend::Sqlite, 2, |c| c.seckill.worker = false).await;
    let pool = one_sqlite_connection(&app).await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let ids = grab_all(&app, voucher, &tokens).await;
    sqlx::query("PRAGMA query_only = ON")
        .execute(&pool)
        .await
        .unwrap();
    // The outage has lasted most of a day: the records are about to expire.
    for id in &ids {
        let _: i64 = redis::cmd("PEXPIRE")
            .arg(app.state.keys.seckill_pending(*id))
            .arg(3000)
            .query_async(&mut app.redis().await)
            .await
            .unwrap();
    }
    let worker = worker_with(&app, Db::Sqlite(pool.clone()), "w", |_| {})
        .with_status_refresh_every(Duration::from_millis(200));
    // A minute at most: a bound on the worker's life, not a wait.
    let handle = tokio::spawn(
        worker
            .clone()
            .run_until(tokio::time::sleep(Duration::from_secs(60))),
    );
    for id in &ids {
        wait_until(
            Duration::from_secs(20),
            "the status record of a held order was not renewed",
            async || pending_ttl(&app, *id).await > 60_000,
        )
        .await;
    }
    assert!(worker.stats().db_outages.get() >= 1);
    assert!(db_order_ids(&app, voucher).await.is_empty());
    for (id, token) in ids.iter().zip(&tokens) {
        assert_eq!(state_of(&app, *id, token).await, "pending");
    }
    sqlx::query("PRAGMA query_only = OFF")
        .execute(&pool)
        .await
        .unwrap();
    wait_for_orders(&app, voucher, ids.len() as i64).await;
    handle.abort();
    for (id, token) in ids.iter().zip(&tokens) {
        assert_eq!(state_of(&app, *id, token).await, "created");
    }
}

/// The worker connects as a user of its own, bound by the server's `read_only` (MariaDB error
/// 1290), which is on for as short a window as the test allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_mariadb_holds_the_orders() {
    let (app, tokens) = app_with_users(Backend::MySql, 3, |c| c.seckill.worker = false).await;
    let user = crate::helpers::DatabaseUser::create(&app.state.config.database_url).await;
    let worker_db = Db::connect(&user.url, 2).await.unwrap();
    let read_only = std::sync::Mutex::new(None);
    orders_wait_out_a_refusing_database(
        &app,
        &tokens,
        worker_db,
        async || {
            let on = crate::helpers::ReadOnlyServer::on().await;
            *read_only.lock().unwrap() = Some(on);
        },
        async || drop(read_only.lock().unwrap().take()),
    )
    .await;
}

/// A full table (MariaDB error 1114, what InnoDB answers when its tablespace cannot grow): the
/// order table is swapped for an in-memory one of 16 KiB, filled with others' orders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_mariadb_table_holds_the_orders() {
    let (app, tokens) = app_with_users(Backend::MySql, 3, |c| c.seckill.worker = false).await;
    let url = app.state.config.database_url.clone();
    orders_wait_out_a_refusing_database(
        &app,
        &tokens,
        app.state.db.clone(),
        async || {
            let mut conn = sqlx::MySqlConnection::connect(&url).await.unwrap();
            conn.execute("SET SESSION max_heap_table_size = 16384")
                .await
                .unwrap();
            conn.execute("ALTER TABLE tb_voucher_order ENGINE = MEMORY")
                .await
                .unwrap();
            for i in 1.. {
                let r = sqlx::query(
                    "INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (?, ?, 999999)",
                )
                .bind(i)
                .bind(i)
                .execute(&mut conn)
                .await;
                match r {
                    Ok(_) => assert!(i < 100_000, "the table never filled"),
                    Err(sqlx::Error::Database(e))
                        if e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                            .is_some_and(|m| m.number() == 1114) =>
                    {
                        break;
                    }
                    Err(e) => panic!("filling the table: {e}"),
                }
            }
        },
        async || {
            let mut conn = sqlx::MySqlConnection::connect(&url).await.unwrap();
            conn.execute("ALTER TABLE tb_voucher_order ENGINE = InnoDB")
                .await
                .unwrap();
        },
    )
    .await;
}

/// Logs in `n` users on a fresh app; the app back and the tokens.
async fn app_with_users(
    backend: Backend,
    n: usize,
    adjust: impl FnOnce(&mut hmdp::Config),
) -> (TestApp, Vec<String>) {
    let app = Arc::new(spawn_app_with(backend, adjust).await);
    let tokens = login_many(&app, n).await;
    let app = Arc::try_unwrap(app).unwrap_or_else(|_| panic!("the app is not shared"));
    (app, tokens)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_through_an_outage_do_not_count_against_an_order() {
    let (app, tokens) = app_with_users(Backend::MySql, 3, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    grab_all(&app, voucher, &tokens).await;
    // The stock row is locked (the worker's writes time out), and its stock will be zero when
    // the lock goes: then every write is refused for good.
    let mut holder = sqlx::MySqlConnection::connect(&app.state.config.database_url)
        .await
        .unwrap();
    let mut tx = holder.begin().await.unwrap();
    sqlx::query("UPDATE tb_seckill_voucher SET stock = 0 WHERE voucher_id = ?")
        .bind(voucher)
        .execute(&mut *tx)
        .await
        .unwrap();
    let worker = worker_with(&app, impatient_db(&app), "w", |s| s.max_deliveries = 2)
        .with_dead_letter_after(Duration::ZERO);
    worker.ensure_group(0).await.unwrap();
    let mut reader = reader().await;
    let r = worker
        .step_new(0, &mut reader, Duration::from_millis(50))
        .await;
    assert!(
        matches!(r, Err(WorkerError::Stalled { ref entries, .. }) if entries.len() == 3),
        "{r:?}"
    );
    // Two more deliveries during the outage (a restarted worker re-reads its pending list).
    for _ in 0..2 {
        let r = worker.step_pending(0, &mut reader).await;
        assert!(matches!(r, Err(WorkerError::Stalled { .. })), "{r:?}");
    }
    tx.commit().await.unwrap();
    // Delivered four times, failed once: not yet a dead letter.
    assert_eq!(
        worker.step_pending(0, &mut reader).await.unwrap(),
        Step::Wrote(3)
    );
    assert_eq!(worker.stats().dead_lettered.get(), 0);
    assert!(worker.stats().db_outages.get() >= 3);
    // The second real failure is the last one allowed.
    worker.step_pending(0, &mut reader).await.unwrap();
    assert_eq!(worker.stats().dead_lettered.get(), 3);
    assert_eq!(xlen(&app, "seckill:{s0}:orders:dead").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_failures_does_not_exhaust_an_orders_budget() {
    let (app, tokens) = app_with_users(Backend::Sqlite, 3, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let ids = grab_all(&app, voucher, &tokens).await;
    // The database's stock disagrees: every write is refused.
    exec(
        &app,
        "UPDATE tb_seckill_voucher SET stock = 0 WHERE voucher_id = ?",
        &[voucher],
    )
    .await;
    let worker = worker_with(&app, app.state.db.clone(), "w", |s| s.max_deliveries = 3)
        .with_dead_letter_after(Duration::from_millis(1500));
    worker.ensure_group(0).await.unwrap();
    let mut reader = reader().await;
    worker
        .step_new(0, &mut reader, Duration::from_millis(50))
        .await
        .unwrap();
    for _ in 0..6 {
        assert_eq!(
            worker.step_pending(0, &mut reader).await.unwrap(),
            Step::Wrote(3)
        );
    }
    assert_eq!(
        worker.stats().dead_lettered.get(),
        0,
        "seven failures within milliseconds are a burst, not a verdict"
    );
    assert_eq!(state_of(&app, ids[0], &tokens[0]).await, "pending");
    // Not a wait: the time that turns the burst into a verdict (1.5 s) passes.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    worker.step_pending(0, &mut reader).await.unwrap();
    assert_eq!(worker.stats().dead_lettered.get(), 3);
    assert_eq!(
        worker.step_pending(0, &mut reader).await.unwrap(),
        Step::Idle
    );
    // The buyers learn that their orders failed (not "pending" for a day).
    for (id, token) in ids.iter().zip(&tokens) {
        assert_eq!(state_of(&app, *id, token).await, "failed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_different_shard_count_is_refused_until_the_streams_are_drained() {
    let app = spawn_app_with(Backend::Sqlite, |c| c.seckill.worker = false).await;
    let s = &app.state;
    s.seckill.check_shards().await.unwrap();
    let key = format!("{}seckill:shards", app.prefix);
    let recorded: String = redis::AsyncCommands::get(&mut app.redis().await, &key)
        .await
        .unwrap();
    assert_eq!(recorded, "1");

    let mut config = (*s.config).clone();
    config.seckill.shards = 2;
    let other = hmdp::testing::seckill::Seckill::new(
        s.db.clone(),
        s.redis.clone(),
        s.keys.clone(),
        locks_of(&app),
        hmdp::testing::startup::order_id_generator(s.redis.clone(), &config).unwrap(),
        config.seckill.clone(),
    );
    let err = other.check_shards().await.unwrap_err();
    assert!(
        matches!(
            err,
            SeckillError::Shards(ShardCountMismatch {
                recorded: 1,
                configured: 2,
                ..
            })
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("HMDP_SECKILL_SHARDS=1") && msg.contains("drain"),
        "the error tells the operator what to do: {msg}"
    );
    // It takes no order…
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let r = other
        .grab(UserId::new(4242).unwrap(), VoucherId::new(voucher).unwrap())
        .await;
    assert!(matches!(r, Err(SeckillError::Shards(_))), "{r:?}");
    assert_eq!(xlen(&app, "seckill:{s0}:orders").await, 0);
    assert_eq!(xlen(&app, "seckill:{s1}:orders").await, 0);
    // …and its worker writes none.
    let worker = worker_with(&app, s.db.clone(), "w2", |s| s.shards = 2);
    assert!(worker.check_shards().await.is_err());
    // Not a wait: the worker gets 300 ms in which it must write nothing.
    worker
        .clone()
        .run_until(tokio::time::sleep(Duration::from_millis(300)))
        .await;
    let exists: bool = redis::AsyncCommands::exists(
        &mut app.redis().await,
        format!("{}seckill:{{s1}}:orders", app.prefix),
    )
    .await
    .unwrap();
    assert!(!exists, "no shard loop ran");

    // Drained, and the flash-sale keys deleted: the new count is taken.
    let mut redis = app.redis().await;
    let keys: Vec<String> =
        redis::AsyncCommands::keys(&mut redis, format!("{}seckill:*", app.prefix))
            .await
            .unwrap();
    let _: () = redis::AsyncCommands::del(&mut redis, keys).await.unwrap();
    other.check_shards().await.unwrap();
    assert!(
        s.seckill.check_shards().await.is_ok(),
        "checked once per process"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_order_shows_failed_and_keeps_its_stock_through_a_warm_up() {
    let (app, tokens) = app_with_users(Backend::Sqlite, 3, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let ids = grab_all(&app, voucher, &tokens[..2]).await;
    // The first order's id is taken in the database by an order of someone else: it can
    // never be written.
    exec(
        &app,
        "INSERT INTO tb_voucher_order (id, user_id, voucher_id, pay_type, status) VALUES (?, ?, ?, 1, 1)",
        &[ids[0], 999_999, voucher + 1000],
    )
    .await;
    let worker = worker_for(&app, "w");
    drain(&worker).await;
    assert_eq!(worker.stats().conflicts.get(), 1);
    assert_eq!(worker.stats().dead_lettered.get(), 1);
    assert_eq!(worker.stats().already_written.get(), 0);
    assert_eq!(state_of(&app, ids[0], &tokens[0]).await, "failed");
    assert_eq!(state_of(&app, ids[1], &tokens[1]).await, "created");

    // The order stream is trimmed, then Redis loses the voucher.
    trim_all(&app).await;
    lose_voucher(&app, voucher).await;
    // A new buyer's grab warms it up (the first buyer's would be answered from this instance's
    // memory). The warm-up remembers the dead-lettered order: its stock is not handed out
    // again (5 − one written − one dead − the new buyer's), and its buyer cannot buy again,
    // which the script says (the reload made the instance forget its buyers).
    assert!(order_id_of(&grab_raw(&app, voucher, &tokens[2]).await.1).is_some());
    assert_eq!(redis_stock(&app, voucher).await, Some(2));
    let remembered = app.state.seckill.stats().memory_duplicate.get();
    assert_eq!(
        code_of(&grab_raw(&app, voucher, &tokens[0]).await.1),
        "duplicate_order"
    );
    assert_eq!(app.state.seckill.stats().memory_duplicate.get(), remembered);
    assert_eq!(redis_stock(&app, voucher).await, Some(2));
}

/// An order's status record expires a day after the grab; the answer then comes from the
/// database (`created`) and from the orders given up on (`failed`), never `order_not_found`
/// for an order that `duplicate_order` names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_status_record_still_answers_created_or_failed() {
    let (app, tokens) = app_with_users(Backend::Sqlite, 2, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let ids = grab_all(&app, voucher, &tokens).await;
    // The first order's id is taken in the database: it is dead-lettered.
    exec(
        &app,
        "INSERT INTO tb_voucher_order (id, user_id, voucher_id, pay_type, status) VALUES (?, ?, ?, 1, 1)",
        &[ids[0], 999_999, voucher + 1000],
    )
    .await;
    let worker = worker_for(&app, "w");
    drain(&worker).await;
    assert_eq!(worker.stats().dead_lettered.get(), 1);

    // Both records expire.
    for id in &ids {
        let _: i64 = redis::cmd("DEL")
            .arg(app.state.keys.seckill_pending(*id))
            .query_async(&mut app.redis().await)
            .await
            .unwrap();
    }
    assert_eq!(state_of(&app, ids[0], &tokens[0]).await, "failed");
    assert_eq!(state_of(&app, ids[1], &tokens[1]).await, "created");
    let (_, body) = grab_raw(&app, voucher, &tokens[0]).await;
    assert_eq!(
        (code_of(&body).as_str(), prior_order_of(&body)),
        ("duplicate_order", Some(ids[0])),
        "{body}"
    );
    // Only to its owner.
    let r = app
        .get(&format!("/api/voucher-order/{}", ids[0]), Some(&tokens[1]))
        .await;
    assert_eq!(r.code(), "order_not_found", "{r:?}");
}

/// Orders dead-lettered before `seckill:failed` existed are copied into it when a worker
/// starts, once: their owners see `failed` after the records expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_from_before_the_failed_hash_are_copied_into_it_once() {
    let (app, tokens) = app_with_users(Backend::Sqlite, 2, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let ids = grab_all(&app, voucher, &tokens).await;
    exec(
        &app,
        "INSERT INTO tb_voucher_order (id, user_id, voucher_id, pay_type, status) VALUES (?, ?, ?, 1, 1)",
        &[ids[0], 999_999, voucher + 1000],
    )
    .await;
    drain(&worker_for(&app, "w")).await;
    assert_eq!(xlen(&app, "seckill:{s0}:orders:dead").await, 1);
    // As an older version left it: no `seckill:failed`, and the record has expired.
    let keys = &app.state.keys;
    let _: i64 = redis::cmd("DEL")
        .arg(keys.seckill_failed())
        .arg(keys.seckill_pending(ids[0]))
        .query_async(&mut app.redis().await)
        .await
        .unwrap();
    let status = async || {
        app.get(&format!("/api/voucher-order/{}", ids[0]), Some(&tokens[0]))
            .await
    };
    assert_eq!(status().await.code(), "order_not_found");

    let worker = worker_for(&app, "w2");
    // A minute at most: a bound on the worker's life, not a wait.
    let handle = tokio::spawn(
        worker
            .clone()
            .run_until(tokio::time::sleep(Duration::from_secs(60))),
    );
    wait_until(
        Duration::from_secs(20),
        "the dead letters were not copied into seckill:failed",
        async || status().await.body["data"]["state"] == "failed",
    )
    .await;
    let marker: Option<String> = redis::cmd("GET")
        .arg(keys.seckill_failed_backfilled())
        .query_async(&mut app.redis().await)
        .await
        .unwrap();
    assert_eq!(marker.as_deref(), Some("1"));
    handle.abort();

    // It ran once: a later start leaves the hash alone.
    let _: i64 = redis::cmd("DEL")
        .arg(keys.seckill_failed())
        .query_async(&mut app.redis().await)
        .await
        .unwrap();
    worker_for(&app, "w3").backfill_failed().await;
    assert_eq!(status().await.code(), "order_not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_buyer_set_is_rebuilt_before_anyone_buys_twice() {
    let (app, tokens) = app_with_users(Backend::Sqlite, 3, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    // One buyer's order is written (and trimmed from the stream), one still queued.
    grab_all(&app, voucher, &tokens[..1]).await;
    let worker = worker_for(&app, "w");
    drain(&worker).await;
    trim_all(&app).await;
    grab_all(&app, voucher, &tokens[1..2]).await;
    // Redis evicts the buyer set; the voucher's hash stays.
    let _: () = redis::AsyncCommands::del(
        &mut app.redis().await,
        app.state.keys.seckill_buyers(0, voucher),
    )
    .await
    .unwrap();
    // A new buyer's grab finds the set gone and waits for the rebuild (the two buyers' grabs
    // would be answered from this instance's memory, which the reload then clears).
    assert!(order_id_of(&grab_raw(&app, voucher, &tokens[2]).await.1).is_some());
    assert_eq!(app.state.seckill.stats().warm_ups.get(), 1);
    assert_eq!(redis_stock(&app, voucher).await, Some(2));
    let remembered = app.state.seckill.stats().memory_duplicate.get();
    for t in &tokens[..2] {
        assert_eq!(
            code_of(&grab_raw(&app, voucher, t).await.1),
            "duplicate_order"
        );
    }
    assert_eq!(
        app.state.seckill.stats().memory_duplicate.get(),
        remembered,
        "the script, from the rebuilt buyer set, refused them"
    );
    drain(&worker).await;
    assert_eq!(db_order_ids(&app, voucher).await.len(), 3);
    assert_eq!(worker.stats().conflicts.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_order_of_a_buyer_is_dead_lettered_as_a_conflict_not_acked_as_written() {
    let (app, tokens) = app_with_users(Backend::MySql, 1, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let first = grab_all(&app, voucher, &tokens).await[0];
    let worker = worker_for(&app, "w");
    drain(&worker).await;
    // A second order of the same buyer reaches the stream (as it would after the buyer set
    // was lost, before the guard), with its pending record.
    let user = db_count(
        &app,
        "SELECT CAST(user_id AS SIGNED) FROM tb_voucher_order WHERE voucher_id = ?",
        voucher,
    )
    .await;
    let second = first + 1;
    let mut redis = app.redis().await;
    let _: String = redis::cmd("XADD")
        .arg(format!("{}seckill:{{s0}}:orders", app.prefix))
        .arg("*")
        .arg("id")
        .arg(second)
        .arg("userId")
        .arg(user)
        .arg("voucherId")
        .arg(voucher)
        .query_async(&mut redis)
        .await
        .unwrap();
    let _: () = redis::AsyncCommands::set(
        &mut redis,
        format!("{}seckill:pending:{second}", app.prefix),
        format!("{user}:{voucher}"),
    )
    .await
    .unwrap();
    drain(&worker).await;
    let stats = worker.stats();
    assert_eq!(stats.conflicts.get(), 1);
    assert_eq!(stats.dead_lettered.get(), 1);
    assert_eq!(
        stats.already_written.get(),
        0,
        "not mistaken for a redelivery"
    );
    let dead: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(format!("{}seckill:{{s0}}:orders:dead", app.prefix))
        .arg("-")
        .arg("+")
        .query_async(&mut redis)
        .await
        .unwrap();
    let reason: String = dead.ids[0].get("reason").unwrap();
    assert!(
        reason.contains("conflict") && reason.contains(&first.to_string()),
        "{reason}"
    );
    assert_eq!(state_of(&app, second, &tokens[0]).await, "failed");
    assert_eq!(state_of(&app, first, &tokens[0]).await, "created");
    assert_eq!(db_order_ids(&app, voucher).await, vec![first]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voucher_hash_missing_a_field_is_reloaded_not_a_crash() {
    let (app, tokens) = app_with_users(Backend::Sqlite, 3, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 10, -60, 3600).await;
    let hash = app.state.keys.seckill_voucher(0, voucher);
    let mut won = HashSet::new();
    for (field, token) in [FIELD_BEGIN, FIELD_END, FIELD_STOCK].iter().zip(&tokens) {
        let _: () = redis::AsyncCommands::hdel(&mut app.redis().await, &hash, *field)
            .await
            .unwrap();
        let (status, body) = grab_raw(&app, voucher, token).await;
        assert_eq!(status, 200, "without {field}: {body}");
        won.insert(order_id_of(&body).unwrap_or_else(|| panic!("without {field}: {body}")));
    }
    assert_eq!(app.state.seckill.stats().warm_ups.get(), 3);
    assert_eq!(redis_stock(&app, voucher).await, Some(7));
    drain(&worker_for(&app, "w")).await;
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, &won);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_warm_up_releases_its_lock() {
    let app = spawn_app_with(Backend::Sqlite, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let s = &app.state;
    let _: () =
        redis::AsyncCommands::del(&mut app.redis().await, s.keys.seckill_voucher(0, voucher))
            .await
            .unwrap();
    // A service whose database pool is closed: loading fails.
    let closed = Db::connect(&s.config.database_url, 1).await.unwrap();
    closed.close().await;
    let broken = hmdp::testing::seckill::Seckill::new(
        closed,
        s.redis.clone(),
        s.keys.clone(),
        locks_of(&app),
        hmdp::testing::startup::order_id_generator(s.redis.clone(), &s.config).unwrap(),
        s.config.seckill.clone(),
    );
    let voucher_id = VoucherId::new(voucher).unwrap();
    assert!(broken.warm(voucher_id).await.is_err());
    let lock = locks_of(&app)
        .lock(&format!("seckill:warm:{voucher}"))
        .unwrap();
    let held: bool = redis::AsyncCommands::exists(&mut app.redis().await, lock.key())
        .await
        .unwrap();
    assert!(!held, "the warm-up lock outlived the failed warm-up");
    let started = Instant::now();
    s.seckill.warm(voucher_id).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(redis_stock(&app, voucher).await, Some(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_scan_moves_on_past_entries_that_are_not_idle() {
    let (app, tokens) = app_with_users(Backend::Sqlite, 30, |c| c.seckill.worker = false).await;
    let busy = create_sale(&app, 30, -60, 3600).await;
    let orphaned = create_sale(&app, 30, -60, 3600).await;
    let busy_ids = grab_all(&app, busy, &tokens[..25]).await;
    let orphan_ids: HashSet<i64> = grab_all(&app, orphaned, &tokens[25..])
        .await
        .into_iter()
        .collect();
    let stream = format!("{}seckill:{{s0}}:orders", app.prefix);
    let worker = worker_with(&app, app.state.db.clone(), "heir", |s| {
        s.claim_idle = Duration::from_millis(1000);
        s.batch = 2; // XAUTOCLAIM then scans at most 20 pending entries per call
    });
    worker.ensure_group(0).await.unwrap();
    // A consumer takes all 30 entries and dies.
    let mut redis = app.redis().await;
    let read: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(GROUP)
        .arg("dead")
        .arg("COUNT")
        .arg(100)
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query_async(&mut redis)
        .await
        .unwrap();
    let entries = &read.keys[0].ids;
    assert_eq!(entries.len(), 30);
    // Not a wait: the entries' idle time passes the 1 s the claim scan asks for.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // The first 25 are busy again (another worker is on them), the last 5 are orphans.
    let mut touch = redis::cmd("XCLAIM");
    touch.arg(&stream).arg(GROUP).arg("dead").arg(0);
    for e in &entries[..25] {
        touch.arg(&e.id);
    }
    let _: redis::Value = touch.arg("JUSTID").query_async(&mut redis).await.unwrap();
    for _ in 0..5 {
        worker.step_claim(0).await.unwrap();
    }
    let stored: HashSet<i64> = db_order_ids(&app, orphaned).await.into_iter().collect();
    assert_same_orders(&stored, &orphan_ids);
    assert!(db_order_ids(&app, busy).await.is_empty());
    assert_eq!(busy_ids.len(), 25);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_consumers_without_pending_entries_are_removed() {
    let app = spawn_app_with(Backend::Sqlite, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let token = app.login("13812345678").await;
    grab_all(&app, voucher, std::slice::from_ref(&token)).await;
    let stream = format!("{}seckill:{{s0}}:orders", app.prefix);
    let worker = worker_for(&app, "me").with_consumer_expiry(Duration::from_millis(100));
    worker.ensure_group(0).await.unwrap();
    let mut redis = app.redis().await;
    for ghost in ["ghost-1", "ghost-2"] {
        let _: i64 = redis::cmd("XGROUP")
            .arg("CREATECONSUMER")
            .arg(&stream)
            .arg(GROUP)
            .arg(ghost)
            .query_async(&mut redis)
            .await
            .unwrap();
    }
    // "holder" holds an entry: removing it would drop the order from the pending list.
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(GROUP)
        .arg("holder")
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query_async(&mut redis)
        .await
        .unwrap();
    let _: i64 = redis::cmd("XGROUP")
        .arg("CREATECONSUMER")
        .arg(&stream)
        .arg(GROUP)
        .arg("me")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(
        worker.remove_idle_consumers(0).await.unwrap().is_empty(),
        "nobody is idle yet"
    );
    // Not a wait: the consumers' idle time passes their 100 ms expiry.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut removed = worker.remove_idle_consumers(0).await.unwrap();
    removed.sort();
    assert_eq!(removed, vec!["ghost-1", "ghost-2"]);
    let left: Vec<redis::Value> = redis::cmd("XINFO")
        .arg("CONSUMERS")
        .arg(&stream)
        .arg(GROUP)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(left.len(), 2, "the holder and the caller stay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_between_commit_and_ack_writes_nothing_twice() {
    let (app, tokens) = app_with_users(Backend::MySql, 10, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 20, -60, 3600).await;
    let ids: HashSet<i64> = grab_all(&app, voucher, &tokens).await.into_iter().collect();
    let worker = worker_with(&app, app.state.db.clone(), "w", |_| {});
    worker.ensure_group(0).await.unwrap();
    // What the worker does up to its commit: read as "w", write the batch… and die.
    let read: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(GROUP)
        .arg("w")
        .arg("COUNT")
        .arg(100)
        .arg("STREAMS")
        .arg(format!("{}seckill:{{s0}}:orders", app.prefix))
        .arg(">")
        .query_async(&mut app.redis().await)
        .await
        .unwrap();
    let batch: Vec<NewOrder> = read.keys[0]
        .ids
        .iter()
        .map(|e| {
            let id = |field: &str| e.get::<i64>(field).unwrap();
            NewOrder {
                id: OrderId::new(id("id")).unwrap(),
                user_id: UserId::new(id("userId")).unwrap(),
                voucher_id: VoucherId::new(id("voucherId")).unwrap(),
            }
        })
        .collect();
    let outcome = orders::write_order_batch(&app.state.db, &batch)
        .await
        .unwrap();
    assert_eq!(outcome.inserted, 10);
    // Restarted under the same name, it finds its pending entries and writes nothing again.
    let mut reader = reader().await;
    assert_eq!(
        worker.step_pending(0, &mut reader).await.unwrap(),
        Step::Wrote(10)
    );
    let stats = worker.stats();
    assert_eq!(stats.persisted.get(), 0);
    assert_eq!(stats.already_written.get(), 10);
    assert_eq!(stats.conflicts.get(), 0);
    assert_eq!(stats.dead_lettered.get(), 0);
    assert_eq!(
        worker.step_pending(0, &mut reader).await.unwrap(),
        Step::Idle
    );
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, &ids);
    let stock = db_stock(&app, voucher).await;
    assert_eq!(stock, 10, "stock taken once per order");
    let pending: Vec<String> = redis::AsyncCommands::keys(
        &mut app.redis().await,
        format!("{}seckill:pending:*", app.prefix),
    )
    .await
    .unwrap();
    assert!(pending.is_empty(), "pending records left: {pending:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_ups_under_a_crowd_with_the_worker_running_never_oversell() {
    let app = Arc::new(spawn_app_with(Backend::MySql, |_| {}).await);
    let voucher = create_sale(&app, 100, -60, 3600).await;
    let tokens = Arc::new(login_many(&app, 300).await);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rounds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Meanwhile Redis keeps losing the voucher (its hash and buyers, or just the buyers).
    let vandal = {
        let (app, done, rounds) = (app.clone(), done.clone(), rounds.clone());
        tokio::spawn(async move {
            let mut redis = app.redis().await;
            let hash = app.state.keys.seckill_voucher(0, voucher);
            let buyers = app.state.keys.seckill_buyers(0, voucher);
            while !done.load(SeqCst) {
                // Not a wait: the pace of the losses.
                tokio::time::sleep(Duration::from_millis(20)).await;
                let round = rounds.load(SeqCst);
                let keys = if round % 2 == 0 {
                    vec![hash.clone(), buyers.clone()]
                } else {
                    vec![buyers.clone()]
                };
                let _: () = redis::AsyncCommands::del(&mut redis, keys).await.unwrap();
                rounds.fetch_add(1, SeqCst);
            }
        })
    };
    // Every user tries at least three times, 64 requests in flight; waves go on until the
    // keys have been lost a few times while the crowd was at it and the voucher was loaded
    // again at least twice (a fast machine would otherwise finish before the vandal had done
    // anything; and once sold out, most grabs are answered from memory without the script,
    // so reloads come only as the sold-out memory lapses).
    let sem = Arc::new(tokio::sync::Semaphore::new(64));
    let mut winners = Vec::new();
    let mut won = HashSet::new();
    let mut wave = 0;
    let warm_ups = || app.state.seckill.stats().warm_ups.get();
    let started = Instant::now();
    while wave < 3 || rounds.load(SeqCst) < 3 || warm_ups() < 2 {
        // Bounded by time, not by waves: once sold out, a wave is answered from memory in a
        // few milliseconds, and reloads come only as that memory lapses (a second).
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "after {wave} waves: {} losses, {} warm-ups (want 3 and 2)",
            rounds.load(SeqCst),
            warm_ups()
        );
        wave += 1;
        let mut tasks = Vec::new();
        for u in 0..tokens.len() {
            let (app, tokens, sem) = (app.clone(), tokens.clone(), sem.clone());
            tasks.push(tokio::spawn(async move {
                let _p = sem.acquire().await.unwrap();
                let (status, body) = grab_raw(&app, voucher, &tokens[u]).await;
                (u, status, body)
            }));
        }
        for t in tasks {
            let (u, status, body) = t.await.unwrap();
            assert_eq!(status, 200, "{body}");
            if let Some(id) = order_id_of(&body) {
                winners.push(u);
                won.insert(id);
            } else {
                let code = code_of(&body);
                assert!(code == "sold_out" || code == "duplicate_order", "{body}");
            }
        }
    }
    done.store(true, SeqCst);
    vandal.await.unwrap();
    assert!(warm_ups() >= 2);
    assert_eq!(won.len(), 100, "exactly the stock was sold");
    assert_eq!(
        winners.iter().collect::<HashSet<_>>().len(),
        100,
        "one order per buyer"
    );
    wait_for_orders(&app, voucher, 100).await;
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, &won);
    let users = db_buyers(&app, voucher).await;
    assert_eq!(users, 100);
    let stock = db_stock(&app, voucher).await;
    assert_eq!(stock, 0);
}

/// The status and JSON body of a GET.
async fn get_json(client: &reqwest::Client, url: &str) -> (u16, serde_json::Value) {
    let r = client.get(url).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// Polls a standalone worker's `/metrics` until `line` appears in it; the whole text.
async fn scrape_until(client: &reqwest::Client, url: &str, line: &str) -> String {
    let patience = Patience::new(Duration::from_secs(20)).every(Duration::from_millis(100));
    let what = format!("`{line}` in the worker's metrics");
    wait_until(patience, &what, async || {
        let body = client.get(url).send().await.unwrap().text().await.unwrap();
        if body.lines().any(|l| l == line) {
            Ok(body)
        } else {
            Err(format!("they say:\n{body}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_worker_serves_its_metrics_and_health() {
    let (app, tokens) = app_with_users(Backend::MySql, 3, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let ids = grab_all(&app, voucher, &tokens).await;

    // `hmdp worker` on the app's Redis and database, its listener on a free port.
    let worker = WorkerProcess::start((*app.state.config).clone()).await;
    let base = worker.base.clone();

    let metrics = format!("{base}/metrics");
    let body = scrape_until(&app.client, &metrics, "hmdp_worker_orders_written_total 3").await;
    wait_for_orders(&app, voucher, 3).await;
    for id in &ids {
        assert!(
            db_order_ids(&app, voucher).await.contains(id),
            "order {id} written"
        );
    }
    // The embedded worker's metric names, histograms included, and the stream gauges.
    assert!(
        body.contains("# TYPE hmdp_worker_batch_size histogram"),
        "{body}"
    );
    assert!(body.contains("hmdp_worker_write_seconds_count "), "{body}");
    assert!(body.contains("hmdp_worker_dead_letters_total 0"), "{body}");
    // Every written order's lag from the grab to the commit (recorded right after the
    // acknowledgement), within the test's few seconds.
    let body = scrape_until(
        &app.client,
        &metrics,
        "hmdp_worker_order_lag_seconds_count 3",
    )
    .await;
    assert!(
        body.contains("hmdp_worker_order_lag_seconds_bucket{le=\"60.0\"} 3"),
        "{body}"
    );
    scrape_until(
        &app.client,
        &metrics,
        "hmdp_order_stream_pending{shard=\"0\"} 0",
    )
    .await;
    // Nothing of the service's API is on this port.
    assert!(!body.contains("hmdp_http_requests_total"), "{body}");
    let (status, envelope) = get_json(&app.client, &format!("{base}/api/shop/1")).await;
    assert_eq!(status, 404);
    assert_eq!(envelope["success"], false);
    assert_eq!(envelope["code"], "not_found");

    let (status, health) = get_json(&app.client, &format!("{base}/health")).await;
    assert_eq!(status, 200);
    assert_eq!(health["data"]["database"], "ok");
    assert_eq!(health["data"]["redis"], "ok");

    // Shutdown stops the worker and then its listener.
    worker.stop().await;
    assert!(
        app.client.get(&metrics).send().await.is_err(),
        "the listener is closed after the worker stopped"
    );
}
