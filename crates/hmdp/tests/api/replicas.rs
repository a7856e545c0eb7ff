//! Redis replicas and failover: `HMDP_REDIS_WAIT_REPLICAS` and
//! `hmdp reconcile`, on a real primary and replica pair with a promotion. The replica follows
//! the primary through a [`CuttableProxy`], so a test can make it fall behind at will.

use std::{collections::HashMap, process::Stdio, time::Duration};

use hmdp::testing::seckill::voucher_hash::{FIELD_STOCK, VoucherHash};
use redis::AsyncCommands;

use crate::helpers::{
    Backend, CuttableProxy, RedisServer, TestApp, code_of, create_sale, db_order_ids, free_port,
    grab_raw, login_many, order_id_of, prior_order_of, spawn_app, spawn_app_with, wait_for_orders,
    wait_until,
};

/// A primary and a replica that replicates it through a proxy.
struct Pair {
    primary: RedisServer,
    link: CuttableProxy,
    replica: RedisServer,
}

impl Pair {
    async fn start() -> Self {
        let primary = RedisServer::start().await;
        let link = CuttableProxy::start(([127, 0, 0, 1], primary.port()).into()).await;
        let port = link.port().to_string();
        let replica =
            RedisServer::start_with(free_port(), &["--replicaof", "127.0.0.1", &port]).await;
        let pair = Self {
            primary,
            link,
            replica,
        };
        pair.wait_in_sync().await;
        pair
    }

    async fn info(url: &str) -> HashMap<String, String> {
        let mut conn = connect(url).await;
        let text: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .unwrap();
        text.lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
            .collect()
    }

    /// Waits until the replica's link is up and it has all the primary wrote.
    async fn wait_in_sync(&self) {
        let (primary, replica) = (self.primary.url(), self.replica.url());
        wait_until(Duration::from_secs(30), "the replica in sync", async || {
            let (p, r) = (Self::info(&primary).await, Self::info(&replica).await);
            r.get("master_link_status").map(String::as_str) == Some("up")
                && r.get("slave_repl_offset") == p.get("master_repl_offset")
        })
        .await;
    }

