//! An order's life after the grab, end to end on both databases: pay through the gateway's
//! signed notices (forged, replayed, wrong), cancel, close on timeout, use, refund; the unit of
//! a closed order back in the database and in Redis exactly once, sold again to someone else;
//! a payment racing the close; a worker killed with deadlines pending.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use serde_json::Value;

use crate::{
    both_backends,
    helpers::{
        ADMIN_TOKEN, Backend, ChildGuard, PAY_SECRET, Patience, TestApp, code_of, create_sale,
        db_orders_in, db_statuses, db_stock, grab_raw, login_many, notice, open_payment,
        order_id_of, order_status, order_view, post_notice, prior_order_of, reconcile_one,
        redis_stock, signature, signed_notice, spawn_app_with, wait_for_orders, wait_for_status,
        wait_until,
    },
};

both_backends!(
    an_order_not_yet_written_is_pending,
    paying_using_and_refunding_move_each_order_once,
    forged_wrong_and_replayed_notices_change_nothing_twice,
    a_cancelled_unit_comes_back_once_and_sells_to_someone_else,
    unpaid_orders_close_at_their_deadline_and_their_units_sell_again,
    sync_mode_orders_close_at_their_deadline_too,
    payments_racing_the_close_end_paid_or_owed_back,
    a_killed_worker_leaves_no_deadline_behind,
);

/// A grab that is accepted: the order's id.
async fn grab(app: &TestApp, voucher: i64, token: &str) -> i64 {
    let (status, body) = grab_raw(app, voucher, token).await;
    assert_eq!(status, 200);
    order_id_of(&body).unwrap_or_else(|| panic!("grab refused: {body}"))
}

