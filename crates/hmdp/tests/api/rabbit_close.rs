//! Pay deadlines on the RabbitMQ transport, against the real broker: the grab script records
//! each deadline as on the stream transport, and the worker closes the order (status 4, its
//! unit back in the database and in Redis) at or after its deadline; a paid order stays paid;
//! the relay sends one message per order; a worker killed -9 with
//! deadlines claimed loses none. A close that reaches `hmdp.order.close` the broker's way (what
//! earlier versions queued) for no known order is dropped.
//!
//! Each test gets its own vhost, so the fixed queue names never meet another test's.

use std::{collections::HashSet, sync::Arc, time::Duration};

use hmdp::{config::Config, testing::amqp::topology};
use lapin::{
    BasicProperties, Confirmation, Connection, ConnectionProperties,
    options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions},
    types::FieldTable,
};

use crate::helpers::{
    Backend, ChildGuard, Patience, TestApp, assert_same_orders, create_sale, db_order_ids,
    db_orders_in, db_stock, grab_raw, login_many, order_id_of, order_view, redis_stock,
    signed_notice, spawn_app_with_rabbitmq, wait_for_orders, wait_until,
};

/// The service on a vhost of its own with the RabbitMQ transport and a short pay timeout.
async fn close_app(
    backend: Backend,
    pay_timeout_secs: u64,
    adjust: impl FnOnce(&mut Config),
) -> Arc<TestApp> {
    Arc::new(
        spawn_app_with_rabbitmq(backend, |c| {
            c.seckill.pay_timeout = Duration::from_secs(pay_timeout_secs);
            adjust(c)
        })
        .await,
    )
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Every token grabs one unit; the order ids in the tokens' order.
async fn grab_each(app: &TestApp, voucher: i64, tokens: &[String]) -> Vec<i64> {
    let mut ids = Vec::new();
    for t in tokens {
        let (status, body) = grab_raw(app, voucher, t).await;
        assert_eq!(status, 200, "{body}");
        ids.push(order_id_of(&body).unwrap_or_else(|| panic!("accepted: {body}")));
    }
    ids
}

/// Pays the owner's order: the pay ticket (asked again while the order is not written yet),
/// then the gateway's signed notice.
async fn pay(app: &TestApp, token: &str, id: i64) {
    let ticket = wait_until(Duration::from_secs(10), "a pay ticket", async || {
        let r = app
            .post(&format!("/api/voucher-order/{id}/pay"), Some(token))
            .await;
        if r.success() {
            Ok(r.body["data"].clone())
        } else {
            Err(format!("{r:?}"))
        }
    })
    .await;
    let trade_no = ticket["tradeNo"].as_str().expect("a trade number");
    let amount = ticket["amount"].as_i64().expect("an amount");
    let r = signed_notice(app, id, trade_no, amount, "paid").await;
    assert!(r.success(), "{r:?}");
    assert_eq!(r.body["data"]["status"], 2, "{r:?}");
}

/// Waits until the owner sees the order closed (status 4), and checks it did not close before
/// its deadline.
async fn wait_closed(app: &TestApp, token: &str, id: i64) {
    let written = wait_until(Duration::from_secs(30), "the order written", async || {
        let v = order_view(app, token, id).await;
        (v["state"] == "created").then_some(v)
    })
    .await;
    let deadline = match written["payDeadlineMillis"].as_i64() {
        Some(d) => d,
        // Closed already between two looks.
        None => {
            assert_eq!(written["status"], 4, "{written}");
            return;
        }
    };
    assert_eq!(written["status"], 1, "unpaid: {written}");
    let left = u64::try_from(deadline - now_ms()).unwrap_or(0);
    let patience = Patience::new(Duration::from_millis(left) + Duration::from_secs(15))
        .every(Duration::from_millis(50));
    wait_until(patience, "the unpaid order closed", async || {
        let v = order_view(app, token, id).await;
        let status = v["status"].as_i64().unwrap_or(0);
        assert!(status == 1 || status == 4, "only the close moves it: {v}");
        if status == 4 {
            assert!(
                now_ms() >= deadline,
                "closed {} ms before its deadline",
                deadline - now_ms()
            );
        }
        status == 4
    })
    .await;
}

async fn metric(app: &TestApp, name: &str) -> f64 {
    let text = app.metrics().await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

async fn closed_orders(app: &TestApp, voucher: i64) -> i64 {
    db_orders_in(app, voucher, 4).await
}

crate::both_backends!(
    unpaid_orders_close_at_their_deadline_and_a_paid_one_stays_paid,
    a_worker_killed_with_deadlines_in_flight_closes_them_all_after_its_restart
);

async fn unpaid_orders_close_at_their_deadline_and_a_paid_one_stays_paid(backend: Backend) {
    // Three seconds, not two: the paid order is paid within a second of its grab even on a
    // loaded machine (its deadline counts from its id's second, which may be almost over).
    let app = close_app(backend, 3, |_| {}).await;
    let voucher = create_sale(&app, 4, -60, 3600).await;
    let tokens = login_many(&app, 7).await;
    let ids = grab_each(&app, voucher, &tokens[..4]).await;
    assert_eq!(redis_stock(&app, voucher).await, Some(0), "sold out");
    // The grab recorded each deadline (the order id's second plus the timeout), as on the
    // stream transport: the broker carries one message per order.
    let deadlines = app.state.keys.seckill_deadlines(0);
    for id in &ids {
        let at: Option<i64> = redis::cmd("ZSCORE")
            .arg(&deadlines)
            .arg(id)
            .query_async(&mut app.redis().await)
            .await
            .unwrap();
        assert_eq!(at, Some(hmdp_id::decode(*id).0 * 1000 + 3000), "order {id}");
    }
    pay(&app, &tokens[0], ids[0]).await;
    for (token, id) in tokens[1..4].iter().zip(&ids[1..]) {
        wait_closed(&app, token, *id).await;
    }
    // The paid order's deadline came first (it was grabbed first); its close message is handled
    // without moving it.
    wait_until(
        Duration::from_secs(15),
        "every deadline handled",
        async || metric(&app, "hmdp_order_deadlines_handled_total").await >= 4.0,
    )
    .await;
    let paid = order_view(&app, &tokens[0], ids[0]).await;
    assert_eq!(paid["status"], 2, "{paid}");
    assert_eq!(closed_orders(&app, voucher).await, 3);
    assert_eq!(db_stock(&app, voucher).await, 3);
    assert_eq!(redis_stock(&app, voucher).await, Some(3));
    assert_eq!(
        metric(&app, "hmdp_order_deadlines_dropped_total").await,
        0.0
    );
    // The units that came back sell again.
    grab_each(&app, voucher, &tokens[4..]).await;
    assert_eq!(redis_stock(&app, voucher).await, Some(0));
}

async fn a_worker_killed_with_deadlines_in_flight_closes_them_all_after_its_restart(
    backend: Backend,
) {
    const ORDERS: usize = 200;
    let app = close_app(backend, 2, |c| c.seckill.worker = false).await;
    let voucher = create_sale(&app, ORDERS as i64, -60, 3600).await;
    let tokens = login_many(&app, ORDERS).await;
    let won: HashSet<i64> = grab_each(&app, voucher, &tokens)
        .await
        .into_iter()
        .collect();
    assert_eq!(redis_stock(&app, voucher).await, Some(0));
    let dir = tempfile::tempdir().unwrap();
    let spawn_worker = || {
        app.binary(dir.path())
            .arg("worker")
            .env("HMDP_ORDER_TRANSPORT", "rabbitmq")
            .env("HMDP_AMQP_URL", app.amqp_url())
            .env("HMDP_ORDER_PAY_TIMEOUT_SECS", "2")
            .env("HMDP_WORKER_BATCH", "5")
            .env("HMDP_WORKER_CLAIM_IDLE_MS", "300")
            .spawn()
            .unwrap()
    };
    let quick = || Patience::new(Duration::from_secs(30)).every(Duration::from_millis(2));

    // Killed as soon as an order is written: relaying and writing, most deadlines ahead.
    let mut first = spawn_worker();
    wait_until(quick(), "the worker writing", async || {
        !db_order_ids(&app, voucher).await.is_empty()
    })
    .await;
    first.kill().unwrap();
    first.wait().unwrap();
    // The deadlines count from the grabs, so some may have closed already.
    eprintln!(
        "worker killed after {} orders were written and {} closed",
        db_order_ids(&app, voucher).await.len(),
        closed_orders(&app, voucher).await
    );

    // Killed again as soon as an order closes: closing, more deadlines on their way.
    let mut second = spawn_worker();
    wait_until(quick(), "the worker closing", async || {
        closed_orders(&app, voucher).await > 0
    })
    .await;
    second.kill().unwrap();
    second.wait().unwrap();
    eprintln!(
        "worker killed after {} of {ORDERS} orders were closed",
        closed_orders(&app, voucher).await
    );

    let mut third = ChildGuard(spawn_worker());
    wait_for_orders(&app, voucher, ORDERS as i64).await;
    let patience = Patience::new(Duration::from_secs(60)).every(Duration::from_millis(100));
    wait_until(
        patience,
        "every order closed",
        async || match closed_orders(&app, voucher).await {
            n if n == ORDERS as i64 => Ok(()),
            n => Err(format!("{n} of {ORDERS} closed")),
        },
    )
    .await;
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, &won);
    assert_eq!(db_stock(&app, voucher).await, ORDERS as i64);
    // A worker killed between a commit and the units' return to Redis left its claims to come
    // back when their lease ends: the units return then, once.
    wait_until(
        Duration::from_secs(60),
        "every unit back in Redis",
        async || redis_stock(&app, voucher).await == Some(ORDERS as i64),
    )
    .await;
    // Stopped once it is at work (consuming): a signal that came before its handler would end
    // it the default way.
    let admin = Connection::connect(&app.amqp_url(), ConnectionProperties::default())
        .await
        .unwrap();
    let channel = admin.create_channel().await.unwrap();
    wait_until(
        Duration::from_secs(30),
        "the third worker consuming",
        async || {
            let passive = QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            };
            channel
                .queue_declare(topology::QUEUE.into(), passive, FieldTable::default())
                .await
                .is_ok_and(|q| q.consumer_count() > 0)
        },
    )
    .await;
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(third.0.id() as i32, libc::SIGTERM) };
    assert!(
        third.0.wait().unwrap().success(),
        "graceful stop on SIGTERM"
    );
}

