//! Sign-in (BITMAP) and unique visitors (HyperLogLog), end to end on real Redis.
//!
//! "Today" comes from the service's clock, which each test pins to a chosen instant, so no
//! test depends on the day it runs on. Streaks are set up by writing bits directly (SETBIT), as
//! if the user had signed on those days.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, TimeZone as _, Utc};
use hmdp::testing::{
    activity::Visitor,
    domain::{ShopId, UserId},
    kv::{Keys, RedisConn},
};
use redis::AsyncCommands;
use serde_json::json;

use crate::{
    both_backends,
    helpers::{
        Backend, RedisCluster, RedisServer, TestApp, free_port, login_many, spawn_app,
        spawn_app_with, wait_until,
    },
};

both_backends!(
    signing_in_counts_the_streak_ending_today,
    distinct_users_reading_a_shop_are_counted_once_each,
);

/// The instant `y-m-d h:00` in Asia/Shanghai (the default `HMDP_TIME_ZONE`).
fn shanghai(y: i32, m: u32, d: u32, h: u32) -> DateTime<Utc> {
    chrono_tz::Asia::Shanghai
        .with_ymd_and_hms(y, m, d, h, 0, 0)
        .unwrap()
        .to_utc()
}

fn keys(app: &TestApp) -> Keys {
    Keys::new(app.prefix.clone())
}

fn redis(app: &TestApp) -> RedisConn {
    app.state.redis.clone()
}

/// Marks `days` of `month` (yyyyMM) as signed, straight in Redis.
async fn set_signed(app: &TestApp, user: i64, month: &str, days: impl IntoIterator<Item = u32>) {
    let key = keys(app).sign(user, month);
    let mut r = redis(app);
    for d in days {
        let _: bool = r.setbit(&key, (d - 1) as usize, true).await.unwrap();
    }
}

async fn user_id(app: &TestApp, token: &str) -> i64 {
    app.get("/api/user/me", Some(token)).await.body["data"]["id"]
        .as_i64()
        .unwrap()
}

async fn count(app: &TestApp, token: &str) -> i64 {
    let r = app.get("/api/user/sign/count", Some(token)).await;
    assert!(r.success(), "{r:?}");
    r.body["data"].as_i64().unwrap()
}

async fn month(app: &TestApp, token: &str, query: &str) -> serde_json::Value {
    let r = app
        .get(&format!("/api/user/sign/month{query}"), Some(token))
        .await;
    assert!(r.success(), "{r:?}");
    r.body["data"].clone()
}