/// The `hmdp_order_transitions_total` sample of one move.
async fn transitions(app: &TestApp, from: &str, to: &str) -> u64 {
    let text = app.metrics().await;
    let wanted = format!("hmdp_order_transitions_total{{from=\"{from}\",to=\"{to}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&wanted))
        .map_or(0, |v| v.trim().parse().unwrap())
}

async fn paying_using_and_refunding_move_each_order_once(backend: Backend) {
    let app = Arc::new(spawn_app_with(backend, |_| {}).await);
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let users = login_many(&app, 2).await;
    let (a, b) = (&users[0], &users[1]);
    let first = grab(&app, voucher, a).await;
    let second = grab(&app, voucher, b).await;
    wait_for_orders(&app, voucher, 2).await;

    let view = order_view(&app, a, first).await;
    assert_eq!(view["status"], 1);
    assert_eq!(view["statusName"], "unpaid");
    let deadline = view["payDeadlineMillis"].as_i64().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    assert!(
        (now + 890_000..=now + 900_000).contains(&deadline),
        "the default deadline is 900 s after the grab: {deadline} vs now {now}"
    );

    // The same trade number on every call while unpaid; the amount is the voucher's payValue.
    let (trade, amount) = open_payment(&app, a, first).await;
    assert_eq!(amount, 990);
    assert_eq!(open_payment(&app, a, first).await, (trade.clone(), amount));
    let r = app
        .post(&format!("/api/voucher-order/{first}/pay"), Some(b))
        .await;
    assert_eq!(r.code(), "order_not_found", "only the owner pays: {r:?}");
    let ticket = app
        .post(&format!("/api/voucher-order/{first}/pay"), Some(a))
        .await;
    assert_eq!(ticket.body["data"]["expiresAtMillis"], deadline);

    let paid_before = transitions(&app, "unpaid", "paid").await;
    let r = signed_notice(&app, first, &trade, amount, "paid").await;
    assert!(r.success(), "{r:?}");
    assert_eq!(r.body["data"]["status"], 2);
    assert_eq!(r.body["data"]["payment"], "paid");
    assert_eq!(r.body["data"]["replayed"], false);
    let view = order_view(&app, a, first).await;
    assert_eq!(view["statusName"], "paid");
    assert_eq!(view["payment"]["tradeNo"], trade.as_str());
    assert_eq!(view["payment"]["state"], "paid");
    assert!(view["order"]["payTime"].is_string(), "{view}");
    assert!(view.get("payDeadlineMillis").is_none(), "only while unpaid");
    assert_eq!(transitions(&app, "unpaid", "paid").await, paid_before + 1);

    // Paid: no more paying or cancelling.
    let r = app
        .post(&format!("/api/voucher-order/{first}/pay"), Some(a))
        .await;
    assert_eq!(r.code(), "order_not_payable");
    assert_eq!(r.body["data"]["statusName"], "paid");
    let r = app
        .post(&format!("/api/voucher-order/{first}/cancel"), Some(a))
        .await;
    assert_eq!(r.code(), "order_not_cancellable");

    // Use: the shop's side, with the admin token; twice answers the same.
    let r = app
        .post(&format!("/api/voucher-order/{first}/use"), Some(a))
        .await;
    assert_eq!((r.status, r.code()), (403, "admin_required"));
    for _ in 0..2 {
        let r = app
            .send(
                app.client
                    .post(app.url(&format!("/api/voucher-order/{first}/use")))
                    .header("x-admin-token", ADMIN_TOKEN),
            )
            .await;
        assert!(r.success(), "{r:?}");
        assert_eq!(r.body["data"]["status"], 3);
        assert_eq!(r.body["data"]["statusName"], "used");
    }
    let r = app
        .post(&format!("/api/voucher-order/{first}/refund"), Some(a))
        .await;
    assert_eq!(
        r.code(),
        "order_not_refundable",
        "a used voucher is not refunded"
    );

    // Refund: 2 → 5 on asking, 6 once the gateway confirms; the unit stays sold.
    let (trade2, amount2) = open_payment(&app, b, second).await;
    assert!(
        signed_notice(&app, second, &trade2, amount2, "paid")
            .await
            .success()
    );
    for _ in 0..2 {
        let r = app
            .post(&format!("/api/voucher-order/{second}/refund"), Some(b))
            .await;
        assert!(r.success(), "{r:?}");
        assert_eq!(r.body["data"]["statusName"], "refunding");
        assert_eq!(r.body["data"]["payment"]["state"], "refunding");
    }
    let r = signed_notice(&app, second, &trade2, amount2, "refunded").await;
    assert!(r.success(), "{r:?}");
    assert_eq!(r.body["data"]["status"], 6);
    let view = order_view(&app, b, second).await;
    assert_eq!(view["statusName"], "refunded");
    assert_eq!(view["payment"]["state"], "refunded");
    assert!(view["order"]["refundTime"].is_string(), "{view}");
    assert_eq!(
        db_stock(&app, voucher).await,
        3,
        "a refund returns no stock"
    );

    // The list shows the same.
    let r = app.get("/api/voucher-order/of/me", Some(b)).await;
    assert_eq!(r.body["data"][0]["statusName"], "refunded");
    assert_eq!(r.body["data"][0]["payment"]["state"], "refunded");
    for (from, to) in [
        ("paid", "used"),
        ("paid", "refunding"),
        ("refunding", "refunded"),
    ] {
        assert_eq!(transitions(&app, from, to).await, 1, "{from} → {to}");
    }
}

async fn an_order_not_yet_written_is_pending(backend: Backend) {
    // No worker: accepted orders stay on their way.
    let app = Arc::new(spawn_app_with(backend, |c| c.seckill.worker = false).await);
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let users = login_many(&app, 2).await;
    let id = grab(&app, voucher, &users[0]).await;
    let view = order_view(&app, &users[0], id).await;
    assert_eq!(view["state"], "pending");
    assert!(
        view["payDeadlineMillis"].is_i64(),
        "the deadline is known at once: {view}"
    );
    for action in ["pay", "cancel", "refund"] {
        let r = app
            .post(
                &format!("/api/voucher-order/{id}/{action}"),
                Some(&users[0]),
            )
            .await;
        assert_eq!(r.code(), "order_pending", "{action}: {r:?}");
        assert_eq!(r.headers["retry-after"], "1");
        let r = app
            .post(
                &format!("/api/voucher-order/{id}/{action}"),
                Some(&users[1]),
            )
            .await;
        assert_eq!(
            r.code(),
            "order_not_found",
            "{action} by another user: {r:?}"
        );
    }
}

async fn forged_wrong_and_replayed_notices_change_nothing_twice(backend: Backend) {
    let app = Arc::new(spawn_app_with(backend, |_| {}).await);
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let users = login_many(&app, 1).await;
    let token = &users[0];
    let id = grab(&app, voucher, token).await;
    // Not written yet, or written: either way a payment needs the row.
    wait_for_orders(&app, voucher, 1).await;
    let (trade, amount) = open_payment(&app, token, id).await;
    let good = notice(id, &trade, amount, "paid");

    // Forged: no signature, another secret's, a signature of other bytes.
    let r = post_notice(&app, &good, None).await;
    assert_eq!((r.status, r.code()), (401, "bad_signature"));
    let other = hmdp::testing::order_life::sign(
        &hmdp::config::Secret::new("not-the-gateway-secret-123"),
        &good,
    );
    let r = post_notice(&app, &good, Some(&other)).await;
    assert_eq!((r.status, r.code()), (401, "bad_signature"));
    let tampered = notice(id, &trade, 1, "paid");
    let r = post_notice(&app, &tampered, Some(&signature(&good))).await;
    assert_eq!((r.status, r.code()), (401, "bad_signature"));
    // Signed but wrong: amount, trade number, order, shape.
    let r = signed_notice(&app, id, &trade, amount + 1, "paid").await;
    assert_eq!((r.status, r.code()), (409, "wrong_amount"));
    assert_eq!(r.body["data"]["expected"], amount);
    let r = signed_notice(&app, id, "not-the-trade", amount, "paid").await;
    assert_eq!((r.status, r.code()), (409, "unknown_trade"));
    let r = signed_notice(&app, id + 1, &trade, amount, "paid").await;
    assert_eq!((r.status, r.code()), (404, "unknown_order"));
    let r = signed_notice(&app, id, &trade, amount, "refunded").await;
    assert_eq!(
        (r.status, r.code()),
        (409, "unexpected_notice"),
        "a refund nobody asked for"
    );
    let junk = br#"{"orderId": 5}"#;
    let r = post_notice(&app, junk, Some(&signature(junk))).await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    assert_eq!(order_status(&app, token, id).await, 1, "nothing changed");

    // The real one, then replayed: applied once, answered the same.
    let before = transitions(&app, "unpaid", "paid").await;
    let first = post_notice(&app, &good, Some(&signature(&good))).await;
    assert!(first.success(), "{first:?}");
    assert_eq!(first.body["data"]["replayed"], false);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (app, good) = (app.clone(), good.clone());
            tokio::spawn(async move { post_notice(&app, &good, Some(&signature(&good))).await })
        })
        .collect();
    for t in tasks {
        let r = t.await.unwrap();
        assert!(r.success(), "{r:?}");
        assert_eq!(r.body["data"]["status"], 2);
        assert_eq!(r.body["data"]["payment"], "paid");
        assert_eq!(r.body["data"]["replayed"], true);
    }
    assert_eq!(transitions(&app, "unpaid", "paid").await, before + 1);
}