    /// The primary dies (kill -9) and the replica is promoted.
    async fn fail_over(&mut self) {
        self.primary.kill();
        let mut conn = connect(&self.replica.url()).await;
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

async fn connect(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The sale's buyers hash in the Redis at `url`: user → order.
async fn buyers_in(app: &TestApp, url: &str, voucher: i64) -> HashMap<i64, i64> {
    let key = app.state.keys.seckill_buyers(0, voucher);
    connect(url).await.hgetall(key).await.unwrap()
}

async fn stock_in(app: &TestApp, url: &str, voucher: i64) -> i64 {
    let key = app.state.keys.seckill_voucher(0, voucher);
    let hash = VoucherHash::read(&key, &mut connect(url).await)
        .await
        .unwrap();
    hash.stock.expect("the sale is loaded")
}

/// The replica falls behind halfway through the sale and is then promoted: every grab answered
/// 200 is on it. (Without `WAIT`, the grabs after the cut would be answered 200 and be missing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_every_acknowledged_grab_survives_a_promotion() {
    let mut pair = Pair::start().await;
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.redis_url = Some(pair.primary.url());
        c.seckill.wait_replicas = 1;
        // Long enough for a replica on a busy machine; each grab after the cut waits it out.
        c.seckill.wait_timeout = Duration::from_millis(500);
        c.seckill.worker = false;
    })
    .await;
    let voucher = create_sale(&app, 100, -1, 3600).await;
    let app = std::sync::Arc::new(app);
    let tokens = login_many(&app, 20).await;
    // Every order before the cut reaches the replica; a loaded machine may confirm one of them
    // too late (answered `not_replicated`, which is the truth), never one after it.
    let (mut acknowledged, mut before_cut) = (Vec::new(), Vec::new());
    for (i, token) in tokens.iter().enumerate() {
        if i == 10 {
            pair.wait_in_sync().await;
            pair.link.cut();
        }
        let (status, body) = grab_raw(&app, voucher, token).await;
        let order = match status {
            200 => {
                let order = order_id_of(&body).expect("an order id");
                acknowledged.push(order);
                order
            }
            _ => {
                assert_eq!(code_of(&body), "not_replicated", "{body}");
                prior_order_of(&body).expect("the 503 names the order")
            }
        };
        if i < 10 {
            before_cut.push(order);
        } else {
            assert_ne!(
                status, 200,
                "a grab after the cut is never confirmed: {body}"
            );
        }
    }
    assert!(
        !acknowledged.is_empty(),
        "the grabs before the cut are confirmed"
    );
    assert_eq!(
        app.state.seckill.stats().replica_wait_timeouts.get(),
        20 - acknowledged.len() as u64
    );
    // Nothing waits between the last answer and the primary's death.
    pair.fail_over().await;
    let replica = pair.replica.url();
    let mut kept: Vec<i64> = buyers_in(&app, &replica, voucher)
        .await
        .into_values()
        .collect();
    kept.sort_unstable();
    before_cut.sort_unstable();
    assert_eq!(
        kept, before_cut,
        "the promoted replica has every order from before the cut, and none after"
    );
    assert!(
        acknowledged.iter().all(|o| kept.contains(o)),
        "every acknowledged order survives"
    );
    assert_eq!(stock_in(&app, &replica, voucher).await, 90);
    let stream_len: i64 = connect(&replica)
        .await
        .xlen(app.state.keys.seckill_stream(0))
        .await
        .unwrap();
    assert_eq!(
        stream_len, 10,
        "and every one is in its stream, for the worker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grab_no_replica_confirms_answers_503_naming_its_order() {
    let pair = Pair::start().await;
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.redis_url = Some(pair.primary.url());
        c.seckill.wait_replicas = 1;
        c.seckill.wait_timeout = Duration::from_millis(100);
    })
    .await;
    let voucher = create_sale(&app, 10, -1, 3600).await;
    let token = app.login("13900000001").await;
    pair.link.cut();
    let (status, body) = grab_raw(&app, voucher, &token).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(code_of(&body), "not_replicated");
    let order = prior_order_of(&body).expect("the 503 names the order");
    assert_eq!(app.state.seckill.stats().replica_wait_timeouts.get(), 1);
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("hmdp_seckill_replica_wait_timeouts_total 1"),
        "{metrics}"
    );

    pair.link.restore();
    pair.wait_in_sync().await;
    let (status, body) = grab_raw(&app, voucher, &token).await;
    assert_eq!(
        (status, code_of(&body).as_str()),
        (200, "duplicate_order"),
        "{body}"
    );
    assert_eq!(
        prior_order_of(&body),
        Some(order),
        "the retry finds the order"
    );
    // The primary lived: the worker writes the order like any other.
    wait_for_orders(&app, voucher, 1).await;
    assert_eq!(db_order_ids(&app, voucher).await, vec![order]);
    let other = app.login("13900000002").await;
    let (status, body) = grab_raw(&app, voucher, &other).await;
    assert_eq!(
        status, 200,
        "with the replica back, grabs are confirmed again: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_replicas_of_the_managed_redis_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::helpers::test_config(
        format!("sqlite://{}/hmdp.db", dir.path().display()),
        dir.path(),
    );
    config.redis_url = None;
    config.redis_managed = hmdp::config::ManagedMode::Always;
    config.seckill.wait_replicas = 1;
    let deps = hmdp::Dependencies {
        sms: std::sync::Arc::new(hmdp::testing::auth::CapturingSms::default()),
    };
    let err = hmdp::Application::build_with(config, deps)
        .await
        .err()
        .expect("refused");
    assert!(
        format!("{err:#}").contains("the managed redis-server has none"),
        "{err:#}"
    );
}

