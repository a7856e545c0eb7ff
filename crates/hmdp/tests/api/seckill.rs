//! The flash sale end to end, in both modes and over RabbitMQ, on SQLite and MariaDB; the
//! order worker under crashes and a database outage.

use std::{collections::HashSet, sync::Arc, time::Duration};

use serde_json::json;

use crate::helpers::{
    ADMIN_TOKEN, Backend, Patience, SalePath, TestApp, assert_same_orders, code_of, create_sale,
    db_buyers, db_order_ids, db_stock, drain, grab_raw, kill_a_worker_process_mid_drain,
    login_many, lose_voucher, order_id_of, prior_order_of, redis_stock, signed_notice, spawn_app,
    spawn_app_with, spawn_on_path, wait_for_orders, wait_until, wait_until_up, worker_for,
};

macro_rules! sale_matrix {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                use super::*;
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite_async() { super::$name(Backend::Sqlite, SalePath::Stream).await }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite_sync() { super::$name(Backend::Sqlite, SalePath::Sync).await }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite_rabbitmq() { super::$name(Backend::Sqlite, SalePath::RabbitMq).await }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn mysql_async() { super::$name(Backend::MySql, SalePath::Stream).await }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn mysql_sync() { super::$name(Backend::MySql, SalePath::Sync).await }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn mysql_rabbitmq() { super::$name(Backend::MySql, SalePath::RabbitMq).await }
            }
        )*
    };
}

sale_matrix!(
    a_crowd_never_oversells,
    one_user_gets_one_order,
    the_sale_window_is_enforced
);

async fn a_crowd_never_oversells(backend: Backend, path: SalePath) {
    let app = Arc::new(spawn_on_path(backend, path, |_| {}).await);
    let voucher = create_sale(&app, 100, -60, 3600).await;
    let tokens = Arc::new(login_many(&app, 1000).await);

    // 5,000 requests: every user five times, 200 in flight.
    let sem = Arc::new(tokio::sync::Semaphore::new(200));
    let mut tasks = Vec::new();
    for round in 0..5 {
        for (u, _) in tokens.iter().enumerate() {
            let (app, tokens, sem) = (app.clone(), tokens.clone(), sem.clone());
            tasks.push(tokio::spawn(async move {
                let _p = sem.acquire().await.unwrap();
                let (status, body) = grab_raw(&app, voucher, &tokens[u]).await;
                (u, round, status, body)
            }));
        }
    }
    let mut winners = Vec::new();
    let mut order_ids = Vec::new();
    for t in tasks {
        let (u, _round, status, body) = t.await.unwrap();
        assert_eq!(status, 200, "{body}");
        match order_id_of(&body) {
            Some(id) => {
                winners.push(u);
                order_ids.push(id);
            }
            None => {
                let code = code_of(&body);
                assert!(
                    code == "sold_out" || code == "duplicate_order",
                    "unexpected refusal: {body}"
                );
            }
        }
    }
    assert_eq!(order_ids.len(), 100, "exactly the stock was sold");
    assert_eq!(
        winners.iter().collect::<HashSet<_>>().len(),
        100,
        "100 distinct buyers"
    );

    wait_for_orders(&app, voucher, 100).await;
    let users = db_buyers(&app, voucher).await;
    assert_eq!(users, 100);
    let stock = db_stock(&app, voucher).await;
    assert_eq!(stock, 0, "database stock");
    if !matches!(path, SalePath::Sync) {
        assert_eq!(redis_stock(&app, voucher).await, Some(0), "Redis stock");
    }
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    let returned: HashSet<i64> = order_ids.iter().copied().collect();
    assert_eq!(
        stored, returned,
        "every order id answered as a success is in the database"
    );
}

async fn one_user_gets_one_order(backend: Backend, path: SalePath) {
    let app = Arc::new(spawn_on_path(backend, path, |_| {}).await);
    let voucher = create_sale(&app, 10, -60, 3600).await;
    let token = Arc::new(app.login("13812345678").await);
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (app, token) = (app.clone(), token.clone());
        tasks.push(tokio::spawn(async move {
            grab_raw(&app, voucher, &token).await
        }));
    }
    let (mut won, mut named) = (Vec::new(), Vec::new());
    for t in tasks {
        let (_, body) = t.await.unwrap();
        match order_id_of(&body) {
            Some(id) => won.push(id),
            None => {
                assert_eq!(code_of(&body), "duplicate_order", "{body}");
                // The refusal names the order the user has (on the sync path a request that
                // raced the first one may come before that order exists, and names none).
                named.extend(prior_order_of(&body));
            }
        }
    }
    assert_eq!(won.len(), 1);
    assert!(
        named.iter().all(|id| *id == won[0]),
        "refusals name the winning order {}: {named:?}",
        won[0]
    );
    // A retry after a lost answer finds its order, before and after it is written.
    let (_, body) = grab_raw(&app, voucher, &token).await;
    assert_eq!(prior_order_of(&body), Some(won[0]), "{body}");
    wait_for_orders(&app, voucher, 1).await;
    let (_, body) = grab_raw(&app, voucher, &token).await;
    assert_eq!(prior_order_of(&body), Some(won[0]), "{body}");
    let stock = db_stock(&app, voucher).await;
    assert_eq!(stock, 9);
}