async fn a_cancelled_unit_comes_back_once_and_sells_to_someone_else(backend: Backend) {
    let app = Arc::new(spawn_app_with(backend, |_| {}).await);
    let voucher = create_sale(&app, 1, -60, 3600).await;
    let users = login_many(&app, 3).await;
    let (a, b, c) = (&users[0], &users[1], &users[2]);
    let id = grab(&app, voucher, a).await;
    wait_for_orders(&app, voucher, 1).await;
    // B is refused: sold out (and each instance remembers it).
    let (_, body) = grab_raw(&app, voucher, b).await;
    assert_eq!(code_of(&body), "sold_out");

    let r = app
        .post(&format!("/api/voucher-order/{id}/cancel"), Some(c))
        .await;
    assert_eq!(r.code(), "order_not_found", "only the owner cancels");
    for _ in 0..3 {
        let r = app
            .post(&format!("/api/voucher-order/{id}/cancel"), Some(a))
            .await;
        assert!(r.success(), "{r:?}");
        assert_eq!(r.body["data"]["status"], 4);
        assert_eq!(r.body["data"]["statusName"], "cancelled");
    }
    assert_eq!(db_stock(&app, voucher).await, 1, "the unit is back once");
    assert_eq!(redis_stock(&app, voucher).await, Some(1));
    let r = app
        .post(&format!("/api/voucher-order/{id}/pay"), Some(a))
        .await;
    assert_eq!(r.code(), "order_not_payable");

    // The buyer keeps their one order; someone else buys the unit, at once (the remembered
    // "sold out" was forgotten).
    let (_, body) = grab_raw(&app, voucher, a).await;
    assert_eq!(code_of(&body), "duplicate_order");
    assert_eq!(prior_order_of(&body), Some(id));
    let again = grab(&app, voucher, b).await;
    wait_for_orders(&app, voucher, 2).await;
    assert_eq!(db_stock(&app, voucher).await, 0);
    assert_eq!(redis_stock(&app, voucher).await, Some(0));
    let (_, body) = grab_raw(&app, voucher, c).await;
    assert_eq!(code_of(&body), "sold_out");
    assert_eq!(order_status(&app, b, again).await, 1);

    // A reload of the sale from the database counts the returned unit once, not twice.
    crate::helpers::lose_voucher(&app, voucher).await;
    // (The instance answers "sold out" from memory for a moment before a grab reloads it.)
    let patience = Patience::new(Duration::from_secs(10)).every(Duration::from_millis(100));
    let stock = wait_until(patience, "the sale reloaded", async || {
        let (_, body) = grab_raw(&app, voucher, c).await;
        assert_eq!(code_of(&body), "sold_out", "after a reload: {body}");
        redis_stock(&app, voucher).await
    })
    .await;
    assert_eq!(stock, 0);

    // `hmdp reconcile` agrees, and sees a unit counted twice in the database.
    let check = &reconcile_one(&app, voucher).await;
    assert!(!check.drift(), "{check}");
    assert_eq!(
        (check.initial_stock, check.db_stock, check.holding),
        (Some(1), 0, 1)
    );
    exec(
        &app,
        "UPDATE tb_seckill_voucher SET stock = stock + 1 WHERE voucher_id = ?",
        voucher,
    )
    .await;
    let check = &reconcile_one(&app, voucher).await;
    assert!(check.books_drift(), "{check}");
    assert!(
        check.to_string().contains("books: initial stock 1"),
        "{check}"
    );
}

