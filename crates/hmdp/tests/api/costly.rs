//! Cheap requests that used to cost the database or Redis a lot (issue "Safe to expose", item
//! 4): each test shows the bound that now holds.

use std::{sync::Arc, time::Duration};

use hmdp::testing::storage::Db;

use crate::helpers::{
    Backend, TestApp, code_of, create_sale, grab_raw, login_many, order_id_of, spawn_app,
    spawn_app_with, wait_until,
};

crate::both_backends!(
    counting_a_sales_orders_uses_an_index,
    concurrent_stats_requests_share_one_computation,
    unknown_voucher_ids_cost_no_warm_up_and_repeats_no_redis,
    deep_name_search_pages_are_empty,
    the_order_worker_writes_while_readers_hold_every_connection
);

/// Runs `sql` on the app's database, one string column per row.
async fn rows(db: &Db, sql: &str) -> Vec<String> {
    match db {
        Db::Sqlite(p) => sqlx::query_scalar(sql).fetch_all(p).await.unwrap(),
        Db::MySql(p) => sqlx::query_scalar(sql).fetch_all(p).await.unwrap(),
    }
}

/// The public sale stats count a voucher's orders: with no index starting with `voucher_id`
/// that was a scan of every order of every sale.
async fn counting_a_sales_orders_uses_an_index(backend: Backend) {
    let app = spawn_app(backend).await;
    let count = "SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = 7";
    let plan = match &app.state.db {
        Db::Sqlite(p) => {
            let rows: Vec<(i64, i64, i64, String)> =
                sqlx::query_as(&format!("EXPLAIN QUERY PLAN {count}"))
                    .fetch_all(p)
                    .await
                    .unwrap();
            rows.into_iter().map(|r| r.3).collect::<Vec<_>>().join("; ")
        }
        Db::MySql(p) => {
            // MariaDB's EXPLAIN is a result set: the `key` column names the index used.
            let row = sqlx::query(&format!("EXPLAIN {count}"))
                .fetch_one(p)
                .await
                .unwrap();
            let key: Option<String> = sqlx::Row::try_get(&row, "key").unwrap();
            key.unwrap_or_default()
        }
    };
    assert!(plan.contains("idx_voucher_order_voucher"), "plan: {plan}");
}

/// A flood of dashboard reads computes each sale's view once per second per instance.
async fn concurrent_stats_requests_share_one_computation(backend: Backend) {
    let app = Arc::new(spawn_app(backend).await);
    let voucher = create_sale(&app, 10, -60, 3600).await;
    let computed = || app.state.seckill.stats().stats_computed.get();
    let before = computed();
    let path = format!("/api/voucher/seckill/{voucher}/stats");
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (app, path) = (app.clone(), path.clone());
        tasks.push(tokio::spawn(async move { app.get(&path, None).await }));
    }
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.body["data"]["voucherId"], voucher, "{r:?}");
    }
    let n = computed() - before;
    assert!(
        n <= 5,
        "50 concurrent reads computed the stats {n} times (once per second expected)"
    );
    // The view stays live: an order shows within the reuse time.
    let token = app.login("13812345678").await;
    assert!(order_id_of(&grab_raw(&app, voucher, &token).await.1).is_some());
    wait_until(
        Duration::from_secs(10),
        "the stats show the order",
        async || app.get(&path, None).await.body["data"]["accepted"] == 1,
    )
    .await;
    // Unknown vouchers are not found, however often asked.
    let r = app.get("/api/voucher/seckill/987654/stats", None).await;
    assert_eq!(r.code(), "voucher_not_found", "{r:?}");
}