async fn signing_in_counts_the_streak_ending_today(backend: Backend) {
    let app = spawn_app(backend).await;
    app.state.activity.clock().pin(shanghai(2024, 5, 10, 12));
    let token = app.login("13812345678").await;
    let me = user_id(&app, &token).await;

    // Login required, as in the original.
    for r in [
        app.post("/api/user/sign", None).await,
        app.get("/api/user/sign/count", None).await,
        app.get("/api/user/sign/month", None).await,
    ] {
        assert_eq!(r.status, 401, "{r:?}");
    }

    assert_eq!(count(&app, &token).await, 0);
    assert_eq!(
        month(&app, &token, "").await,
        json!({"month": "202405", "days": [], "today": 10, "signedToday": false, "streak": 0})
    );

    // Signed on the 3rd and on the 7th to the 9th; not yet today.
    set_signed(&app, me, "202405", [3, 7, 8, 9]).await;
    assert_eq!(
        count(&app, &token).await,
        0,
        "the original counts 0 until today is signed"
    );
    let cal = month(&app, &token, "").await;
    assert_eq!(cal["days"], json!([3, 7, 8, 9]));
    assert_eq!(
        cal["streak"], 3,
        "the streak up to yesterday is still alive"
    );
    assert_eq!(cal["signedToday"], false);

    // Sign today: the original's key and bit, and signing twice changes nothing.
    for _ in 0..2 {
        let r = app.post("/api/user/sign", Some(&token)).await;
        assert_eq!(r.body, json!({"success": true}));
        assert_eq!(count(&app, &token).await, 4, "the 7th to the 10th");
    }
    let key = format!("{}sign:{me}:202405", app.prefix);
    let bit: bool = redis(&app).getbit(&key, 9).await.unwrap();
    assert!(bit, "bit day-1 of {key}");
    let cal = month(&app, &token, "").await;
    assert_eq!(cal["days"], json!([3, 7, 8, 9, 10]));
    assert_eq!(
        (cal["streak"].as_i64(), cal["signedToday"].as_bool()),
        (Some(4), Some(true))
    );

    // Another month: its days, no `today`; the streak is still today's.
    set_signed(&app, me, "202404", [1, 30]).await;
    assert_eq!(
        month(&app, &token, "?month=202404").await,
        json!({"month": "202404", "days": [1, 30], "signedToday": true, "streak": 4})
    );
    for bad in ["2024-04", "202413", "20244", "abcdef"] {
        let r = app
            .get(&format!("/api/user/sign/month?month={bad}"), Some(&token))
            .await;
        assert_eq!(
            (r.status, r.code()),
            (400, "invalid_request"),
            "{bad}: {r:?}"
        );
    }

    // The next day, unsigned: the original counts 0; the live streak still shows 4.
    app.state.activity.clock().pin(shanghai(2024, 5, 11, 9));
    assert_eq!(count(&app, &token).await, 0);
    assert_eq!(month(&app, &token, "").await["streak"], 4);
    // Two days later the streak is broken.
    app.state.activity.clock().pin(shanghai(2024, 5, 12, 9));
    assert_eq!(month(&app, &token, "").await["streak"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streak_crosses_the_month_boundary_on_day_one() {
    let app = spawn_app(Backend::Sqlite).await;
    // 07:30 on 1 March in Shanghai is still 29 February in UTC: the configured zone decides.
    app.state
        .activity
        .clock()
        .pin(shanghai(2024, 3, 1, 7) + chrono::Duration::minutes(30));
    let token = app.login("13812345678").await;
    let me = user_id(&app, &token).await;
    set_signed(&app, me, "202402", 1..=29).await; // a leap February, all signed
    set_signed(&app, me, "202401", [29, 31]).await; // the 30th missed

    assert_eq!(
        count(&app, &token).await,
        0,
        "today (the 1st) is not signed"
    );
    let cal = month(&app, &token, "").await;
    assert_eq!(
        cal,
        json!({"month": "202403", "days": [], "today": 1, "signedToday": false, "streak": 30}),
        "29 days of February and 31 January"
    );

    assert!(app.post("/api/user/sign", Some(&token)).await.success());
    let bit: bool = redis(&app)
        .getbit(keys(&app).sign(me, "202403"), 0)
        .await
        .unwrap();
    assert!(bit, "day 1 of March in Shanghai, not 29 February");
    assert_eq!(
        count(&app, &token).await,
        1,
        "the original counts inside the month only"
    );
    assert_eq!(month(&app, &token, "").await["streak"], 31);
    assert_eq!(
        month(&app, &token, "?month=202402").await["days"],
        json!((1..=29).collect::<Vec<_>>())
    );
}

async fn uv(app: &TestApp, path: &str) -> i64 {
    let r = app.get(path, None).await;
    assert!(r.success(), "{path}: {r:?}");
    r.body["data"].as_i64().unwrap()
}

/// Waits until `path` reports `expected` unique visitors, within 2 % (HyperLogLog's standard
/// error is 0.81 %); below 50 that is exact, as Redis's estimate is for such small sets.
async fn wait_for_uv(app: &TestApp, path: &str, expected: i64) {
    let slack = (expected as f64 * 0.02).floor() as i64;
    let mut last = -1;
    wait_until(
        Duration::from_secs(10),
        &format!("{path} = {expected}"),
        async || {
            last = uv(app, path).await;
            (last - expected).abs() <= slack
        },
    )
    .await;
    // And it stays there: no visit is counted twice by a later flush.
    app.state.activity.flush_visits().await;
    assert!(
        (uv(app, path).await - expected).abs() <= slack,
        "{path}: {last}"
    );
}

async fn distinct_users_reading_a_shop_are_counted_once_each(backend: Backend) {
    let app = Arc::new(spawn_app(backend).await);
    app.state.activity.clock().pin(shanghai(2024, 5, 10, 12));
    const USERS: usize = 30;
    let tokens = login_many(&app, USERS).await;
    for round in 0..2 {
        for t in &tokens {
            let r = app.get("/api/shop/1", Some(t)).await;
            assert_eq!(r.body["data"]["id"], 1, "round {round}: {r:?}");
        }
    }
    // A few users read shop 2 as well.
    for t in &tokens[..5] {
        assert!(app.get("/api/shop/2", Some(t)).await.success());
    }
    wait_for_uv(&app, "/api/shop/1/uv", USERS as i64).await;
    wait_for_uv(&app, "/api/shop/2/uv?days=1", 5).await;
    wait_for_uv(&app, "/api/shop/uv/site?days=7", USERS as i64).await;
    // Today's keys, under the original-style names.
    let mut r = redis(&app);
    let n: i64 = r.pfcount(keys(&app).uv_shop(1, "20240510")).await.unwrap();
    assert_eq!(n, USERS as i64);
    assert!(
        r.pttl::<_, i64>(keys(&app).uv_shop(1, "20240510"))
            .await
            .unwrap()
            > 90 * 24 * 3600 * 1000,
        "kept for every day a count can span"
    );

    // The cached shop read is unchanged, and the UV routes do not shadow it (or each other).
    assert_eq!(app.get("/api/shop/3", None).await.body["data"]["id"], 3);
    assert_eq!(app.get("/shop/1/uv", None).await.body["success"], true);
    let r = app.get("/api/shop/uv", None).await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"), "{r:?}");
    // Errors: unknown shop, days out of range or not a number.
    assert_eq!(
        app.get("/api/shop/999999/uv", None).await.code(),
        "shop_not_found"
    );
    for bad in ["0", "91", "-1", "x"] {
        for path in [
            format!("/api/shop/1/uv?days={bad}"),
            format!("/api/shop/uv/site?days={bad}"),
        ] {
            let r = app.get(&path, None).await;
            assert_eq!(
                (r.status, r.code()),
                (400, "invalid_request"),
                "{path}: {r:?}"
            );
        }
    }
    assert!(app.get("/api/shop/1/uv?days=90", None).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_reads_from_one_address_count_once() {
    let app = spawn_app(Backend::Sqlite).await;
    app.state.activity.clock().pin(shanghai(2024, 5, 10, 12));
    for _ in 0..10 {
        assert!(app.get("/api/shop/4", None).await.success());
    }
    let token = app.login("13812345678").await;
    assert!(app.get("/api/shop/4", Some(&token)).await.success());
    wait_for_uv(&app, "/api/shop/4/uv", 2).await;
    let mut r = redis(&app);
    let anonymous: i64 = r
        .pfadd(keys(&app).uv_shop(4, "20240510"), "ip:127.0.0.1")
        .await
        .unwrap();
    assert_eq!(anonymous, 0, "the client address was the anonymous visitor");
    // Unknown shops count nobody.
    assert_eq!(
        app.get("/api/shop/999999", None).await.code(),
        "shop_not_found"
    );
    app.state.activity.flush_visits().await;
    let unknown: i64 = r
        .exists(keys(&app).uv_shop(999_999, "20240510"))
        .await
        .unwrap();
    assert_eq!(unknown, 0);
}

/// Puts `members` into the HyperLogLogs of `shop` on `day` and of the site, straight in Redis.
async fn visited(app: &TestApp, shop: i64, day: &str, members: &[&str]) {
    let mut r = redis(app);
    let _: bool = r
        .pfadd(keys(app).uv_shop(shop, day), members)
        .await
        .unwrap();
    let _: bool = r.pfadd(keys(app).uv_site(day), members).await.unwrap();
}

/// `days=N` counts the union of the last N days' visitors, on one node or a cluster.
async fn counts_span_days(app: &TestApp) {
    app.state.activity.clock().pin(shanghai(2024, 5, 1, 8)); // the window crosses into April
    visited(app, 1, "20240429", &["u:100", "u:101", "ip:192.0.2.1"]).await;
    visited(app, 1, "20240430", &["u:101", "u:102"]).await;
    visited(app, 2, "20240430", &["u:200"]).await;
    // A week that is over (22 to 28 April): a long count merges it into its week key.
    visited(app, 1, "20240424", &["u:300"]).await;
    let token = app.login("13812345678").await;
    let me = user_id(app, &token).await;
    for shop in [1, 2, 3, 4, 5] {
        assert!(
            app.get(&format!("/api/shop/{shop}"), Some(&token))
                .await
                .success()
        );
    }
    wait_for_uv(app, "/api/shop/1/uv", 1).await;
    assert_eq!(
        uv(app, "/api/shop/1/uv?days=2").await,
        3,
        "u:101, u:102, me"
    );
    assert_eq!(uv(app, "/api/shop/1/uv?days=3").await, 5);
    assert_eq!(uv(app, "/api/shop/1/uv?days=90").await, 6);
    let week: i64 = redis(app)
        .pfcount(keys(app).uv_shop_week(1, "20240422"))
        .await
        .unwrap();
    assert_eq!(week, 1, "the week of 22 April, merged");
    assert_eq!(uv(app, "/api/shop/2/uv?days=2").await, 2);
    wait_for_uv(app, "/api/shop/5/uv", 1).await;
    assert_eq!(uv(app, "/api/shop/uv/site").await, 1, "today: only me");
    assert_eq!(uv(app, "/api/shop/uv/site?days=3").await, 6);
    assert_eq!(uv(app, "/api/shop/uv/site?days=9").await, 7);
    let mine: i64 = redis(app)
        .pfadd(keys(app).uv_site("20240501"), format!("u:{me}"))
        .await
        .unwrap();
    assert_eq!(mine, 0, "the site's visitor is the user");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_are_the_union_of_the_days() {
    counts_span_days(&spawn_app(Backend::Sqlite).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_and_visitor_counts_work_on_a_redis_cluster() {
    let cluster = RedisCluster::start().await;
    let url = cluster.urls().join(",");
    let app = spawn_app_with(Backend::Sqlite, move |c| c.redis_url = Some(url)).await;
    assert!(matches!(app.state.redis, RedisConn::Cluster(_)));
    // Shops 1..=5 and the site hash to several slots: the flush sends one pipeline per slot.
    let slots: std::collections::HashSet<u16> = (1..=5)
        .map(|s| hmdp::testing::kv::key_slot(&keys(&app).uv_shop(s, "20240501")))
        .chain([hmdp::testing::kv::key_slot(&keys(&app).uv_site("20240501"))])
        .collect();
    assert!(slots.len() > 2, "{slots:?}");
    counts_span_days(&app).await;

    let token = app.login("13812345679").await;
    assert!(app.post("/api/user/sign", Some(&token)).await.success());
    assert_eq!(count(&app, &token).await, 1);
    assert_eq!(month(&app, &token, "").await["days"], json!([1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_sends_the_buffered_visits() {
    // The longest flush interval: only the shutdown flush can have sent the visit in time.
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.social.uv_flush = Duration::from_millis(1000)
    })
    .await;
    app.state.activity.clock().pin(shanghai(2024, 5, 10, 12));
    assert!(app.get("/api/shop/1", None).await.success());
    let stats = app.state.activity.uv_stats();
    assert_eq!(
        (stats.buffered.get(), stats.flushed.get()),
        (1, 0),
        "buffered, not sent"
    );
    let key = keys(&app).uv_shop(1, "20240510");
    app.state.activity.shutdown().await;
    let n: i64 = redis(&app).pfcount(&key).await.unwrap();
    assert_eq!(n, 1, "sent by the shutdown");
    assert_eq!((stats.buffered.get(), stats.flushed.get()), (0, 1));
    // Shutting down twice (the server does it again when it stops) is harmless.
    app.state.activity.shutdown().await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visit_counters_are_exported() {
    let app = spawn_app(Backend::Sqlite).await;
    assert!(app.get("/api/shop/1", None).await.success());
    app.state.activity.flush_visits().await;
    let text = app.metrics().await;
    for name in [
        "hmdp_uv_buffered_visits 0",
        "hmdp_uv_visits_flushed_total 1",
        "hmdp_uv_visits_dropped_total 0",
        "hmdp_uv_flush_failures_total 0",
    ] {
        assert!(text.contains(name), "{name} in:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visits_wait_in_memory_while_redis_is_away() {
    let port = free_port();
    let mut server = RedisServer::start_on(port).await;
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.redis_url = Some(format!("redis://127.0.0.1:{port}"));
    })
    .await;
    app.state.activity.clock().pin(shanghai(2024, 5, 10, 12));
    server.kill();
    // What a shop read records (the read itself needs Redis for the cache).
    let me = Visitor::User(UserId::new(7).unwrap());
    app.state.activity.record_visit(ShopId::new(1).unwrap(), me);
    app.state.activity.flush_visits().await;
    let stats = app.state.activity.uv_stats();
    assert!(stats.flush_failures.get() >= 1);
    assert_eq!(stats.buffered.get(), 1, "the visit was put back");
    assert_eq!(stats.dropped.get(), 0);

    // Redis comes back (empty): the flush task delivers the visit on its own.
    let _server = RedisServer::start_on(port).await;
    let key = keys(&app).uv_shop(1, "20240510");
    let mut direct = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    wait_until(
        Duration::from_secs(15),
        "the visit reaching Redis",
        async || direct.pfcount::<_, i64>(&key).await.unwrap() == 1,
    )
    .await;
    assert_eq!(stats.buffered.get(), 0);
}

/// The 90 days up to 10 May 2024 (`yyyyMMdd`), the latest first.
fn last_90_days() -> Vec<String> {
    let today = chrono::NaiveDate::from_ymd_opt(2024, 5, 10).unwrap();
    (0..90u64)
        .map(|back| {
            (today - chrono::Days::new(back))
                .format("%Y%m%d")
                .to_string()
        })
        .collect()
}

/// Puts visitors `u:<n>` for each `n` of `users(back)` into the site's and `shop`'s day `back`
/// days before 10 May 2024, for the 90 days up to it, straight in Redis.
async fn fill_days(app: &TestApp, shop: i64, users: impl Fn(usize) -> Vec<usize>) {
    let mut r = redis(app);
    for (back, day) in last_90_days().iter().enumerate() {
        let members: Vec<String> = users(back).iter().map(|n| format!("u:{n}")).collect();
        let _: () = r.pfadd(keys(app).uv_site(day), &members).await.unwrap();
        let _: () = r
            .pfadd(keys(app).uv_shop(shop, day), &members)
            .await
            .unwrap();
    }
}

/// `PFCOUNT` over the last `days` of the 90 day keys of [`last_90_days`], as one command.
async fn pfcount_days(app: &TestApp, day_key: impl Fn(&str) -> String, days: usize) -> i64 {
    let keys: Vec<String> = last_90_days()[..days].iter().map(|d| day_key(d)).collect();
    redis(app).pfcount(keys).await.unwrap()
}

/// Visitors of every day, the neighbouring days overlapping; every ninth day busy (dense).
fn overlapping_visitors(back: usize) -> Vec<usize> {
    let n = if back.is_multiple_of(9) { 4_000 } else { 300 };
    (back * 200..back * 200 + n).collect()
}

/// A page asking for the site's and a shop's last 90 days at once, from one address, gets
/// both: the closed weeks are read from their merged keys, not day by day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_gets_the_site_s_and_a_shop_s_90_day_counts_together() {
    let app = spawn_app(Backend::Sqlite).await;
    app.state.activity.clock().pin(shanghai(2024, 5, 10, 12));
    fill_days(&app, 1, overlapping_visitors).await;
    let page = crate::helpers::client_from([127, 0, 0, 2]);
    let (site, shop) = tokio::join!(
        app.send(page.get(app.url("/api/shop/uv/site?days=90"))),
        app.send(page.get(app.url("/api/shop/1/uv?days=90"))),
    );
    assert!(site.success(), "the site's count: {site:?}");
    assert!(shop.success(), "the shop's count: {shop:?}");
    let day_site = pfcount_days(&app, |d| keys(&app).uv_site(d), 90).await;
    assert_eq!(site.body["data"].as_i64(), Some(day_site));
    let day_shop = pfcount_days(&app, |d| keys(&app).uv_shop(1, d), 90).await;
    assert_eq!(shop.body["data"].as_i64(), Some(day_shop));
    // The rest of such a page (the last 7 and 30 days of both) is answered as well.
    for path in [
        "/api/shop/uv/site?days=7",
        "/api/shop/1/uv?days=7",
        "/api/shop/uv/site?days=30",
        "/api/shop/1/uv?days=30",
    ] {
        let r = app.send(page.get(app.url(path))).await;
        assert!(r.success(), "{path}: {r:?}");
    }
}

/// A count over merged weeks is the count over the days, exactly (a union of HyperLogLogs is the
/// maximum of each register), for spans that start and end anywhere in a week; a week is
/// merged once, kept as long as its Sunday's day, and not merged again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_weeks_count_exactly_what_their_days_count() {
    let app = spawn_app(Backend::Sqlite).await;
    // Friday 10 May 2024: its week began on Monday 6 May.
    app.state.activity.clock().pin(shanghai(2024, 5, 10, 12));
    fill_days(&app, 2, overlapping_visitors).await;
    let mut host = 2;
    for days in [5, 6, 7, 11, 12, 18, 30, 45, 61, 89, 90] {
        host += 1;
        let client = crate::helpers::client_from([127, 0, 0, host]);
        for (path, day_key) in [
            (
                format!("/api/shop/uv/site?days={days}"),
                Box::new(|d: &str| keys(&app).uv_site(d)) as Box<dyn Fn(&str) -> String>,
            ),
            (
                format!("/api/shop/2/uv?days={days}"),
                Box::new(|d: &str| keys(&app).uv_shop(2, d)),
            ),
        ] {
            let r = app.send(client.get(app.url(&path))).await;
            assert!(r.success(), "{path}: {r:?}");
            let by_days = pfcount_days(&app, day_key, days).await;
            assert_eq!(r.body["data"].as_i64(), Some(by_days), "{path}");
        }
    }
    // The twelve weeks that are over inside 90 days, each merged from its seven days.
    let mut r = redis(&app);
    let mut monday = chrono::NaiveDate::from_ymd_opt(2024, 4, 29).unwrap();
    for back_weeks in 1..=12u64 {
        let name = monday.format("%Y%m%d").to_string();
        let days: Vec<String> = (0..7u64)
            .map(|d| {
                let day = monday + chrono::Days::new(d);
                keys(&app).uv_shop(2, &day.format("%Y%m%d").to_string())
            })
            .collect();
        let week = keys(&app).uv_shop_week(2, &name);
        let (merged, by_days): (i64, i64) = (
            r.pfcount(&week).await.unwrap(),
            r.pfcount(&days).await.unwrap(),
        );
        assert_eq!(merged, by_days, "week of {name}");
        // It lives as long as its Sunday's key would: 92 days from that Sunday (two days
        // before today's, 12 May, a multiple of weeks back).
        let ttl: i64 = r.pttl(&week).await.unwrap();
        let day_ms = 24 * 3600 * 1000;
        let expected = (92 - (7 * back_weeks as i64 - 2)) * day_ms;
        assert!(
            (ttl - expected).abs() <= day_ms,
            "week of {name}: {ttl} ms, about {expected}"
        );
        monday = monday - chrono::Days::new(7);
    }
    // Nothing older than the oldest week a count spans was merged.
    let older: i64 = r
        .exists(keys(&app).uv_shop_week(2, &monday.format("%Y%m%d").to_string()))
        .await
        .unwrap();
    assert_eq!(older, 0);
}

/// A visit of a day whose week is already merged (a flush that came late, or visits kept while
/// Redis was away) is counted in the week too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_visit_sent_after_its_week_was_merged_is_counted() {
    let app = spawn_app(Backend::Sqlite).await;
    let activity = &app.state.activity;
    let shop = ShopId::new(3).unwrap();
    let user = |id| Visitor::User(UserId::new(id).unwrap());
    let (sunday, tuesday) = (shanghai(2024, 5, 5, 12), shanghai(2024, 5, 7, 12));
    activity.clock().pin(sunday);
    activity.record_visit(shop, user(1));
    activity.flush_visits().await;
    // Tuesday: the week of 29 April is over, and a count merges it.
    activity.clock().pin(tuesday);
    assert_eq!(uv(&app, "/api/shop/3/uv?days=9").await, 1);
    let week = keys(&app).uv_shop_week(3, "20240429");
    let merged: i64 = redis(&app).pfcount(&week).await.unwrap();
    assert_eq!(merged, 1, "merged on the first count that needed it");
    // An instance whose buffer still held a visit of that Sunday sends it now.
    activity.clock().pin(sunday);
    activity.record_visit(shop, user(2));
    activity.clock().pin(tuesday);
    activity.flush_visits().await;
    assert_eq!(redis(&app).pfcount::<_, i64>(&week).await.unwrap(), 2);
    // A new span (the last answer is shared for a second): both visitors.
    assert_eq!(uv(&app, "/api/shop/3/uv?days=10").await, 2);
    assert_eq!(uv(&app, "/api/shop/uv/site?days=9").await, 2);
}

/// Calls and µs of Redis's HyperLogLog counting commands (`PFCOUNT`, `PFMERGE`) since the last
/// `CONFIG RESETSTAT`, from `INFO commandstats`.
async fn hll_command_cost(r: &mut redis::aio::MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(r)
        .await
        .unwrap();
    let (mut calls, mut usec) = (0, 0);
    for line in info.lines() {
        let Some(fields) = ["cmdstat_pfcount:", "cmdstat_pfmerge:"]
            .iter()
            .find_map(|p| line.strip_prefix(p))
        else {
            continue;
        };
        for field in fields.split(',') {
            match field.split_once('=') {
                Some(("calls", n)) => calls += n.parse::<u64>().unwrap(),
                Some(("usec", n)) => usec += n.parse::<u64>().unwrap(),
                _ => {}
            }
        }
    }
    (calls, usec)
}

/// What a flood of counts got and what it cost Redis.
struct Flood {
    /// The answers' HTTP statuses.
    statuses: Vec<u16>,
    /// `PFCOUNT`/`PFMERGE` calls and µs during the flood.
    calls: u64,
    usec: u64,
    /// Redis's time in those commands as a share of one core over the flood.
    share: f64,
}

impl Flood {
    fn count(&self, status: u16) -> usize {
        self.statuses.iter().filter(|&&s| s == status).count()
    }
}

/// Five client addresses ask for visitor counts as fast as they can for `span`, each asking
/// `path(i)` for its i-th request; Redis (`r`, the app's private one) counts what it spent.
async fn count_flood(
    app: &TestApp,
    r: &mut redis::aio::MultiplexedConnection,
    span: Duration,
    path: fn(usize) -> String,
) -> Flood {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(r)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let until = tokio::time::Instant::now() + span;
    let loops = (2..=6u8).flat_map(|host| {
        let client = crate::helpers::client_from([127, 0, 0, host]);
        (0..4).map(move |_| (client.clone(), host))
    });
    let tasks = loops.map(|(client, host)| {
        let base = app.url("");
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            let mut i = usize::from(host) * 7;
            while tokio::time::Instant::now() < until {
                let r = client.get(format!("{base}{}", path(i))).send().await;
                statuses.push(r.map_or(0, |r| r.status().as_u16()));
                i += 1;
            }
            statuses
        })
    });
    let mut statuses = Vec::new();
    for t in tasks.collect::<Vec<_>>() {
        statuses.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed();
    let (calls, usec) = hll_command_cost(r).await;
    let flood = Flood {
        share: usec as f64 / elapsed.as_micros() as f64,
        statuses,
        calls,
        usec,
    };
    eprintln!(
        "{} requests, {} answered, {} refused: {calls} counting commands, {usec} µs of Redis in {elapsed:?} ({:.2} % of one core)",
        flood.statuses.len(),
        flood.count(200),
        flood.count(429),
        flood.share * 100.0
    );
    flood
}

/// The count routes are public and a 90-day count of busy days is ~90 dense HyperLogLogs merged
/// in Redis's one thread: a flood from a few addresses, each within its request limit, must not
/// take Redis from everyone else. Bounded by Redis's own accounting of the counting commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_visitor_counts_costs_redis_almost_nothing() {
    // A private Redis, so its command statistics are this test's alone.
    let server = RedisServer::start().await;
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.redis_url = Some(server.url());
        c.rate_limit_ip = 200; // the default: every address up to its own limit
    })
    .await;
    app.state.activity.clock().pin(shanghai(2024, 5, 10, 12));
    let mut r = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // Ninety busy days, for the site and shop 1: 5,000 visitors a day, each day's HyperLogLog
    // dense (12 KiB), as on a real site.
    const PER_DAY: usize = 5_000;
    fill_days(&app, 1, |back| {
        (0..PER_DAY).map(move |i| back * PER_DAY + i).collect()
    })
    .await;
    let encoding: String = redis::cmd("PFDEBUG")
        .arg("ENCODING")
        .arg(keys(&app).uv_site("20240301"))
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(encoding, "dense", "the days are busy");

    // The same long counts, over and over.
    let same = count_flood(&app, &mut r, Duration::from_secs(2), |i| {
        if i % 2 == 0 {
            "/api/shop/uv/site?days=90".into()
        } else {
            "/api/shop/1/uv?days=90".into()
        }
    })
    .await;
    assert!(same.count(200) >= 100, "the flood was answered");
    assert!(
        same.share < 0.05,
        "a flood of the same counts took {:.1} % of Redis ({} calls, {} µs)",
        same.share * 100.0,
        same.calls,
        same.usec
    );
    let site = uv(&app, "/api/shop/uv/site?days=90").await;
    let exact = (90 * PER_DAY) as i64;
    assert!((site - exact).abs() <= exact / 50, "{site} ≈ {exact}");

    // Every span of every scope, so little is shared: the budget bounds it.
    let varied = count_flood(&app, &mut r, Duration::from_secs(2), |i| {
        let days = i % 90 + 1;
        if i % 3 == 0 {
            format!("/api/shop/uv/site?days={days}")
        } else {
            format!("/api/shop/{}/uv?days={days}", i % 2 + 1)
        }
    })
    .await;
    assert!(
        varied.share < 0.05,
        "a flood of varied counts took {:.1} % of Redis ({} calls, {} µs)",
        varied.share * 100.0,
        varied.calls,
        varied.usec
    );
    let r = app.get("/api/shop/uv/site?days=37", None).await;
    assert!(
        r.success() || (r.status, r.code()) == (429, "rate_limited"),
        "{r:?}"
    );
}

/// One client asking for every long span cannot spend the whole counting budget: past its own
/// share it is refused, and another client's new count is still computed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_spend_everyone_s_counts() {
    let app = spawn_app(Backend::Sqlite).await;
    app.state.activity.clock().pin(shanghai(2024, 5, 10, 12));
    let greedy = crate::helpers::client_from([127, 0, 0, 2]);
    let mut refused = 0;
    for days in 1..=90 {
        let url = app.url(&format!("/api/shop/uv/site?days={days}"));
        let r = app.send(greedy.get(url)).await;
        if r.status == 429 {
            assert_eq!(r.code(), "rate_limited", "{r:?}");
            assert!(r.headers.contains_key("retry-after"), "{r:?}");
            refused += 1;
        }
    }
    assert!(
        refused >= 60,
        "the greedy client was refused past its share: {refused}"
    );
    let other = crate::helpers::client_from([127, 0, 0, 3]);
    let r = app.send(other.get(app.url("/api/shop/1/uv?days=90"))).await;
    assert!(r.success(), "another client's count: {r:?}");
}