async fn exec(app: &TestApp, sql: &str, voucher: i64) {
    match &app.state.db {
        hmdp::testing::storage::Db::Sqlite(p) => {
            sqlx::query(sql).bind(voucher).execute(p).await.unwrap();
        }
        hmdp::testing::storage::Db::MySql(p) => {
            sqlx::query(sql).bind(voucher).execute(p).await.unwrap();
        }
    }
}

async fn unpaid_orders_close_at_their_deadline_and_their_units_sell_again(backend: Backend) {
    let app =
        Arc::new(spawn_app_with(backend, |c| c.seckill.pay_timeout = Duration::from_secs(2)).await);
    let voucher = create_sale(&app, 3, -60, 3600).await;
    let users = login_many(&app, 4).await;
    let mut ids = Vec::new();
    for t in &users[..3] {
        ids.push(grab(&app, voucher, t).await);
    }
    wait_for_orders(&app, voucher, 3).await;
    // One pays in time.
    let (trade, amount) = open_payment(&app, &users[0], ids[0]).await;
    assert!(
        signed_notice(&app, ids[0], &trade, amount, "paid")
            .await
            .success()
    );
    // The others close: within 5 s of their deadline (the id's second + 2 s).
    for (t, id) in users[1..3].iter().zip(&ids[1..]) {
        wait_for_status(&app, t, *id, 4, Duration::from_secs(2 + 1 + 5)).await;
        let view = order_view(&app, t, *id).await;
        assert_eq!(view["statusName"], "cancelled");
    }
    assert_eq!(
        order_status(&app, &users[0], ids[0]).await,
        2,
        "paid stays paid"
    );
    assert_eq!(db_stock(&app, voucher).await, 2);
    assert_eq!(redis_stock(&app, voucher).await, Some(2));
    assert_eq!(transitions(&app, "unpaid", "cancelled").await, 2);
    // A late payment of a closed order is acknowledged and owed back.
    let r = app
        .post(
            &format!("/api/voucher-order/{}/pay", ids[1]),
            Some(&users[1]),
        )
        .await;
    assert_eq!(r.code(), "order_not_payable");
    // The units sell again.
    grab(&app, voucher, &users[3]).await;
    wait_for_orders(&app, voucher, 4).await;
    assert_eq!(db_stock(&app, voucher).await, 1);
}

