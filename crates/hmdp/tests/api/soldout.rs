//! Refusals from memory (`seckill::memory`): a sold-out voucher and a user who already bought
//! are answered without Redis, and never a grab the script would accept is refused — above
//! all when the voucher is reloaded with stock while another instance remembers it sold out.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use hmdp_testkit::{RedisServer, redis_url, wait_until};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use crate::helpers::{
    Backend, TestApp, code_of, create_sale, grab_raw, lose_voucher, order_id_of, prior_order_of,
    spawn_app_with, spawn_with_config, test_config,
};

crate::both_backends!(refusals_are_repeated_from_memory_without_redis);

/// Script invocations Redis has run so far (`INFO commandstats`).
async fn scripts_run(url: &str) -> u64 {
    let mut redis = hmdp_testkit::connect(url).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut redis)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

async fn refusals_are_repeated_from_memory_without_redis(backend: Backend) {
    let redis = RedisServer::start().await;
    let url = redis.url();
    let app = spawn_app_with(backend, |c| c.redis_url = Some(url.clone())).await;
    let stats = app.state.seckill.stats();
    let voucher = create_sale(&app, 1, -60, 3600).await;
    let (buyer, late, later) = (
        app.login("13900000001").await,
        app.login("13900000002").await,
        app.login("13900000003").await,
    );
    let (_, body) = grab_raw(&app, voucher, &buyer).await;
    let order = order_id_of(&body).expect(&body);

    // The buyer again: the order this instance accepted, from memory.
    let scripts = scripts_run(&url).await;
    let (_, body) = grab_raw(&app, voucher, &buyer).await;
    assert_eq!(code_of(&body), "duplicate_order", "{body}");
    assert_eq!(prior_order_of(&body), Some(order), "{body}");
    assert_eq!(stats.memory_duplicate.get(), 1);
    assert_eq!(
        scripts_run(&url).await,
        scripts,
        "the script ran for a remembered buyer"
    );

    // The script says "sold out" once; then memory does, for everyone, without Redis.
    let (_, body) = grab_raw(&app, voucher, &late).await;
    assert_eq!(code_of(&body), "sold_out", "{body}");
    assert_eq!(
        stats.memory_sold_out.get(),
        0,
        "the first one came from the script"
    );
    // Reading `later`'s session is a script too: read it first, so only a grab could run one.
    assert!(app.get("/api/user/me", Some(&later)).await.success());
    let scripts = scripts_run(&url).await;
    let (_, body) = grab_raw(&app, voucher, &later).await;
    assert_eq!(code_of(&body), "sold_out", "{body}");
    assert_eq!(
        scripts_run(&url).await,
        scripts,
        "the script ran for a sold-out voucher"
    );
    assert!(stats.memory_sold_out.get() >= 1);
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("hmdp_seckill_memory_refusals_total{outcome=\"sold_out\"}"),
        "{metrics}"
    );

    // A reload with stock forgets both answers: the sold-out one at once, the buyer's until
    // the script confirms it (rebuilt from the database or the stream), then from memory again.
    // Two in stock, so `late` can buy again below.
    // The keys dropped, the warm-up a grab on another instance would run.
    lose_voucher_here(&app, voucher).await;
    raise_db_stock(&app, voucher, 2).await;
    let id = hmdp::testing::domain::VoucherId::new(voucher).unwrap();
    app.state.seckill.warm(id).await.unwrap();
    let (_, body) = grab_raw(&app, voucher, &late).await;
    assert!(
        order_id_of(&body).is_some(),
        "a reload must forget the sold-out answer: {body}"
    );
    for remembered in [1, 2] {
        let (_, body) = grab_raw(&app, voucher, &buyer).await;
        assert_eq!(prior_order_of(&body), Some(order), "{body}");
        assert_eq!(stats.memory_duplicate.get(), remembered);
    }
    app.stop().await;
}

/// [`lose_voucher`] on the service's own Redis (a private one here).
async fn lose_voucher_here(app: &TestApp, voucher: i64) {
    let keys = &app.state.keys;
    let _: () = redis::AsyncCommands::del(
        &mut app.state.redis.clone(),
        &[
            keys.seckill_voucher(0, voucher),
            keys.seckill_buyers(0, voucher),
        ],
    )
    .await
    .unwrap();
}

/// `tb_seckill_voucher.stock += by`: stock comes back for the next warm-up.
async fn raise_db_stock(app: &TestApp, voucher: i64, by: i64) {
    let sql = "UPDATE tb_seckill_voucher SET stock = stock + ? WHERE voucher_id = ?";
    match &app.state.db {
        hmdp::testing::storage::Db::Sqlite(p) => sqlx::query(sql)
            .bind(by)
            .bind(voucher)
            .execute(p)
            .await
            .map(drop),
        hmdp::testing::storage::Db::MySql(p) => sqlx::query(sql)
            .bind(by)
            .bind(voucher)
            .execute(p)
            .await
            .map(drop),
    }
    .unwrap();
}