/// A grab for an id that is no flash-sale voucher is settled by the primary key, with no
/// warm-up (lock, stream and dead-letter scans); a repeated one is answered from memory.
async fn unknown_voucher_ids_cost_no_warm_up_and_repeats_no_redis(backend: Backend) {
    let app = spawn_app_with(backend, |c| c.seckill.worker = false).await;
    let token = app.login("13812345678").await;
    let unknown = 987_654;
    let (_, body) = grab_raw(&app, unknown, &token).await;
    assert_eq!(code_of(&body), "voucher_not_found", "{body}");
    assert_eq!(app.state.seckill.stats().warm_ups.get(), 0, "no warm-up");
    // The marker every instance reads is in Redis...
    let marker = app.state.keys.seckill_voucher(0, unknown);
    let mut redis = app.redis().await;
    let marked: bool = redis::AsyncCommands::exists(&mut redis, &marker)
        .await
        .unwrap();
    assert!(
        marked,
        "the unknown id is marked in Redis for every instance"
    );
    // ...and this instance answers a repeat without asking Redis at all.
    let _: () = redis::AsyncCommands::del(&mut redis, &marker)
        .await
        .unwrap();
    let (_, body) = grab_raw(&app, unknown, &token).await;
    assert_eq!(code_of(&body), "voucher_not_found", "{body}");
    let marked: bool = redis::AsyncCommands::exists(&mut redis, &marker)
        .await
        .unwrap();
    assert!(
        !marked,
        "the repeat was answered from this instance's memory"
    );
    // A voucher created on this instance is never refused from that memory.
    let voucher = create_sale(&app, 1, -60, 3600).await;
    let (_, body) = grab_raw(&app, voucher, &token).await;
    assert!(order_id_of(&body).is_some(), "{body}");
}

/// A name search's deep pages: an unindexable `LIKE '%…%'` with a large `OFFSET` made the
/// database scan and skip that many matches per request.
async fn deep_name_search_pages_are_empty(backend: Backend) {
    let app = spawn_app(backend).await;
    let values = (0..600)
        .map(|i| format!("('deep shop {i}', 1, '', '', 120.1, 30.2)"))
        .collect::<Vec<_>>()
        .join(", ");
    let insert =
        format!("INSERT INTO tb_shop (name, type_id, images, address, x, y) VALUES {values}");
    match &app.state.db {
        Db::Sqlite(p) => sqlx::query(&insert).execute(p).await.map(|_| ()),
        Db::MySql(p) => sqlx::query(&insert).execute(p).await.map(|_| ()),
    }
    .unwrap();
    let page = |n: i64| format!("/api/shop/of/name?name=deep%20shop&current={n}");
    let first = app.get(&page(1), None).await;
    assert_eq!(first.body["data"].as_array().map(Vec::len), Some(10));
    let last = app
        .get(&page(hmdp::testing::catalogue::NAME_MAX_PAGE), None)
        .await;
    assert_eq!(last.body["data"].as_array().map(Vec::len), Some(10));
    // 600 matches, but past the deepest page the answer is empty, with no query.
    let deeper = app
        .get(&page(hmdp::testing::catalogue::NAME_MAX_PAGE + 1), None)
        .await;
    assert!(deeper.success(), "{deeper:?}");
    assert_eq!(deeper.body["data"], serde_json::json!([]), "{deeper:?}");
}

/// Orders keep being written while requests hold every connection of the service's pool: the
/// worker writes through a pool of its own.
async fn the_order_worker_writes_while_readers_hold_every_connection(backend: Backend) {
    let app = Arc::new(spawn_app_with(backend, |c| c.db_max_connections = 1).await);
    let voucher = create_sale(&app, 20, -60, 3600).await;
    let tokens = login_many(&app, 20).await;
    // The first grab loads the voucher into Redis (a database read); the rest need Redis only.
    assert!(order_id_of(&grab_raw(&app, voucher, &tokens[0]).await.1).is_some());
    let held = hold_the_only_connection(&app).await;
    for t in &tokens[1..] {
        assert!(order_id_of(&grab_raw(&app, voucher, t).await.1).is_some());
    }
    let check = Db::connect(&app.state.config.database_url, 1)
        .await
        .unwrap();
    let count =
        format!("SELECT CAST(COUNT(*) AS CHAR) FROM tb_voucher_order WHERE voucher_id = {voucher}");
    wait_until(
        Duration::from_secs(20),
        "every order written while the service's pool is held",
        async || rows(&check, &count).await == ["20"],
    )
    .await;
    drop(held);
    check.close().await;
}

/// Takes the one connection of the service's pool and keeps it until dropped.
async fn hold_the_only_connection(app: &TestApp) -> Box<dyn std::any::Any + Send> {
    match &app.state.db {
        Db::Sqlite(p) => Box::new(p.acquire().await.unwrap()),
        Db::MySql(p) => Box::new(p.acquire().await.unwrap()),
    }
}