/// Without `WAIT`, a replica that fell behind forgets acknowledged orders when it is promoted;
/// `hmdp reconcile` finds the drift against the database and `--repair` rebuilds the sale.
async fn reconcile_repairs_what_a_promotion_forgot(backend: Backend) {
    let mut pair = Pair::start().await;
    let app = spawn_app_with(backend, |c| c.redis_url = Some(pair.primary.url())).await;
    let voucher = create_sale(&app, 50, -1, 3600).await;
    let app = std::sync::Arc::new(app);
    let tokens = login_many(&app, 6).await;
    let (status, body) = grab_raw(&app, voucher, &tokens[0]).await;
    assert_eq!(status, 200, "{body}");
    pair.wait_in_sync().await;
    pair.link.cut();
    for token in &tokens[1..] {
        let (status, body) = grab_raw(&app, voucher, token).await;
        assert_eq!(status, 200, "acknowledged without WAIT: {body}");
    }
    wait_for_orders(&app, voucher, 6).await;
    pair.fail_over().await;
    let replica = pair.replica.url();
    assert_eq!(
        stock_in(&app, &replica, voucher).await,
        49,
        "5 grabs forgotten"
    );

    let dir = tempfile::tempdir().unwrap();
    let reconcile = |args: &[&str]| {
        let output = app
            .binary(dir.path())
            .env("HMDP_REDIS_URL", &replica)
            .arg("reconcile")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let err = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.code(), format!("{text}{err}"))
    };
    let (code, out) = reconcile(&[]);
    assert_eq!(code, Some(3), "drift exits 3: {out}");
    assert!(
        out.contains(&format!("voucher {voucher}: DRIFT"))
            && out.contains("stock: Redis 49, expected 44 (Redis would sell 5 more")
            && out.contains("5 buyers the database or a stream holds are unknown to Redis"),
        "{out}"
    );
    let (code, out) = reconcile(&["--repair", "--voucher", &voucher.to_string()]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("repaired"), "{out}");
    let (code, out) = reconcile(&[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(&format!("voucher {voucher}: ok (stock 44, 6 buyers)")),
        "{out}"
    );
    // Each buyer is known again with the order the database holds: a second grab is refused.
    let mut written = db_order_ids(&app, voucher).await;
    let mut known: Vec<i64> = buyers_in(&app, &replica, voucher)
        .await
        .into_values()
        .collect();
    written.sort_unstable();
    known.sort_unstable();
    assert_eq!(known, written);
}

/// An order Redis acknowledged that no stream or table holds is queued again, and a buyer
/// Redis lost is recorded again, through the library API.
async fn reconcile_queues_again_what_only_redis_holds(backend: Backend) {
    let app = spawn_app(backend).await;
    let voucher = create_sale(&app, 10, -1, 3600).await;
    let mut orders = Vec::new();
    for i in 0..3 {
        let token = app.login(&format!("1390000010{i}")).await;
        let (status, body) = grab_raw(&app, voucher, &token).await;
        assert_eq!(status, 200, "{body}");
        orders.push(order_id_of(&body).unwrap());
    }
    wait_for_orders(&app, voucher, 3).await;
    let (hash, buyers) = (
        app.state.keys.seckill_voucher(0, voucher),
        app.state.keys.seckill_buyers(0, voucher),
    );
    let mut redis = app.redis().await;
    let in_redis: HashMap<i64, i64> = redis.hgetall(&buyers).await.unwrap();
    let (&lost_user, &lost_order) = in_redis.iter().next().unwrap();
    // A buyer Redis forgot (its stock back), and an order only Redis knows (its stock taken).
    let _: () = redis.hdel(&buyers, lost_user).await.unwrap();
    let _: () = redis.hincr(&hash, FIELD_STOCK, 1).await.unwrap();
    let (ghost_user, ghost_order) = (990_001_i64, 7_000_000_000_123_i64);
    let _: () = redis.hset(&buyers, ghost_user, ghost_order).await.unwrap();
    let _: () = redis.hincr(&hash, FIELD_STOCK, -1).await.unwrap();

    let seckill = &app.state.seckill;
    let id = hmdp::testing::domain::VoucherId::new(voucher).unwrap();
    let checks = seckill.reconcile(Some(id), false).await.unwrap();
    assert_eq!(
        checks,
        vec![hmdp::testing::seckill::SaleCheck {
            voucher,
            loaded: true,
            marked_unknown: false,
            redis_stock: 7,
            expected_stock: 6,
            buyers: 3,
            unknown_to_redis: vec![(lost_user, lost_order)],
            only_in_redis: vec![(ghost_user, ghost_order)],
            other_order: vec![],
            repaired: false,
            initial_stock: Some(10),
            db_stock: 10 - 3,
            holding: 3,
            paid_and_closed: 0,
            buckets: vec![],
        }]
    );
    let repaired = seckill.reconcile(Some(id), true).await.unwrap();
    assert!(repaired[0].repaired);
    // The worker writes the order queued again.
    wait_for_orders(&app, voucher, 4).await;
    assert!(db_order_ids(&app, voucher).await.contains(&ghost_order));
    let again = seckill.reconcile(None, false).await.unwrap();
    let this = again.iter().find(|c| c.voucher == voucher).unwrap();
    assert!(!this.drift(), "{this}");
    assert_eq!((this.redis_stock, this.buyers), (6, 4));
}

crate::both_backends!(
    reconcile_repairs_what_a_promotion_forgot,
    reconcile_queues_again_what_only_redis_holds
);