/// A TCP proxy in front of Redis that holds back what Redis sends: by `commands` on ordinary
/// connections, by `pubsub` on a connection once it has sent `SUBSCRIBE`. `sent` counts the
/// commands containing `watch` forwarded to Redis.
struct SlowRedis {
    addr: SocketAddr,
    sent: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SlowRedis {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SlowRedis {
    async fn start(commands: Duration, pubsub: Duration, watch: Vec<u8>) -> Self {
        let target = redis_addr();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sent = Arc::new(AtomicU64::new(0));
        let notify = sent.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (notify, watch) = (notify.clone(), watch.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let subscribed = Arc::new(AtomicBool::new(false));
                    let sub = subscribed.clone();
                    let up = tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n) = cr.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            let chunk = &buf[..n];
                            if contains(chunk, b"SUBSCRIBE") || contains(chunk, b"subscribe") {
                                sub.store(true, Ordering::SeqCst);
                            }
                            if sw.write_all(chunk).await.is_err() {
                                break;
                            }
                            if !watch.is_empty() && contains(chunk, &watch) {
                                notify.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    });
                    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
                    let writer = tokio::spawn(async move {
                        while let Some((at, bytes)) = rx.recv().await {
                            // Not a wait: the latency this proxy adds to each answer.
                            tokio::time::sleep_until(at.into()).await;
                            if cw.write_all(&bytes).await.is_err() {
                                break;
                            }
                        }
                    });
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = sr.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let delay = if subscribed.load(Ordering::SeqCst) {
                            pubsub
                        } else {
                            commands
                        };
                        if tx
                            .send((Instant::now() + delay, buf[..n].to_vec()))
                            .is_err()
                        {
                            break;
                        }
                    }
                    drop(tx);
                    let _ = writer.await;
                    up.abort();
                });
            }
        });
        Self { addr, sent, task }
    }

    fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `host:port` of the test Redis.
fn redis_addr() -> SocketAddr {
    let url = redis_url();
    let rest = url.split("://").nth(1).unwrap_or(&url);
    let authority = rest.split('/').next().unwrap();
    let host_port = authority.rsplit('@').next().unwrap();
    let host_port = host_port.replace("localhost", "127.0.0.1");
    host_port
        .parse()
        .expect("HMDP_TEST_REDIS_URL names host:port")
}

/// Distinct users, each logged in on the instance that asks for it.
struct Users(u64);

impl Users {
    async fn next(&mut self, app: &TestApp) -> String {
        self.0 += 1;
        app.login(&self.0.to_string()).await
    }
}

/// A voucher of one unit, sold through `a` to the next of `users`.
async fn sold_out_sale(a: &TestApp, users: &mut Users) -> i64 {
    let voucher = create_sale(a, 1, -60, 3600).await;
    let first = users.next(a).await;
    assert!(order_id_of(&grab_raw(a, voucher, &first).await.1).is_some());
    voucher
}

/// Instance A straight on Redis, instance B through `slow`: one database, one key prefix.
async fn two_instances(slow: &SlowRedis) -> (TestApp, TestApp) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/shared.db", dir.path().display());
    let config = test_config(url.clone(), dir.path());
    let a = spawn_with_config(config, Backend::Sqlite, None, dir).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(url, dir.path());
    config.redis_prefix = a.prefix.clone();
    config.redis_url = Some(slow.url());
    let b = spawn_with_config(config, Backend::Sqlite, None, dir).await;
    (a, b)
}

/// Instance B hears announcements late (its subscription lags 150 ms). Each round: B
/// remembers the voucher sold out; stock comes back (database raised, Redis loses the voucher)
/// and a grab on A reloads it and takes one; right after, a grab on B must be accepted. Fails
/// if a load does not wait for every instance's acknowledgement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_reaches_every_instance_before_its_stock_can_be_taken() {
    let slow = SlowRedis::start(Duration::ZERO, Duration::from_millis(150), Vec::new()).await;
    let (a, b) = two_instances(&slow).await;
    let mut users = Users(13900000000);
    let voucher = sold_out_sale(&a, &mut users).await;
    for round in 0..5 {
        // B remembers it sold out (the script's answer, then one from memory).
        let remembered = b.state.seckill.stats().memory_sold_out.get();
        let (user, other) = (users.next(&b).await, users.next(&b).await);
        let (_, body) = grab_raw(&b, voucher, &user).await;
        assert_eq!(code_of(&body), "sold_out", "round {round}: {body}");
        let (_, body) = grab_raw(&b, voucher, &other).await;
        assert_eq!(code_of(&body), "sold_out", "round {round}: {body}");
        assert!(
            b.state.seckill.stats().memory_sold_out.get() > remembered,
            "round {round}: B does not remember the voucher sold out"
        );

        // Two more in stock; A's grab reloads the voucher and takes one.
        raise_db_stock(&a, voucher, 2).await;
        lose_voucher(&a, voucher).await;
        let on_a = users.next(&a).await;
        let on_b = users.next(&b).await;
        let (_, body) = grab_raw(&a, voucher, &on_a).await;
        assert!(order_id_of(&body).is_some(), "round {round}: {body}");
        let (_, body) = grab_raw(&b, voucher, &on_b).await;
        assert!(
            order_id_of(&body).is_some(),
            "round {round}: B refused a grab the script would accept: {body}"
        );
    }
    a.stop().await;
    b.stop().await;
}