async fn sync_mode_orders_close_at_their_deadline_too(backend: Backend) {
    let app = Arc::new(
        spawn_app_with(backend, |c| {
            c.seckill.mode = hmdp::config::SeckillMode::Sync;
            c.seckill.pay_timeout = Duration::from_secs(2);
        })
        .await,
    );
    let voucher = create_sale(&app, 2, -60, 3600).await;
    let users = login_many(&app, 2).await;
    let id = grab(&app, voucher, &users[0]).await;
    assert_eq!(
        order_status(&app, &users[0], id).await,
        1,
        "written at once"
    );
    wait_for_status(&app, &users[0], id, 4, Duration::from_secs(2 + 1 + 5)).await;
    assert_eq!(db_stock(&app, voucher).await, 2);
    grab(&app, voucher, &users[1]).await;
    assert_eq!(db_stock(&app, voucher).await, 1);
}

async fn payments_racing_the_close_end_paid_or_owed_back(backend: Backend) {
    const N: usize = 200;
    let timeout = Duration::from_secs(4);
    let app = Arc::new(spawn_app_with(backend, |c| c.seckill.pay_timeout = timeout).await);
    let voucher = create_sale(&app, N as i64, -60, 3600).await;
    let users = login_many(&app, N).await;
    let mut orders = Vec::new();
    for t in &users {
        orders.push((t.clone(), grab(&app, voucher, t).await));
    }
    wait_for_orders(&app, voucher, N as i64).await;
    let mut trades = HashMap::new();
    for (t, id) in &orders {
        trades.insert(*id, open_payment(&app, t, *id).await);
    }
    // The notices arrive spread over a second either side of each order's deadline, so
    // some land before the closer, some after, some with it.
    let start = tokio::time::Instant::now();
    let now_ms = chrono::Utc::now().timestamp_millis();
    let mut tasks = Vec::new();
    for (i, (_, id)) in orders.iter().enumerate() {
        let deadline = hmdp_id::decode(*id).0 * 1000 + timeout.as_millis() as i64;
        let offset = -1000 + (i as i64 * 2000) / N as i64;
        let at = start + Duration::from_millis((deadline + offset - now_ms).max(0) as u64);
        let (app, id) = (app.clone(), *id);
        let (trade, amount) = trades[&id].clone();
        tasks.push(tokio::spawn(async move {
            // Scheduling the notice at its moment, not waiting for a condition.
            tokio::time::sleep_until(at).await;
            let r = signed_notice(&app, id, &trade, amount, "paid").await;
            assert!(r.success(), "every payment is acknowledged: {r:?}");
            (id, r.body["data"].clone())
        }));
    }
    let mut answers: HashMap<i64, Value> = HashMap::new();
    for t in tasks {
        let (id, data) = t.await.unwrap();
        answers.insert(id, data);
    }
    // Every order ends paid, or closed with its payment owed back; never both, never neither.
    let patience = Patience::new(Duration::from_secs(30)).every(Duration::from_millis(100));
    wait_until(
        patience,
        "no order left unpaid",
        async || match db_orders_in(&app, voucher, 1).await {
            0 => Ok(()),
            n => Err(format!("{n} unpaid")),
        },
    )
    .await;
    let statuses = db_statuses(&app, voucher).await;
    let (mut paid, mut closed) = (0i64, 0i64);
    for (t, id) in &orders {
        let view = order_view(&app, t, *id).await;
        let (status, payment) = (view["status"].as_i64().unwrap(), &view["payment"]["state"]);
        match status {
            2 => {
                assert_eq!(payment, "paid", "order {id}");
                assert_eq!(answers[id]["payment"], "paid");
                paid += 1;
            }
            4 => {
                assert_eq!(
                    payment, "refund_owed",
                    "order {id}: a closed order keeps no payment"
                );
                assert_eq!(answers[id]["payment"], "refund_owed");
                closed += 1;
            }
            s => panic!("order {id} ended in status {s}"),
        }
        assert_eq!(statuses[id], status);
    }
    eprintln!("{paid} paid, {closed} closed with the payment owed back");
    assert_eq!(paid + closed, N as i64);
    assert_eq!(
        db_stock(&app, voucher).await,
        closed,
        "each closed unit came back once"
    );
    assert_eq!(redis_stock(&app, voucher).await, Some(closed));
    let check = &reconcile_one(&app, voucher).await;
    assert!(!check.drift(), "{check}");
    assert_eq!(
        (check.initial_stock, check.holding, check.paid_and_closed),
        (Some(N as i64), paid, 0)
    );
    // Owed payments are settled by the gateway's refund.
    if let Some((t, id)) = orders
        .iter()
        .find(|(t, id)| statuses[id] == 4 && !t.is_empty())
    {
        let (trade, amount) = trades[id].clone();
        let r = signed_notice(&app, *id, &trade, amount, "refunded").await;
        assert!(r.success(), "{r:?}");
        let view = order_view(&app, t, *id).await;
        assert_eq!(
            (view["status"].as_i64(), &view["payment"]["state"]),
            (Some(4), &Value::from("refunded"))
        );
    }
}

