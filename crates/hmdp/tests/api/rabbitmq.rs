//! The order pipeline on RabbitMQ (`HMDP_ORDER_TRANSPORT=rabbitmq`) against the real broker:
//! every accepted order is written once and seen by any queue bound to the exchange, through a
//! killed worker process, a broker that is unreachable for a while and a database outage.
//!
//! Each test gets its own vhost (`hmdp_testkit::AmqpVhost`), so the course's fixed names
//! (`hmdianping.direct`, `direct.seckill.queue`) never meet another test's.

use std::{collections::HashSet, sync::Arc, time::Duration};

use futures_util::StreamExt;
use hmdp::{
    config::{AmqpRole, Config, OrderTransport},
    testing::amqp::topology,
};
use hmdp_testkit::amqp_socket_addr;
use lapin::{
    BasicProperties, Connection, ConnectionProperties,
    options::{BasicConsumeOptions, BasicPublishOptions, QueueBindOptions, QueueDeclareOptions},
    types::FieldTable,
};

use crate::helpers::{
    Backend, ChildGuard, CuttableProxy, TestApp, assert_same_orders, code_of, create_sale,
    db_order_ids, db_stock, grab_raw, kill_a_worker_process_mid_drain, login_many, lose_voucher,
    order_id_of, redis_stock, spawn_app_with_rabbitmq, wait_for_orders, wait_until, worker_for,
};

/// The service on a vhost of its own with the RabbitMQ transport; `app.amqp` is the vhost.
async fn rabbit_app(backend: Backend, adjust: impl FnOnce(&mut Config)) -> TestApp {
    spawn_app_with_rabbitmq(backend, adjust).await
}

/// "Another service": its own queue bound to the exchange, collecting the order ids it sees
/// and checking each message's properties.
struct Listener {
    _connection: Connection,
    seen: Arc<std::sync::Mutex<Vec<i64>>>,
}