/// Instance B's command answers lag 300 ms (its subscription does not). Each round: B's grab
/// runs the script on the sold-out hash, and while its "sold out" is on the way back, stock
/// comes back and A reloads the voucher (announced, acknowledged by B, loaded); the stale
/// answer lands after the announcement. Right after, a grab on B must be accepted. Fails if
/// an answer older than the newest announced generation is honoured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sold_out_answer_older_than_a_reload_is_not_remembered() {
    let grab_sha = hmdp::testing::seckill::GRAB.get_hash().as_bytes().to_vec();
    let slow = SlowRedis::start(Duration::from_millis(300), Duration::ZERO, grab_sha).await;
    let (a, b) = two_instances(&slow).await;
    let mut users = Users(13900000000);
    let voucher = sold_out_sale(&a, &mut users).await;
    let b = Arc::new(b);
    for round in 0..3 {
        let (stale_user, on_a, on_b) = (
            users.next(&b).await,
            users.next(&a).await,
            users.next(&b).await,
        );
        // B's grab reaches the script; its answer is held back.
        let sent = slow.sent.load(Ordering::SeqCst);
        let stale = {
            let b = b.clone();
            tokio::spawn(async move { grab_raw(&b, voucher, &stale_user).await })
        };
        wait_until(
            Duration::from_secs(10),
            "B's grab runs the script",
            async || slow.sent.load(Ordering::SeqCst) > sent,
        )
        .await;
        // Three: the stale grab may come after the reload and take one.
        raise_db_stock(&a, voucher, 3).await;
        lose_voucher(&a, voucher).await;
        let (_, body) = grab_raw(&a, voucher, &on_a).await;
        assert!(order_id_of(&body).is_some(), "round {round}: {body}");
        // Either answer is right for it: the script ran before or after the reload.
        let (_, body) = stale.await.unwrap();
        assert!(
            code_of(&body) == "sold_out" || order_id_of(&body).is_some(),
            "round {round}: {body}"
        );
        let (_, body) = grab_raw(&b, voucher, &on_b).await;
        assert!(
            order_id_of(&body).is_some(),
            "round {round}: B refused a grab the script would accept: {body}"
        );
        // Sell the rest so that the next round starts sold out.
        loop {
            let user = users.next(&a).await;
            let (_, body) = grab_raw(&a, voucher, &user).await;
            if code_of(&body) == "sold_out" {
                break;
            }
        }
    }
    a.stop().await;
    Arc::into_inner(b).unwrap().stop().await;
}

/// A buyer who asks again after the stock is gone (their answer was lost, say) is told about
/// their order, not that the sale sold out: by the script on an instance that never saw them,
/// and from memory on the one that did, even once it remembers the sale sold out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buyer_asking_again_after_the_sell_out_is_told_about_the_order() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/shared.db", dir.path().display());
    let a = spawn_with_config(
        test_config(url.clone(), dir.path()),
        Backend::Sqlite,
        None,
        dir,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(url, dir.path());
    config.redis_prefix = a.prefix.clone();
    let b = spawn_with_config(config, Backend::Sqlite, None, dir).await;

    let voucher = create_sale(&a, 1, -60, 3600).await;
    let (buyer, late) = (a.login("13900000011").await, a.login("13900000012").await);
    let order = order_id_of(&grab_raw(&a, voucher, &buyer).await.1).expect("the one unit");
    let (_, body) = grab_raw(&a, voucher, &late).await;
    assert_eq!(code_of(&body), "sold_out", "{body}");

    // B never saw the buyer: the script answers, and it looks for the buyer first.
    let (_, body) = grab_raw(&b, voucher, &buyer).await;
    assert_eq!(code_of(&body), "duplicate_order", "{body}");
    assert_eq!(prior_order_of(&body), Some(order), "{body}");

    // A remembers both the buyer and the sale sold out: the buyer comes first.
    let (_, body) = grab_raw(&a, voucher, &buyer).await;
    assert_eq!(code_of(&body), "duplicate_order", "{body}");
    assert_eq!(prior_order_of(&body), Some(order), "{body}");
    a.stop().await;
    b.stop().await;
}