async fn a_killed_worker_leaves_no_deadline_behind(backend: Backend) {
    const N: usize = 300;
    let timeout = Duration::from_secs(3);
    // No worker inside the service: a worker process writes the orders and closes them.
    let app = Arc::new(
        spawn_app_with(backend, |c| {
            c.seckill.pay_timeout = timeout;
            c.seckill.worker = false;
        })
        .await,
    );
    let voucher = create_sale(&app, N as i64, -60, 3600).await;
    let users = login_many(&app, N).await;
    let mut ids = HashSet::new();
    for t in &users {
        ids.insert(grab(&app, voucher, t).await);
    }
    let dir = tempfile::tempdir().unwrap();
    let spawn = || {
        ChildGuard(
            app.binary(dir.path())
                .arg("worker")
                .env("HMDP_ORDER_PAY_TIMEOUT_SECS", timeout.as_secs().to_string())
                .env("HMDP_PAY_SECRET", PAY_SECRET)
                .spawn()
                .unwrap(),
        )
    };
    let mut first = spawn();
    wait_for_orders(&app, voucher, N as i64).await;
    // Killed as soon as it has closed some, with the rest of the deadlines pending or claimed.
    let patience = Patience::new(Duration::from_secs(30)).every(Duration::from_millis(2));
    wait_until(patience, "the first closes", async || {
        db_orders_in(&app, voucher, 4).await > 0
    })
    .await;
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let closed_then = db_orders_in(&app, voucher, 4).await;
    eprintln!("worker killed after closing {closed_then} of {N}");
    let _second = spawn();
    // Claimed deadlines come back when their lease ends: after a restart within 15 s.
    let patience = Patience::new(Duration::from_secs(15 + 5)).every(Duration::from_millis(100));
    wait_until(
        patience,
        "every order closed",
        async || match db_orders_in(&app, voucher, 4).await {
            n if n == N as i64 => Ok(()),
            n => Err(format!("{n} of {N} closed")),
        },
    )
    .await;
    assert_eq!(db_stock(&app, voucher).await, N as i64);
    let patience = Patience::new(Duration::from_secs(10)).every(Duration::from_millis(100));
    wait_until(
        patience,
        "Redis holds every unit again, once",
        async || match redis_stock(&app, voucher).await {
            Some(s) if s == N as i64 => Ok(()),
            s => Err(format!("redis stock {s:?}")),
        },
    )
    .await;
}