impl Listener {
    async fn bind(url: &str) -> Self {
        let connection = Connection::connect(url, ConnectionProperties::default())
            .await
            .unwrap();
        let channel = connection.create_channel().await.unwrap();
        // Whoever comes first declares the topology (idempotent): the service may not yet have.
        topology::declare(&channel).await.unwrap();
        let queue = channel
            .queue_declare(
                "".into(),
                QueueDeclareOptions {
                    exclusive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        channel
            .queue_bind(
                queue.name().clone(),
                topology::EXCHANGE.into(),
                topology::ROUTING_KEY.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        let mut consumer = channel
            .basic_consume(
                queue.name().clone(),
                "other-service".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = seen.clone();
        tokio::spawn(async move {
            while let Some(Ok(d)) = consumer.next().await {
                let body: serde_json::Value = serde_json::from_slice(&d.data).unwrap();
                let id = body["id"].as_i64().unwrap();
                assert!(body["userId"].as_i64().unwrap() > 0, "{body}");
                assert!(body["voucherId"].as_i64().unwrap() > 0, "{body}");
                assert_eq!(
                    d.properties.content_type().as_ref().map(|c| c.as_str()),
                    Some("application/json")
                );
                assert_eq!(
                    d.properties.message_id().as_ref().map(|m| m.to_string()),
                    Some(id.to_string())
                );
                assert_eq!(*d.properties.delivery_mode(), Some(2), "persistent");
                let accepted =
                    hmdp::testing::amqp::accepted_at_ms(&d).expect("accepted-at-ms header");
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as u64;
                assert!(
                    accepted <= now + 1000 && now.saturating_sub(accepted) < 600_000,
                    "accepted at {accepted}, now {now}"
                );
                into.lock().unwrap().push(id);
            }
        });
        Self {
            _connection: connection,
            seen,
        }
    }

    /// The distinct order ids seen so far.
    fn ids(&self) -> HashSet<i64> {
        self.seen.lock().unwrap().iter().copied().collect()
    }

    async fn wait_for(&self, orders: &HashSet<i64>) {
        wait_until(
            Duration::from_secs(30),
            "the bound queue saw every order",
            async || orders.is_subset(&self.ids()),
        )
        .await;
    }
}

async fn grab_all(app: &TestApp, voucher: i64, tokens: &[String]) -> HashSet<i64> {
    let mut won = HashSet::new();
    for t in tokens {
        let (status, body) = grab_raw(app, voucher, t).await;
        assert_eq!(status, 200, "{body}");
        won.insert(order_id_of(&body).unwrap_or_else(|| panic!("accepted: {body}")));
    }
    won
}

async fn metric(app: &TestApp, name: &str) -> f64 {
    let text = app.metrics().await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

async fn sale_over_rabbitmq(backend: Backend) {
    let app = Arc::new(rabbit_app(backend, |_| {}).await);
    // The relay connects at start: the broker is reported before any order needs it.
    wait_until(
        Duration::from_secs(20),
        "health reports the broker before the first order",
        async || app.get("/health", None).await.body["data"]["broker"] == "ok",
    )
    .await;
    let listener = Listener::bind(&app.amqp_url()).await;
    let voucher = create_sale(&app, 150, -60, 3600).await;
    let tokens = login_many(&app, 160).await;
    let won = grab_all(&app, voucher, &tokens[..150]).await;
    let (status, body) = grab_raw(&app, voucher, &tokens[150]).await;
    assert_eq!(status, 200);
    assert!(order_id_of(&body).is_none(), "sold out: {body}");

    wait_for_orders(&app, voucher, 150).await;
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, &won);
    assert_eq!(db_stock(&app, voucher).await, 0);
    listener.wait_for(&won).await;

    // The status query's pending records go once the orders are written, as with the stream.
    let pending: Vec<String> = won
        .iter()
        .map(|id| format!("{}seckill:pending:{id}", app.prefix))
        .collect();
    let left: i64 = redis::AsyncCommands::exists(&mut app.redis().await, &pending)
        .await
        .unwrap();
    assert_eq!(left, 0, "pending records left behind");
    assert!(metric(&app, "hmdp_amqp_confirmed_total").await >= 150.0);
    assert!(metric(&app, "hmdp_amqp_consumed_total").await >= 150.0);
    assert_eq!(metric(&app, "hmdp_amqp_dead_lettered_total").await, 0.0);
    // The consumer timed each order from the grab (the message's accepted-at-ms) to its commit
    // (observed after its acknowledgements, a moment after the commit).
    wait_until(
        Duration::from_secs(10),
        "every order's lag observed",
        async || metric(&app, "hmdp_worker_order_lag_seconds_count").await >= 150.0,
    )
    .await;
    let health = app.get("/health", None).await;
    assert_eq!(health.body["data"]["broker"], "ok", "{health:?}");
    // Every order message was acknowledged: stopped, the service gives any it still held
    // unacknowledged back to the queue.
    let url = app.amqp_url();
    let admin = Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap();
    let channel = admin.create_channel().await.unwrap();
    Arc::into_inner(app).expect("the only handle").stop().await;
    assert_eq!(
        topology::depth(&channel, topology::QUEUE).await.unwrap(),
        0,
        "order messages left unacknowledged on {url}"
    );
}

/// A voucher Redis loses while its orders wait in the queue is warmed up with them counted:
/// their stream entries stay until the consumer has written them, so their stock stays taken
/// and their buyers known; the consumer then writes every one, none refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_up_counts_the_orders_the_broker_holds() {
    let app =
        Arc::new(rabbit_app(Backend::Sqlite, |c| c.seckill.amqp_role = AmqpRole::Relay).await);
    let voucher = create_sale(&app, 10, -60, 3600).await;
    let tokens = login_many(&app, 6).await;
    let mut won = grab_all(&app, voucher, &tokens[..5]).await;
    wait_until(
        Duration::from_secs(30),
        "the broker confirming the 5 orders",
        async || metric(&app, "hmdp_amqp_confirmed_total").await >= 5.0,
    )
    .await;
    // The housekeeping trim drops nothing the broker holds.
    worker_for(&app, "trimmer").trim(0).await.unwrap();
    lose_voucher(&app, voucher).await;
    let (status, body) = grab_raw(&app, voucher, &tokens[5]).await;
    assert_eq!(status, 200);
    won.insert(order_id_of(&body).unwrap_or_else(|| panic!("accepted: {body}")));
    assert_eq!(
        redis_stock(&app, voucher).await,
        Some(4),
        "5 queued + 1 taken"
    );
    for token in &tokens[..5] {
        let (_, body) = grab_raw(&app, voucher, token).await;
        assert_eq!(code_of(&body), "duplicate_order", "{body}");
    }

    let dir = tempfile::tempdir().unwrap();
    let _consumer = ChildGuard(
        app.binary(dir.path())
            .arg("worker")
            .env("HMDP_ORDER_TRANSPORT", "rabbitmq")
            .env("HMDP_AMQP_URL", app.amqp_url())
            .env("HMDP_AMQP_ROLE", "consumer")
            .spawn()
            .unwrap(),
    );
    wait_for_orders(&app, voucher, 6).await;
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, &won);
    assert_eq!(db_stock(&app, voucher).await, 4);
    // Written, their entries go.
    let stream = app.state.keys.seckill_stream(0);
    wait_until(Duration::from_secs(30), "the outbox emptied", async || {
        let len: i64 = redis::AsyncCommands::xlen(&mut app.redis().await, &stream)
            .await
            .unwrap();
        len == 0
    })
    .await;
}

crate::both_backends!(
    sale_over_rabbitmq,
    a_killed_worker_process_loses_and_duplicates_nothing
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_unreachable_for_a_while_delays_orders_and_loses_none() {
    let proxy = CuttableProxy::start(amqp_socket_addr(&hmdp_testkit::amqp_url())).await;
    let app = Arc::new(
        rabbit_app(Backend::Sqlite, |c| {
            c.seckill.amqp_url = proxy.via(&c.seckill.amqp_url);
        })
        .await,
    );
    let listener = Listener::bind(&app.amqp_url()).await;
    let voucher = create_sale(&app, 1000, -60, 3600).await;
    let tokens = login_many(&app, 1000).await;
    let mut won = grab_all(&app, voucher, &tokens[..100]).await;
    wait_for_orders(&app, voucher, 100).await;

    proxy.cut();
    wait_until(
        Duration::from_secs(20),
        "health reports the broker down",
        async || app.get("/health", None).await.body["data"]["broker"] == "down",
    )
    .await;
    // Grabs are still decided; the orders wait in the stream.
    won.extend(grab_all(&app, voucher, &tokens[100..]).await);
    assert_eq!(db_order_ids(&app, voucher).await.len(), 100);

    proxy.restore();
    wait_for_orders(&app, voucher, 1000).await;
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, &won);
    assert_eq!(db_stock(&app, voucher).await, 0);
    listener.wait_for(&won).await;
    wait_until(
        Duration::from_secs(20),
        "health reports the broker back",
        async || app.get("/health", None).await.body["data"]["broker"] == "ok",
    )
    .await;
}

/// A relay with several batches in flight publishes each order of a backlog once, its deadline
/// with it, and acknowledges every entry: the window overlaps the batches' confirms, it
/// neither repeats nor drops a batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_with_batches_in_flight_publishes_each_order_once() {
    let app = Arc::new(
        rabbit_app(Backend::Sqlite, |c| {
            c.seckill.worker = false;
            c.seckill.amqp_role = AmqpRole::Relay;
            c.seckill.batches_in_flight = 4;
        })
        .await,
    );
    let listener = Listener::bind(&app.amqp_url()).await;
    let voucher = create_sale(&app, 60, -60, 3600).await;
    let tokens = login_many(&app, 60).await;
    let won = grab_all(&app, voucher, &tokens).await;
    // The backlog goes out in batches of 7 (`worker_for`), up to 4 of them in flight.
    let relay = worker_for(&app, "windowed-relay");
    let stats = relay.amqp_stats().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(relay.run_until(async {
        let _ = stopped.await;
    }));
    listener.wait_for(&won).await;
    let stream = app.state.keys.seckill_stream(0);
    wait_until(
        Duration::from_secs(30),
        "every entry acknowledged",
        async || {
            let (pending, ..): (i64, redis::Value, redis::Value, redis::Value) =
                redis::cmd("XPENDING")
                    .arg(&stream)
                    .arg(hmdp::testing::worker::GROUP)
                    .query_async(&mut app.redis().await)
                    .await
                    .unwrap();
            pending == 0
        },
    )
    .await;
    let _ = stop.send(());
    running.await.unwrap();
    assert_eq!(
        listener.seen.lock().unwrap().len(),
        60,
        "each order published once"
    );
    assert_eq!(stats.confirmed.get(), 60);
}

async fn a_killed_worker_process_loses_and_duplicates_nothing(backend: Backend) {
    killed_worker_process(backend, None, "both", 2000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_mid_publish_loses_and_duplicates_nothing() {
    killed_worker_process(Backend::MySql, Some(AmqpRole::Consumer), "relay", 400).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_mid_batch_loses_and_duplicates_nothing() {
    killed_worker_process(Backend::MySql, Some(AmqpRole::Relay), "consumer", 400).await;
}

/// A sale of `orders`; a `hmdp worker` process with `HMDP_AMQP_ROLE=child_role` is killed -9
/// as soon as an order is written, then started again. The service runs the other half of
/// the pipeline (`app_role`), or no worker.
async fn killed_worker_process(
    backend: Backend,
    app_role: Option<AmqpRole>,
    child_role: &str,
    orders: usize,
) {
    let app = Arc::new(
        rabbit_app(backend, |c| match app_role {
            Some(role) => c.seckill.amqp_role = role,
            None => c.seckill.worker = false,
        })
        .await,
    );
    let listener = Listener::bind(&app.amqp_url()).await;
    let voucher = create_sale(&app, orders as i64, -60, 3600).await;
    let tokens = login_many(&app, orders).await;
    let won = grab_all(&app, voucher, &tokens).await;
    let dir = tempfile::tempdir().unwrap();
    let spawn_worker = || {
        app.binary(dir.path())
            .arg("worker")
            .env("HMDP_ORDER_TRANSPORT", "rabbitmq")
            .env("HMDP_AMQP_URL", app.amqp_url())
            .env("HMDP_AMQP_ROLE", child_role)
            .env("HMDP_WORKER_BATCH", "5")
            .env("HMDP_WORKER_CLAIM_IDLE_MS", "300")
            .spawn()
            .unwrap()
    };
    // Killed -9 as soon as an order is written: it is publishing or consuming then.
    kill_a_worker_process_mid_drain(&app, voucher, &won, spawn_worker).await;
    listener.wait_for(&won).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_mid_sale_loses_and_duplicates_nothing() {
    // A private node: restarting the shared broker would break every other test.
    let mut node = hmdp_testkit::RabbitNode::start().await;
    let url = format!("{}/%2f", node.url());
    let app = Arc::new(rabbit_app(Backend::MySql, |c| c.seckill.amqp_url = url.clone()).await);
    let voucher = create_sale(&app, 1000, -60, 3600).await;
    let tokens = login_many(&app, 1000).await;
    let mut won = grab_all(&app, voucher, &tokens[..150]).await;
    wait_until(Duration::from_secs(20), "some orders written", async || {
        !db_order_ids(&app, voucher).await.is_empty()
    })
    .await;
    // The broker restarts while the rest of the buyers arrive.
    let (app2, rest) = (app.clone(), tokens[150..].to_vec());
    let grabbing = tokio::spawn(async move { grab_all(&app2, voucher, &rest).await });
    node.restart().await;
    won.extend(grabbing.await.unwrap());
    assert_eq!(won.len(), 1000);

    wait_for_orders(&app, voucher, 1000).await;
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, &won);
    assert_eq!(db_stock(&app, voucher).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_going_away_while_orders_arrive_loses_nothing() {
    let app = rabbit_app(Backend::MySql, |c| c.seckill.worker = false).await;
    crate::seckill::database_going_away_while_orders_arrive(Arc::new(app)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_is_no_order_is_dead_lettered_and_the_rest_flow() {
    let app = Arc::new(rabbit_app(Backend::Sqlite, |_| {}).await);
    // Someone publishes junk to the exchange.
    let connection = Connection::connect(&app.amqp_url(), ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .basic_publish(
            topology::EXCHANGE.into(),
            topology::ROUTING_KEY.into(),
            BasicPublishOptions::default(),
            b"{\"id\": \"not a number\"}",
            BasicProperties::default(),
        )
        .await
        .unwrap();
    let voucher = create_sale(&app, 20, -60, 3600).await;
    let tokens = login_many(&app, 20).await;
    let won = grab_all(&app, voucher, &tokens).await;
    wait_for_orders(&app, voucher, 20).await;
    let stored: HashSet<i64> = db_order_ids(&app, voucher).await.into_iter().collect();
    assert_same_orders(&stored, &won);
    wait_until(
        Duration::from_secs(10),
        "the junk is in the dead-letter queue",
        async || {
            hmdp::testing::amqp::topology::depth(&channel, topology::DEAD_LETTER_QUEUE)
                .await
                .unwrap()
                == 1
        },
    )
    .await;
    assert_eq!(metric(&app, "hmdp_amqp_dead_lettered_total").await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_broker_at_start_is_one_clear_line() {
    let port = crate::helpers::free_port();
    let config = {
        let dir = tempfile::tempdir().unwrap();
        let mut c = crate::helpers::test_config(
            format!("sqlite://{}", dir.path().join("db.sqlite").display()),
            dir.path(),
        );
        c.seckill.transport = OrderTransport::RabbitMq;
        c.seckill.amqp_url = format!("amqp://guest:secret@127.0.0.1:{port}/%2f");
        c
    };
    let err = match hmdp::Application::build(config).await {
        Ok(_) => panic!("started without a broker"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("HMDP_AMQP_URL"), "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(!err.contains("secret"), "the password is not shown: {err}");
    assert!(!err.contains('\n'), "one line: {err}");
}