async fn the_sale_window_is_enforced(backend: Backend, path: SalePath) {
    let app = spawn_on_path(backend, path, |_| {}).await;
    let token = app.login("13812345678").await;
    let future = create_sale(&app, 10, 3600, 7200).await;
    let (_, body) = grab_raw(&app, future, &token).await;
    assert_eq!(code_of(&body), "seckill_not_started", "{body}");
    assert!(body.contains("秒杀尚未开始"));
    let past = create_sale(&app, 10, -7200, -3600).await;
    let (_, body) = grab_raw(&app, past, &token).await;
    assert_eq!(code_of(&body), "seckill_ended", "{body}");
    assert!(body.contains("秒杀已经结束"));
    let (_, body) = grab_raw(&app, 987_654, &token).await;
    assert_eq!(code_of(&body), "voucher_not_found", "{body}");
    // Login is required.
    let r = app
        .client
        .post(app.url(&format!("/api/voucher-order/seckill/{future}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_voucher_keys_are_rebuilt_from_the_database_without_overselling() {
    let app = Arc::new(spawn_app_with(Backend::MySql, |c| c.seckill.worker = false).await);
    let voucher = create_sale(&app, 50, -60, 3600).await;
    let tokens = login_many(&app, 80).await;
    // 30 buyers; their orders wait in the stream (no worker yet).
    let mut won = Vec::new();
    for t in &tokens[..30] {
        won.push(order_id_of(&grab_raw(&app, voucher, t).await.1).expect("accepted"));
    }
    // Redis loses the voucher's keys (the stream survives).
    lose_voucher(&app, voucher).await;
    let mut redis = app.redis().await;
    // The first 30 buyers are still refused, each told their own order (rebuilt from the
    // stream), and only 20 more are accepted.
    for (t, id) in tokens[..30].iter().zip(&won) {
        let body = grab_raw(&app, voucher, t).await.1;
        assert_eq!(code_of(&body), "duplicate_order");
        assert_eq!(prior_order_of(&body), Some(*id), "{body}");
    }
    for t in &tokens[30..] {
        if let Some(id) = order_id_of(&grab_raw(&app, voucher, t).await.1) {
            won.push(id);
        }
    }
    assert_eq!(won.len(), 50, "stock 50, never more");
    assert_eq!(redis_stock(&app, voucher).await, Some(0));
    assert_eq!(app.state.seckill.stats().warm_ups.get(), 1);

    // Now Redis loses everything of the sale after the orders were written.
    let worker = worker_for(&app, "w-1");
    drain(&worker).await;
    wait_for_orders(&app, voucher, 50).await;
    for pattern in [format!("{}seckill:*", app.prefix)] {
        let keys: Vec<String> = redis::AsyncCommands::keys(&mut redis, &pattern)
            .await
            .unwrap();
        let _: () = redis::AsyncCommands::del(&mut redis, keys).await.unwrap();
    }
    for t in &tokens {
        let body = grab_raw(&app, voucher, t).await.1;
        assert!(
            order_id_of(&body).is_none(),
            "sold out stays sold out: {body}"
        );
    }
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, &won.iter().copied().collect());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_status_goes_from_pending_to_created() {
    let app = spawn_app_with(Backend::Sqlite, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let token = app.login("13812345678").await;
    let other = app.login("13912345678").await;
    let id = order_id_of(&grab_raw(&app, voucher, &token).await.1).unwrap();
    let r = app
        .get(&format!("/api/voucher-order/{id}"), Some(&token))
        .await;
    assert_eq!(r.body["data"]["state"], "pending", "{r:?}");
    assert_eq!(r.body["data"]["idStr"], id.to_string());
    let r = app
        .get(&format!("/api/voucher-order/{id}"), Some(&other))
        .await;
    assert_eq!(r.code(), "order_not_found", "only the owner sees an order");
    drain(&worker_for(&app, "w")).await;
    let r = app
        .get(&format!("/api/voucher-order/{id}"), Some(&token))
        .await;
    assert_eq!(r.body["data"]["state"], "created", "{r:?}");
    assert_eq!(r.body["data"]["order"]["voucherId"], voucher);
    let mine = app.get("/api/voucher-order/of/me", Some(&token)).await;
    assert_eq!(mine.body["data"][0]["idStr"], id.to_string());
    assert_eq!(
        app.get("/api/voucher-order/of/me", Some(&other)).await.body["data"],
        json!([])
    );
    let stats = app
        .get(&format!("/api/voucher/seckill/{voucher}/stats"), None)
        .await;
    assert_eq!(stats.body["data"]["accepted"], 1);
    assert_eq!(stats.body["data"]["persisted"], 1);
    assert_eq!(stats.body["data"]["redisStock"], 4);
    assert_eq!(stats.body["data"]["dbStock"], 4);
    assert_eq!(stats.body["data"]["unpaid"], 1);
    assert_eq!(stats.body["data"]["paid"], 0);
    assert_eq!(stats.body["data"]["released"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_accepted_grabs_keep_a_pending_record() {
    // The script writes the record only for the order it accepts (on a cluster it goes out
    // beside the script, and a refusal deletes it again).
    let app = spawn_app_with(Backend::Sqlite, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 1, -60, 3600).await;
    let tokens = [
        app.login("13812345678").await,
        app.login("13912345678").await,
    ];
    let won = order_id_of(&grab_raw(&app, voucher, &tokens[0]).await.1).unwrap();
    let (_, body) = grab_raw(&app, voucher, &tokens[1]).await;
    assert_eq!(code_of(&body), "sold_out", "{body}");
    let mut redis = app.redis().await;
    let pattern = format!("{}seckill:pending:*", app.prefix);
    wait_until(
        Duration::from_secs(10),
        "the refused grab's record deleted",
        async || {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(&pattern)
                .query_async(&mut redis)
                .await
                .unwrap();
            keys == [format!("{}seckill:pending:{won}", app.prefix)]
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_aborted_mid_batch_loses_and_duplicates_nothing() {
    let app = Arc::new(spawn_app_with(Backend::MySql, |c| c.seckill.worker = false).await);
    let voucher = create_sale(&app, 300, -60, 3600).await;
    let tokens = login_many(&app, 300).await;
    let mut won = HashSet::new();
    for t in &tokens {
        won.insert(order_id_of(&grab_raw(&app, voucher, t).await.1).unwrap());
    }
    // A worker takes a batch and is aborted before it can write it: its database is made
    // unreachable (a proxy that refuses), so the batch stays delivered-but-unacknowledged.
    let (url, proxy) = crate::helpers::mysql_via_proxy(&app.state.config.database_url).await;
    proxy.cut();
    let unreachable = hmdp::testing::storage::Db::MySql(
        sqlx::mysql::MySqlPoolOptions::new()
            .acquire_timeout(Duration::from_millis(300))
            .connect_lazy(&url)
            .unwrap(),
    );
    let s = &app.state;
    let first = hmdp::testing::worker::OrderWorker::new(
        unreachable,
        s.redis.clone(),
        crate::helpers::redis_url(),
        s.keys.clone(),
        s.config.seckill.clone(),
        Some("doomed".into()),
    );
    let task = tokio::spawn(first.clone().run_until(std::future::pending()));
    let stream = format!("{}seckill:{{s0}}:orders", app.prefix);
    let read = Patience::new(Duration::from_secs(10)).every(Duration::from_millis(10));
    wait_until(read, "the first worker reading", async || {
        let pending: redis::streams::StreamPendingReply = redis::cmd("XPENDING")
            .arg(&stream)
            .arg(hmdp::testing::worker::GROUP)
            .query_async(&mut app.redis().await)
            .await
            .unwrap_or_default();
        pending.count() > 0
    })
    .await;
    task.abort();
    let _ = task.await;
    let written_by_first = first.stats().persisted.get();
    // …and another worker (another consumer) takes over what it left pending.
    let second = worker_for(&app, "heir");
    // A minute at most: a bound on the worker's life, not a wait.
    let handle = tokio::spawn(
        second
            .clone()
            .run_until(tokio::time::sleep(Duration::from_secs(60))),
    );
    wait_for_orders(&app, voucher, 300).await;
    handle.abort();
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, &won);
    let stock = db_stock(&app, voucher).await;
    assert_eq!(stock, 0, "stock decremented exactly once per order");
    assert_eq!(
        written_by_first, 0,
        "the first worker died holding its batch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_stream_entry_goes_to_the_dead_letters() {
    let app = spawn_app_with(Backend::Sqlite, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let token = app.login("13812345678").await;
    let id = order_id_of(&grab_raw(&app, voucher, &token).await.1).unwrap();
    let stream = format!("{}seckill:{{s0}}:orders", app.prefix);
    let _: String = redis::cmd("XADD")
        .arg(&stream)
        .arg("*")
        .arg("id")
        .arg("not-a-number")
        .query_async(&mut app.redis().await)
        .await
        .unwrap();
    let worker = worker_for(&app, "w");
    drain(&worker).await;
    assert_eq!(worker.stats().dead_lettered.get(), 1);
    let dead: i64 = redis::AsyncCommands::xlen(
        &mut app.redis().await,
        format!("{}seckill:{{s0}}:orders:dead", app.prefix),
    )
    .await
    .unwrap();
    assert_eq!(dead, 1);
    assert_eq!(
        db_order_ids(&app, voucher).await,
        vec![id],
        "the good order is written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_going_away_while_orders_arrive_loses_nothing() {
    let app = Arc::new(spawn_app_with(Backend::MySql, |c| c.seckill.worker = false).await);
    database_going_away_while_orders_arrive(app).await;
}

/// Orders arrive while the worker's database is away; it comes back and every accepted order
/// is written once. `app` (on MariaDB) runs no worker of its own: the one here, on `app`'s
/// settings (so also its order transport), reaches the database through a proxy that is cut.
pub(crate) async fn database_going_away_while_orders_arrive(app: Arc<TestApp>) {
    let voucher = create_sale(&app, 200, -60, 3600).await;
    let tokens = login_many(&app, 200).await;

    let (url, proxy) = crate::helpers::mysql_via_proxy(&app.state.config.database_url).await;
    let worker_db = hmdp::testing::storage::Db::connect(&url, 2).await.unwrap();
    let s = &app.state;
    let mut settings = s.config.seckill.clone();
    settings.batch = 20;
    let worker = hmdp::testing::worker::OrderWorker::new(
        worker_db,
        s.redis.clone(),
        crate::helpers::redis_url(),
        s.keys.clone(),
        settings,
        Some("behind-proxy".into()),
    );
    // A minute at most: a bound on the worker's life, not a wait.
    let handle = tokio::spawn(
        worker
            .clone()
            .run_until(tokio::time::sleep(Duration::from_secs(60))),
    );
    proxy.cut();

    let mut won = HashSet::new();
    for t in &tokens {
        won.insert(
            order_id_of(&grab_raw(&app, voucher, t).await.1)
                .expect("accepted while the database is away"),
        );
    }
    wait_until(Duration::from_secs(20), "the worker noticed", async || {
        worker.stats().db_outages.get() > 0
    })
    .await;
    assert_eq!(
        db_order_ids(&app, voucher).await.len(),
        0,
        "nothing can be written yet"
    );

    proxy.restore();
    wait_for_orders(&app, voucher, 200).await;
    handle.abort();
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, &won);
    assert_eq!(db_stock(&app, voucher).await, 0);
    assert_eq!(
        worker.stats().dead_lettered.get(),
        0,
        "an outage is not a poison message"
    );
}

crate::both_backends!(
    a_killed_worker_process_loses_and_duplicates_nothing,
    a_repeated_order_id_never_replaces_another_buyers_order,
    the_dashboard_counts_paid_unpaid_and_released_orders
);

/// The dashboard counts a sale's written orders by where they are, in one query: paid (also
/// when used or refunded since), unpaid, and released (cancelled or closed unpaid: the unit
/// went back on sale); and each status on its own.
async fn the_dashboard_counts_paid_unpaid_and_released_orders(backend: Backend) {
    let app = spawn_app(backend).await;
    let voucher = create_sale(&app, 10, -60, 3600).await;
    let mut orders = Vec::new();
    for i in 0..5 {
        let token = app.login(&format!("1380000{i:04}")).await;
        let id = order_id_of(&grab_raw(&app, voucher, &token).await.1).expect("an order");
        orders.push((id.to_string(), token));
    }
    wait_for_orders(&app, voucher, 5).await;
    let pay = async |(id, token): &(String, String)| {
        let ticket = app
            .post(&format!("/api/voucher-order/{id}/pay"), Some(token))
            .await;
        assert!(ticket.success(), "{ticket:?}");
        let (trade_no, amount) = (
            ticket.body["data"]["tradeNo"].as_str().unwrap().to_owned(),
            ticket.body["data"]["amount"].as_i64().unwrap(),
        );
        let r = signed_notice(&app, id.parse().unwrap(), &trade_no, amount, "paid").await;
        assert!(r.success(), "{r:?}");
    };
    // Paid; paid and used; paid and refund asked; cancelled; unpaid.
    pay(&orders[0]).await;
    pay(&orders[1]).await;
    let r = app
        .send(
            app.client
                .post(app.url(&format!("/api/voucher-order/{}/use", orders[1].0)))
                .header("x-admin-token", ADMIN_TOKEN),
        )
        .await;
    assert!(r.success(), "{r:?}");
    pay(&orders[2]).await;
    let (id, token) = &orders[2];
    let r = app
        .post(&format!("/api/voucher-order/{id}/refund"), Some(token))
        .await;
    assert!(r.success(), "{r:?}");
    let (id, token) = &orders[3];
    let r = app
        .post(&format!("/api/voucher-order/{id}/cancel"), Some(token))
        .await;
    assert!(r.success(), "{r:?}");

    let path = format!("/api/voucher/seckill/{voucher}/stats");
    let stats = wait_until(
        Duration::from_secs(10),
        "the dashboard counting the moves",
        async || {
            let d = app.get(&path, None).await.body["data"].clone();
            (d["released"] == 1).then_some(d)
        },
    )
    .await;
    assert_eq!(stats["paid"], 3, "{stats}");
    assert_eq!(stats["unpaid"], 1, "{stats}");
    assert_eq!(stats["released"], 1, "{stats}");
    assert_eq!(stats["persisted"], 5, "{stats}");
    assert_eq!(
        stats["byStatus"],
        json!({ "unpaid": 1, "paid": 1, "used": 1, "cancelled": 1, "refunding": 1, "refunded": 0 }),
        "{stats}"
    );
    // The cancelled order's unit is on sale again.
    assert_eq!(stats["redisStock"], 6, "{stats}");
}

/// Order ids repeat only if the id generator's Redis counter is lost (a day counter reset in
/// segment mode, say). A second buyer's order under a used id never takes the first buyer's
/// place: its pending record does not replace the first one's, the worker refuses it as a
/// conflict, and each buyer is told their own truth.
async fn a_repeated_order_id_never_replaces_another_buyers_order(backend: Backend) {
    let app = spawn_app_with(backend, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 10, -60, 3600).await;
    let first = app.login("13812345678").await;
    let second = app.login("13912345678").await;
    let user_id = |r: crate::helpers::Resp| r.body["data"]["id"].as_i64().unwrap();
    let first_id = user_id(app.get("/api/user/me", Some(&first)).await);
    let second_id = user_id(app.get("/api/user/me", Some(&second)).await);
    let id = order_id_of(&grab_raw(&app, voucher, &first).await.1).unwrap();

    // The second buyer's grab runs with the same id, as the grab runs it on one node (with the
    // order's pending record): the script accepts it, says the id was in use, and keeps the
    // first buyer's record.
    let keys = &app.state.keys;
    let record = hmdp::testing::order_stream::PendingRecord {
        user_id: hmdp::testing::domain::UserId::new(second_id).unwrap(),
        voucher_id: hmdp::testing::domain::VoucherId::new(voucher).unwrap(),
        failed: false,
    };
    let answer: hmdp::testing::seckill::GrabAnswer = hmdp::testing::seckill::GRAB
        .key(keys.seckill_voucher(0, voucher))
        .key(keys.seckill_buyers(0, voucher))
        .key(keys.seckill_stream(0))
        .key(keys.seckill_deadlines(0))
        .key(keys.seckill_pending(id))
        .arg(voucher)
        .arg(second_id)
        .arg(id)
        .arg(i64::MAX)
        .arg(record.to_string())
        .arg(60_000)
        .invoke_async(&mut app.redis().await)
        .await
        .unwrap();
    assert!(
        matches!(
            answer,
            hmdp::testing::seckill::GrabAnswer::Accepted {
                id_in_use: true,
                ..
            }
        ),
        "accepted, the id in use: {answer:?}"
    );
    let path = format!("/api/voucher-order/{id}");
    let status = async |token: &str| app.get(&path, Some(token)).await;
    assert_eq!(status(&first).await.body["data"]["state"], "pending");
    assert_eq!(status(&second).await.code(), "order_not_found");

    drain(&worker_for(&app, "w")).await;
    let mine = status(&first).await;
    assert_eq!(mine.body["data"]["state"], "created", "{mine:?}");
    assert_eq!(mine.body["data"]["order"]["userId"], first_id);
    let theirs = status(&second).await;
    assert_eq!(theirs.body["data"]["state"], "failed", "{theirs:?}");
    assert_eq!(db_order_ids(&app, voucher).await, vec![id]);
}

async fn a_killed_worker_process_loses_and_duplicates_nothing(backend: Backend) {
    let app = Arc::new(spawn_app_with(backend, |c| c.seckill.worker = false).await);
    let voucher = create_sale(&app, 2000, -60, 3600).await;
    let tokens = login_many(&app, 2000).await;
    let mut won = HashSet::new();
    for t in &tokens {
        won.insert(order_id_of(&grab_raw(&app, voucher, t).await.1).unwrap());
    }
    let dir = tempfile::tempdir().unwrap();
    let spawn_worker = || {
        app.binary(dir.path())
            .arg("worker")
            .env("HMDP_WORKER_BATCH", "5")
            .env("HMDP_WORKER_CLAIM_IDLE_MS", "300")
            .spawn()
            .unwrap()
    };
    kill_a_worker_process_mid_drain(&app, voucher, &won, spawn_worker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_the_stream_and_trimming_keeps_unwritten_orders() {
    let app = Arc::new(spawn_app_with(Backend::MySql, |c| c.seckill.worker = false).await);
    let voucher = create_sale(&app, 400, -60, 3600).await;
    let tokens = login_many(&app, 400).await;
    let mut won = HashSet::new();
    for t in &tokens[..350] {
        won.insert(order_id_of(&grab_raw(&app, voucher, t).await.1).unwrap());
    }
    let stream = format!("{}seckill:{{s0}}:orders", app.prefix);
    let mut redis = app.redis().await;
    // A first worker writes the oldest 105 orders (15 batches of 7)…
    let (a, b) = (worker_for(&app, "a"), worker_for(&app, "b"));
    a.ensure_group(0).await.unwrap();
    let mut reader = hmdp::testing::kv::RedisConn::connect(&crate::helpers::redis_url())
        .await
        .unwrap();
    for _ in 0..15 {
        a.step_new(0, &mut reader, Duration::from_millis(50))
            .await
            .unwrap();
    }
    // …then a consumer takes the next 20 entries and never acknowledges them (it "hangs").
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(hmdp::testing::worker::GROUP)
        .arg("hung")
        .arg("COUNT")
        .arg(20)
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query_async(&mut redis)
        .await
        .unwrap();
    // Two workers drain the rest side by side (without taking over the hung consumer's share).
    let before_a = a.stats().persisted.get();
    tokio::join!(drain(&a), drain(&b));
    assert_eq!(db_order_ids(&app, voucher).await.len(), 330);
    let by_a = a.stats().persisted.get() - before_a;
    let by_b = b.stats().persisted.get();
    assert_eq!(by_a + by_b, 225, "each order written by exactly one worker");
    assert!(by_b > 0, "the second worker got a share");

    // Trimming drops written entries but never the 20 unacknowledged ones.
    a.trim(0).await.unwrap();
    let left: i64 = redis::AsyncCommands::xlen(&mut redis, &stream)
        .await
        .unwrap();
    assert_eq!(
        left, 245,
        "the 105 orders written before the oldest unwritten one are gone"
    );
    let pending: redis::streams::StreamPendingReply = redis::cmd("XPENDING")
        .arg(&stream)
        .arg(hmdp::testing::worker::GROUP)
        .query_async(&mut redis)
        .await
        .unwrap();
    let first_pending = match pending {
        redis::streams::StreamPendingReply::Data(d) => d.start_id,
        _ => panic!("the hung consumer's entries are pending"),
    };
    let range: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(&stream)
        .arg(&first_pending)
        .arg(&first_pending)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(
        range.ids.len(),
        1,
        "the oldest unwritten order is still in the stream"
    );

    // The hung consumer's orders are taken over once idle, and 50 more sales still work.
    for t in &tokens[350..] {
        won.insert(order_id_of(&grab_raw(&app, voucher, t).await.1).unwrap());
    }
    // Not a wait: the hung consumer's entries stay idle past the 300 ms claim threshold.
    tokio::time::sleep(Duration::from_millis(400)).await;
    while a.step_claim(0).await.unwrap() != hmdp::testing::worker::Step::Idle {}
    drain(&a).await;
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, &won);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_the_database_keeps_refusing_go_to_the_dead_letters_after_n_deliveries() {
    let app = spawn_app_with(Backend::Sqlite, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let mut accepted = 0;
    for phone in ["13812345678", "13912345678", "13712345678"] {
        let token = app.login(phone).await;
        accepted += order_id_of(&grab_raw(&app, voucher, &token).await.1).is_some() as usize;
    }
    assert_eq!(accepted, 3);
    // Someone zeroes the stock in the database behind the sale's back: the writes are refused.
    if let hmdp::testing::storage::Db::Sqlite(p) = &app.state.db {
        sqlx::query("UPDATE tb_seckill_voucher SET stock = 0 WHERE voucher_id = ?")
            .bind(voucher)
            .execute(p)
            .await
            .unwrap();
    }
    let s = &app.state;
    let mut settings = s.config.seckill.clone();
    settings.max_deliveries = 3;
    let worker = hmdp::testing::worker::OrderWorker::new(
        s.db.clone(),
        s.redis.clone(),
        crate::helpers::redis_url(),
        s.keys.clone(),
        settings,
        Some("w".into()),
    )
    // Only the failure count matters here (the time rule has its own test).
    .with_dead_letter_after(Duration::ZERO);
    worker.ensure_group(0).await.unwrap();
    let mut reader = hmdp::testing::kv::RedisConn::connect(&crate::helpers::redis_url())
        .await
        .unwrap();
    let mut rounds = 0;
    worker
        .step_new(0, &mut reader, Duration::from_millis(50))
        .await
        .unwrap();
    while worker.step_pending(0, &mut reader).await.unwrap() != hmdp::testing::worker::Step::Idle {
        rounds += 1;
        assert!(
            rounds < 10,
            "the refused orders never left the pending list"
        );
    }
    assert_eq!(worker.stats().dead_lettered.get(), 3);
    assert!(rounds >= 2, "retried before giving up ({rounds} rounds)");
    assert!(db_order_ids(&app, voucher).await.is_empty());
    let dead: i64 = redis::AsyncCommands::xlen(
        &mut app.redis().await,
        format!("{}seckill:{{s0}}:orders:dead", app.prefix),
    )
    .await
    .unwrap();
    assert_eq!(dead, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_a_flash_sale_validates_its_fields() {
    let app = spawn_app_with(Backend::Sqlite, |_| {}).await;
    let post = |body: serde_json::Value, admin: bool| {
        let mut req = app.client.post(app.url("/api/voucher/seckill")).json(&body);
        if admin {
            req = req.header("x-admin-token", ADMIN_TOKEN);
        }
        app.send(req)
    };
    let good = json!({"shopId": 1, "title": "券", "payValue": 1, "actualValue": 2, "stock": 5,
        "beginTime": "2030-01-01T00:00:00", "endTime": "2030-01-02T00:00:00"});
    assert_eq!(post(good.clone(), false).await.code(), "admin_required");
    let with = |k: &str, v: serde_json::Value| {
        let mut b = good.clone();
        b[k] = v;
        b
    };
    for (body, needle) in [
        (with("stock", json!(0)), "stock"),
        (
            with("endTime", json!("2029-12-31T00:00:00")),
            "beginTime must be before endTime",
        ),
        (with("beginTime", json!("tomorrow")), "date-time"),
        (with("title", json!("")), "title"),
        (with("stock", json!("ten")), "stock"),
    ] {
        let r = post(body, true).await;
        assert_eq!((r.status, r.code()), (400, "invalid_request"), "{r:?}");
        assert!(r.msg().contains(needle), "{needle}: {r:?}");
    }
    let r = post(with("shopId", json!(424242)), true).await;
    assert_eq!(r.code(), "shop_not_found");
    // "yyyy-MM-dd HH:mm:ss" is accepted too, and the sale shows in the shop's voucher list.
    let r = post(with("beginTime", json!("2029-12-31 08:00:00")), true).await;
    assert!(r.success(), "{r:?}");
    let list = app.get("/api/voucher/list/1", None).await;
    let ours = list.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == r.body["data"])
        .cloned()
        .unwrap();
    assert_eq!(ours["stock"], 5);
    assert_eq!(ours["beginTime"], "2029-12-31T08:00:00");
    assert_eq!(ours["type"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_from_its_aof_mid_sale_loses_and_oversells_nothing() {
    let port = crate::helpers::free_port();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_string_lossy().into_owned();
    let aof = [
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--dir",
        d.as_str(),
    ];
    let redis = crate::helpers::RedisServer::start_with(port, &aof).await;
    let url = format!("redis://127.0.0.1:{port}");
    let app = Arc::new(
        spawn_app_with(Backend::Sqlite, |c| {
            c.redis_url = Some(url.clone());
            c.seckill.claim_idle = Duration::from_millis(500);
        })
        .await,
    );
    let voucher = create_sale(&app, 100, -60, 3600).await;
    let tokens = login_many(&app, 150).await;
    let mut won = HashSet::new();
    for t in &tokens[..60] {
        won.insert(order_id_of(&grab_raw(&app, voucher, t).await.1).unwrap());
    }
    // kill -9, then a restart that replays the append-only file.
    drop(redis);
    let _redis = crate::helpers::RedisServer::start_with(port, &aof).await;
    let patience = Patience::new(Duration::from_secs(15)).every(Duration::from_millis(50));
    wait_until(patience, "the service recovered", async || {
        app.get("/health", None).await.success()
    })
    .await;
    for t in &tokens {
        let (status, body) = grab_raw(&app, voucher, t).await;
        assert_eq!(status, 200, "{body}");
        if let Some(id) = order_id_of(&body) {
            won.insert(id);
        }
    }
    assert_eq!(won.len(), 100, "the stock, never more");
    wait_for_orders(&app, voucher, 100).await;
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, &won);
    assert_eq!(redis_stock(&app, voucher).await, Some(0));
}

/// `hmdp serve` as a separate process on the test's database and Redis prefix.
fn serve_process(app: &TestApp, port: u16, dir: &std::path::Path) -> std::process::Child {
    app.binary(dir)
        .env("HMDP_LISTEN", format!("127.0.0.1:{port}"))
        .env("HMDP_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("HMDP_WORKER_CLAIM_IDLE_MS", "500")
        .env("HMDP_RATE_LIMIT_IP", "0")
        .env("HMDP_RATE_LIMIT_USER", "0")
        .env("HMDP_MAX_CONNECTIONS_PER_IP", "0")
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_killed_mid_sale_and_restarted_loses_and_duplicates_nothing() {
    let app = Arc::new(spawn_app_with(Backend::MySql, |c| c.seckill.worker = false).await);
    let voucher = create_sale(&app, 200, -60, 3600).await;
    let tokens = Arc::new(login_many(&app, 300).await);
    let dir = tempfile::tempdir().unwrap();
    let port = crate::helpers::free_port();
    let mut service = serve_process(&app, port, dir.path());
    wait_until_up(&app.client, port).await;

    // The crowd arrives; the service is killed -9 while answering it.
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for u in 0..300 {
        let (client, tokens, answered) = (app.client.clone(), tokens.clone(), answered.clone());
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(format!(
                    "http://127.0.0.1:{port}/api/voucher-order/seckill/{voucher}"
                ))
                .header("authorization", &tokens[u])
                .send()
                .await;
            let body = match r {
                Ok(r) => r.text().await.ok(),
                Err(_) => None,
            };
            answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            body.and_then(|b| order_id_of(&b))
        }));
    }
    // Asked often: the kill must land while the crowd is still being answered.
    let mid_crowd = Patience::new(Duration::from_secs(60)).every(Duration::from_millis(1));
    wait_until(mid_crowd, "80 of the crowd answered", async || {
        answered.load(std::sync::atomic::Ordering::SeqCst) >= 80
    })
    .await;
    service.kill().unwrap();
    service.wait().unwrap();
    let mut won = HashSet::new();
    for t in tasks {
        if let Some(id) = t.await.unwrap() {
            won.insert(id);
        }
    }
    eprintln!("{} orders confirmed before the kill", won.len());

    // Restarted, it writes every order Redis accepted (confirmed or not) exactly once.
    let port = crate::helpers::free_port();
    let mut service = serve_process(&app, port, dir.path());
    wait_until_up(&app.client, port).await;
    let accepted = 200 - redis_stock(&app, voucher).await.unwrap();
    wait_for_orders(&app, voucher, accepted).await;
    // The sale goes on to the end on the restarted service.
    for t in tokens.iter() {
        let r = app
            .client
            .post(format!(
                "http://127.0.0.1:{port}/api/voucher-order/seckill/{voucher}"
            ))
            .header("authorization", t)
            .send()
            .await
            .unwrap();
        if let Some(id) = order_id_of(&r.text().await.unwrap()) {
            won.insert(id);
        }
    }
    wait_for_orders(&app, voucher, 200).await;
    unsafe { libc::kill(service.id() as i32, libc::SIGTERM) };
    assert!(service.wait().unwrap().success());
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert!(
        won.is_subset(&stored),
        "every order confirmed to a buyer is written"
    );
    assert_eq!(stored.len(), 200, "the stock, never more");
    let users = db_buyers(&app, voucher).await;
    assert_eq!(users, 200, "one order per buyer");
    assert_eq!(db_stock(&app, voucher).await, 0);
}