/// A close for an order nobody knows, and one naming no order, are acknowledged and dropped:
/// they neither stay in the queue nor come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_for_no_known_order_is_acknowledged_and_dropped() {
    let app = close_app(Backend::Sqlite, 2, |_| {}).await;
    let connection = Connection::connect(&app.amqp_url(), ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    topology::declare_deadlines(&channel, Duration::from_secs(2))
        .await
        .unwrap();
    // An order message of an order long due that no one took.
    let bodies = [
        &br#"{"id":4242,"userId":1,"voucherId":1}"#[..],
        b"not an order",
    ];
    for body in bodies {
        let confirm = channel
            .basic_publish(
                topology::CLOSE_EXCHANGE.into(),
                topology::CLOSE_ROUTING_KEY.into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                body,
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(
            matches!(confirm, Confirmation::Ack(None)),
            "routed: {confirm:?}"
        );
    }
    wait_until(Duration::from_secs(15), "both closes dropped", async || {
        metric(&app, "hmdp_order_deadlines_dropped_total").await == 2.0
    })
    .await;
    assert_eq!(
        metric(&app, "hmdp_order_deadlines_handled_total").await,
        2.0
    );
    // Stopped, the service would give unacknowledged messages back to the queue.
    Arc::into_inner(app).expect("the only handle").stop().await;
    assert_eq!(
        topology::depth(&channel, topology::CLOSE_QUEUE)
            .await
            .unwrap(),
        0,
        "acknowledged"
    );
}
