//! Redis going away mid-flight: clear 503s, nothing wrongly reported as "log in again",
//! recovery when it returns.

use std::time::{Duration, Instant};

use crate::helpers::{
    Backend, Patience, RedisServer, create_sale, free_port, grab_raw, order_id_of, spawn_app_with,
    wait_until,
};

/// A generous bound for "fast": far above a loaded CI machine's scheduling noise, far below
/// the 10 s request timeout that a request hanging on the dead Redis would run into.
const FAST: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_going_away_answers_503_and_recovers() {
    let port = free_port();
    let redis = RedisServer::start_on(port).await;
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.redis_url = Some(format!("redis://127.0.0.1:{port}"));
    })
    .await;
    let token = app.login("13812345678").await;
    assert!(app.get("/api/user/me", Some(&token)).await.success());
    let voucher = create_sale(&app, 10, -60, 3600).await;
    let grab = format!("/api/voucher-order/seckill/{voucher}");

    drop(redis);
    // The session cache trusts a session it read within its window, but only while its
    // invalidation subscription lives: with Redis gone it forgets every session at once.
    wait_until(
        Duration::from_secs(5),
        "the sessions in memory forgotten with the subscription",
        async || app.get("/api/user/me", Some(&token)).await.status == 503,
    )
    .await;

    // Each answer is a 503 in the envelope, and it comes at once: nothing waits for the
    // request timeout. A logged-in user is told to retry, not to log in again.
    let timed = |r: &crate::helpers::Resp, started: Instant, what: &str| {
        let took = started.elapsed();
        assert_eq!((r.status, r.code()), (503, "unavailable"), "{what}: {r:?}");
        assert!(took < FAST, "{what}: answered after {took:?}");
        assert!(
            !r.msg().contains("127.0.0.1"),
            "{what}: no internals in the message: {r:?}"
        );
    };
    let started = Instant::now();
    let r = app.get("/api/user/me", Some(&token)).await;
    timed(&r, started, "GET /user/me");
    let started = Instant::now();
    let r = app.send_code("13912345678").await;
    timed(&r, started, "POST /user/code");
    let started = Instant::now();
    let r = app.post(&grab, Some(&token)).await;
    timed(&r, started, "POST /voucher-order/seckill/{id}");
    let h = app.get("/health", None).await;
    assert_eq!(h.status, 503);
    assert_eq!(h.body["data"]["redis"], "down");
    assert_eq!(h.body["data"]["database"], "ok");
    // Routes that do not need Redis keep working.
    assert!(app.get("/api/shop/1", None).await.success());

    // Redis comes back (empty: it kept nothing): the service recovers on its own.
    let _redis = RedisServer::start_on(port).await;
    let patience = Patience::new(Duration::from_secs(15)).every(Duration::from_millis(100));
    wait_until(patience, "the service recovered", async || {
        app.get("/health", None).await.status == 200
    })
    .await;
    assert_eq!(app.get("/api/user/me", Some(&token)).await.status, 401);
    let token = app.login("13812345678").await;
    assert!(app.get("/api/user/me", Some(&token)).await.success());
    // The flash sale too: the voucher is loaded again from the database, and the order is taken.
    let r = app.post(&grab, Some(&token)).await;
    assert!(r.success(), "{r:?}");
    assert!(r.body["data"].as_i64().is_some(), "an order id: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_means_a_fast_timeout_in_the_envelope() {
    let port = free_port();
    let redis = RedisServer::start_on(port).await;
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.redis_url = Some(format!("redis://127.0.0.1:{port}"));
        c.request_timeout = Duration::from_millis(300);
    })
    .await;
    redis.pause();
    let started = Instant::now();
    let r = app.send_code("13812345678").await;
    let waited = started.elapsed();
    redis.resume();
    assert_eq!((r.status, r.code()), (503, "timeout"), "{r:?}");
    assert!(waited < Duration::from_secs(5), "answered after {waited:?}");
    // Once Redis wakes up the service answers normally again.
    let patience = Patience::new(Duration::from_secs(10)).every(Duration::from_millis(50));
    wait_until(patience, "the service recovered", async || {
        app.get("/health", None).await.success()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_going_away_loses_nothing() {
    let db = crate::helpers::TestDatabase::create().await;
    let (via_proxy, proxy) = crate::helpers::mysql_via_proxy(&db.url).await;
    let dir = tempfile::tempdir().unwrap();
    let config = crate::helpers::test_config(via_proxy, dir.path());
    let app = crate::helpers::spawn_with_config(config, Backend::MySql, Some(db), dir).await;
    let token = app.login("13812345678").await;

    // A code is requested, then the database goes away before the login.
    assert!(app.send_code("13912345678").await.success());
    let code = app.sms.last_code_for("13912345678").unwrap();
    proxy.cut();

    let r = app.login_with("13912345678", &code).await;
    assert_eq!((r.status, r.code()), (503, "unavailable"), "{r:?}");
    let h = app.get("/health", None).await;
    assert_eq!(
        (h.status, h.body["data"]["database"].as_str()),
        (503, Some("down"))
    );
    // Sessions live in Redis: a logged-in user keeps working for what needs no database.
    assert!(app.get("/api/user/me", Some(&token)).await.success());

    // The database returns: the same code still works, because nothing was consumed.
    proxy.restore();
    let patience = Patience::new(Duration::from_secs(20)).every(Duration::from_millis(200));
    wait_until(patience, "the login after the recovery", async || {
        let r = app.login_with("13912345678", &code).await;
        assert!(
            r.success() || r.code() == "unavailable",
            "only 'retry later' while recovering: {r:?}"
        );
        r.success()
    })
    .await;
}

/// A Redis without an append-only file, whose grabs no replica confirms, would lose the accepted
/// orders not yet written: `/health` says so (still a 200), and a sale that vanished from it is
/// counted when a grab reloads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_would_lose_orders_is_named_and_its_losses_counted() {
    let port = free_port();
    let redis = RedisServer::start_on(port).await;
    let url = format!("redis://127.0.0.1:{port}");
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.redis_url = Some(url.clone());
        c.seckill.worker = false;
    })
    .await;
    let h = app.get("/health", None).await;
    assert_eq!(h.status, 200, "a warning is no outage: {h:?}");
    assert_eq!(h.body["data"]["status"], "ok");
    assert_eq!(
        h.body["data"]["warnings"],
        serde_json::json!(["redis_not_durable"]),
        "{h:?}"
    );

    let voucher = create_sale(&app, 10, -60, 3600).await;
    let first = app.login("13812345601").await;
    assert!(order_id_of(&grab_raw(&app, voucher, &first).await.1).is_some());
    let reloads = |cause: &str| format!(r#"hmdp_seckill_reloads_total{{cause="{cause}"}}"#);
    let count = async |cause: &str| -> u64 {
        let text = app.metrics().await;
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{} ", reloads(cause))))
            .unwrap_or_else(|| panic!("no {} in {text}", reloads(cause)))
            .parse()
            .unwrap()
    };
    assert_eq!(count("missing").await, 0, "a new sale is loaded at once");

    // Redis loses everything: the sale, the sessions, the queued order.
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut app.state.redis.clone())
        .await
        .unwrap();
    let second = app.login("13812345602").await;
    assert!(order_id_of(&grab_raw(&app, voucher, &second).await.1).is_some());
    assert_eq!(count("missing").await, 1);
    assert_eq!(count("incomplete").await, 0);

    // Only the buyers are lost this time (a third buyer: this instance remembers the second).
    let _: () = redis::cmd("DEL")
        .arg(app.state.keys.seckill_buyers(0, voucher))
        .query_async(&mut app.state.redis.clone())
        .await
        .unwrap();
    let third = app.login("13812345603").await;
    assert!(order_id_of(&grab_raw(&app, voucher, &third).await.1).is_some());
    assert_eq!(count("incomplete").await, 1);
    assert_eq!(count("missing").await, 1);
    drop(app);

    // With an append-only file, or with replicas confirming each grab, nothing to say.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_string_lossy().into_owned();
    let aof = RedisServer::start_with(free_port(), &["--appendonly", "yes", "--dir", &d]).await;
    for (redis_url, wait_replicas) in [(aof.url(), 0), (redis.url(), 1)] {
        let app = spawn_app_with(Backend::Sqlite, |c| {
            c.redis_url = Some(redis_url);
            c.seckill.worker = false;
            c.seckill.wait_replicas = wait_replicas;
        })
        .await;
        let h = app.get("/health", None).await;
        assert_eq!(h.status, 200, "{h:?}");
        assert!(h.body["data"].get("warnings").is_none(), "{h:?}");
    }
}
