//! Redis Sentinel: the service finds its primary through the Sentinels and follows a failover
//! by itself, on a private primary, two replicas and three Sentinels.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use hmdp::{Application, config::Config, testing::FlashSale};

use crate::helpers::{
    ADMIN_TOKEN, Backend, Patience, RedisServer, SentinelSet, TestApp, WorkerProcess, code_of,
    create_sale, db_count, db_order_ids, free_port, login_many, order_id_of, prior_order_of,
    reconcile_one, spawn_app_with, test_config, wait_until,
};

/// How the primary goes, and the sale it goes in the middle of.
#[derive(Debug, Clone, Copy)]
struct Failover {
    /// `kill -9` of the primary; otherwise a planned `SENTINEL FAILOVER`, the primary running on.
    kill: bool,
    stock: i64,
    /// Buyers served before the failover, buyers through it.
    early: usize,
    late: usize,
    /// Between the starts of two late buyers (zero: all at once).
    stagger: Duration,
    /// The orders' writer (an `hmdp worker` process) starts only once the failover is over: a
    /// grab lost with the old primary's data cannot have been written to the database from its
    /// stream first. Otherwise it runs throughout and follows the failover.
    write_after: bool,
    /// The sale's `stockBuckets` (1: one key), all on the one primary.
    buckets: i64,
}
/// How often a buyer whose grab failed tries again (a client's retry pace).
const RETRY_PACE: Duration = Duration::from_millis(50);
/// How long a buyer keeps trying: the failover takes a few seconds on a busy machine.
const BUYER_PATIENCE: Duration = Duration::from_secs(90);

/// `config` reaches Redis through the Sentinels of `set`.
fn on_sentinel(config: &mut Config, set: &SentinelSet) {
    config.redis_url = None;
    config.redis_sentinels = Some(set.sentinel_addrs().parse().unwrap());
    config.redis_sentinel_master = Some(SentinelSet::MASTER.to_owned());
}

/// What one grab attempt got, and when.
#[derive(Debug, Clone)]
enum Outcome {
    /// The buyer's order: accepted now, or named by a refusal to sell him a second one.
    Order(i64),
    /// A final refusal: sold out (or a second order refused without naming the first).
    Refused,
    /// Anything to try again: 503, a transport error, a timeout.
    Failed(String),
}

type Log = Arc<Mutex<Vec<(Instant, Outcome)>>>;

/// Grabs until the answer is final (an order or a business refusal), pacing retries.
async fn buy(app: Arc<TestApp>, voucher: i64, token: String, log: Log) -> Option<i64> {
    let deadline = Instant::now() + BUYER_PATIENCE;
    let mut pace = tokio::time::interval(RETRY_PACE);
    loop {
        pace.tick().await;
        let grabbed = app
            .client
            .post(app.url(&format!("/api/voucher-order/seckill/{voucher}")))
            .header("authorization", &token)
            .send()
            .await;
        let outcome = match grabbed {
            Err(e) => Outcome::Failed(e.to_string()),
            Ok(r) => {
                let status = r.status().as_u16();
                let body = r.text().await.unwrap_or_default();
                match (status, order_id_of(&body)) {
                    (200, Some(id)) => Outcome::Order(id),
                    // A buyer told of the order he has (his earlier answer was lost or not
                    // confirmed) holds it as much as one answered with it.
                    (200, None) => prior_order_of(&body).map_or(Outcome::Refused, Outcome::Order),
                    _ => Outcome::Failed(format!("{status} {}", code_of_or_body(&body))),
                }
            }
        };
        log.lock().unwrap().push((Instant::now(), outcome.clone()));
        match outcome {
            Outcome::Order(id) => return Some(id),
            Outcome::Refused => return None,
            Outcome::Failed(_) if Instant::now() > deadline => return None,
            Outcome::Failed(_) => {}
        }
    }
}

fn code_of_or_body(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .map(|_| code_of(body))
        .unwrap_or_else(|_| body.chars().take(80).collect())
}

/// The primary is killed (`kill -9`) in the middle of a sale whose grabs wait for a replica:
/// the Sentinels promote a replica, the service follows without a restart and the buyers carry
/// on. No unit is sold twice, no buyer has two orders, every grab answered with an order is
/// written, grabs succeed again after the failover, and a logout still reaches a second
/// instance by pub/sub on the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flash_sale_goes_on_through_a_sentinel_failover() {
    sale_through(Failover {
        kill: true,
        stock: 120,
        early: 40,
        late: 160,
        stagger: Duration::ZERO,
        write_after: false,
        buckets: 1,
    })
    .await;
}

/// A planned failover (`SENTINEL FAILOVER`): the old primary keeps taking writes until it is
/// demoted, and the replica still following it would confirm them, so a grab acknowledged then
/// would be lost. The buyers keep coming through the switch (stock for all of them): every
/// acknowledged grab is written, and the service heard the failover announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_sentinel_failover_loses_no_acknowledged_grab() {
    sale_through(Failover {
        kill: false,
        stock: 200,
        early: 40,
        late: 160,
        stagger: Duration::from_millis(20),
        write_after: true,
        buckets: 1,
    })
    .await;
}

/// A sale split over buckets through the killed primary: the buckets all live on it, the
/// grabs that borrow across them wait for a replica like any other, and after the promotion
/// the sale reconciles clean, bucket by bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_sale_goes_on_through_a_sentinel_failover() {
    sale_through(Failover {
        kill: true,
        stock: 120,
        early: 40,
        late: 160,
        stagger: Duration::ZERO,
        write_after: false,
        buckets: 6,
    })
    .await;
}

async fn sale_through(plan: Failover) {
    let Failover {
        stock, early, late, ..
    } = plan;
    let mut set = SentinelSet::start(2).await;
    let first_primary = set.primary_port().await.expect("a primary");
    let a = spawn_app_with(Backend::Sqlite, |c| {
        on_sentinel(c, &set);
        c.seckill.wait_replicas = 1;
        c.seckill.wait_timeout = Duration::from_millis(1000);
        c.seckill.claim_idle = Duration::from_millis(500);
        c.seckill.worker = false;
    })
    .await;
    let b = spawn_app_with(Backend::Sqlite, |c| {
        on_sentinel(c, &set);
        c.redis_prefix = a.prefix.clone();
        c.database_url = a.state.config.database_url.clone();
        c.seckill.worker = false;
    })
    .await;
    let worker_config = (*a.state.config).clone();
    let mut writer = None;
    if !plan.write_after {
        writer = Some(WorkerProcess::start(worker_config.clone()).await);
    }
    let voucher = if plan.buckets == 1 {
        create_sale(&a, stock, -1, 3600).await
    } else {
        FlashSale::new(stock)
            .from_now(-1, 3600)
            .buckets(plan.buckets)
            .create(&a.client, &a.url(""), ADMIN_TOKEN)
            .await
            .unwrap()
    };
    let a = Arc::new(a);
    let tokens = login_many(&a, early + late).await;

    let log: Log = Arc::default();
    let first: Vec<_> = tokens[..early]
        .iter()
        .map(|t| tokio::spawn(buy(a.clone(), voucher, t.clone(), log.clone())))
        .collect();
    for task in first {
        task.await
            .unwrap()
            .expect("every early buyer gets an order");
    }
    // The late buyers arrive one `stagger` after another (a client's pace, not a wait), so
    // that grabs meet the switch and go on after it.
    let starts = {
        let (a, log, tokens) = (a.clone(), log.clone(), tokens[early..].to_vec());
        tokio::spawn(async move {
            let mut pace = (!plan.stagger.is_zero()).then(|| tokio::time::interval(plan.stagger));
            let mut buyers = Vec::new();
            for token in tokens {
                if let Some(pace) = &mut pace {
                    pace.tick().await;
                }
                buyers.push(tokio::spawn(buy(a.clone(), voucher, token, log.clone())));
            }
            buyers
        })
    };
    let began_at = Instant::now();
    if plan.kill {
        set.kill_node(first_primary);
    } else {
        set.fail_over().await;
    }
    let new_primary = set.wait_promotion(first_primary).await;
    let mut acknowledged = HashSet::new();
    let mut buyers_with_orders = 0;
    for task in starts.await.unwrap() {
        if let Some(id) = task.await.unwrap() {
            acknowledged.insert(id);
            buyers_with_orders += 1;
        }
    }
    let writer = match writer {
        Some(writer) => writer,
        None => WorkerProcess::start(worker_config).await,
    };
    let log = log.lock().unwrap().clone();
    for (_, outcome) in &log {
        if let Outcome::Order(id) = outcome {
            acknowledged.insert(*id);
        }
    }

    // The outage as the buyers saw it: the first failed grab, the first success after it.
    let first_failure = log
        .iter()
        .find(|(_, o)| matches!(o, Outcome::Failed(_)))
        .map(|(at, _)| *at);
    let recovered = first_failure.and_then(|from| {
        log.iter()
            .find(|(at, o)| *at > from && matches!(o, Outcome::Order(_)))
            .map(|(at, _)| *at)
    });
    let failed = log
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Failed(_)))
        .count();
    let mut failures: HashMap<String, usize> = HashMap::new();
    for (_, o) in &log {
        if let Outcome::Failed(why) = o {
            *failures.entry(why.chars().take(40).collect()).or_default() += 1;
        }
    }
    println!(
        "sentinel failover: primary :{first_primary} {}, :{new_primary} promoted; {} grabs, \
         {failed} failed ({failures:?}); outage {:?} (first failure {:?} after it began, first \
         success after it {:?} after it began); {} orders acknowledged",
        if plan.kill { "killed" } else { "failed over" },
        log.len(),
        recovered.zip(first_failure).map(|(r, f)| r - f),
        first_failure.map(|f| f.saturating_duration_since(began_at)),
        recovered.map(|r| r.saturating_duration_since(began_at)),
        acknowledged.len(),
    );
    assert!(
        recovered.is_some() || first_failure.is_none(),
        "grabs succeed again after the failover"
    );
    assert!(
        log.iter()
            .any(|(at, o)| *at > began_at && matches!(o, Outcome::Order(_))),
        "grabs are accepted after the failover began"
    );
    assert!(buyers_with_orders > 0);

    // Every acknowledged order is written, and nothing else is sold beyond the stock.
    let patience = Patience::new(Duration::from_secs(180)).every(Duration::from_millis(200));
    let written = wait_until(patience, "every acknowledged order written", async || {
        let stored: HashSet<i64> = db_order_ids(&a, voucher).await.into_iter().collect();
        let missing = acknowledged.difference(&stored).count();
        if missing == 0 {
            Ok(stored)
        } else {
            Err(format!("{missing} acknowledged orders not in the database"))
        }
    })
    .await;
    assert!(
        written.len() as i64 <= stock,
        "oversold: {} orders for {stock}",
        written.len()
    );
    let buyers = db_count(
        &a,
        "SELECT COUNT(DISTINCT user_id) FROM tb_voucher_order WHERE voucher_id = ?",
        voucher,
    )
    .await;
    assert_eq!(buyers, written.len() as i64, "a buyer with two orders");
    let stock_left = db_count(
        &a,
        "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?",
        voucher,
    )
    .await;
    assert_eq!(stock_left + written.len() as i64, stock);

    // The service heard the failover start, followed the promotion and reconciled the sale
    // once, in whichever of its processes got there first; a worker that ran through the
    // failover followed it too.
    let (a_text, worker_text) = (a.metrics().await, scrape(&a, &writer).await);
    assert!(
        counter(&a_text, "hmdp_redis_failovers_announced_total") >= 1,
        "the failover's start is heard"
    );
    assert!(
        counter(&a_text, "hmdp_redis_failovers_total") >= 1,
        "the failover is counted"
    );
    if !plan.write_after {
        assert!(
            counter(&worker_text, "hmdp_redis_failovers_total") >= 1,
            "the worker process followed the failover"
        );
    }
    wait_until(
        Duration::from_secs(60),
        "the sale reconciled once after the promotion",
        async || {
            let reconciles = "hmdp_redis_failover_reconciles_total";
            counter(&a.metrics().await, reconciles)
                + counter(&b.metrics().await, reconciles)
                + counter(&scrape(&a, &writer).await, reconciles)
                == 1
        },
    )
    .await;

    if plan.buckets > 1 {
        // Redis holds, bucket by bucket, what the database says is left (the claims of the
        // buyers refused through the switch were no orders).
        let check = reconcile_one(&a, voucher).await;
        assert!(!check.drift(), "{check}");
        assert_eq!(check.buckets.len(), plan.buckets as usize);
    }

    // Pub/sub on the new primary: a logout through A ends the session B trusts from memory,
    // well inside B's 5 s window.
    let watched = tokens[0].clone();
    assert!(b.get("/api/user/me", Some(&watched)).await.success());
    assert!(a.post("/api/user/logout", Some(&watched)).await.success());
    wait_until(
        Duration::from_secs(2),
        "B refusing the logged-out session",
        async || b.get("/api/user/me", Some(&watched)).await.status == 401,
    )
    .await;
}

/// A counter's value in a `/metrics` text.
fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

/// The worker process's `/metrics`.
async fn scrape(app: &TestApp, worker: &WorkerProcess) -> String {
    let url = format!("{}/metrics", worker.base);
    app.client
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A master name the Sentinels do not monitor stops the start with an error that names it and
/// the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_master_name_is_a_clear_start_up_error() {
    let set = SentinelSet::start(0).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(
        format!("sqlite://{}/hmdp.db", dir.path().display()),
        dir.path(),
    );
    on_sentinel(&mut config, &set);
    config.redis_sentinel_master = Some("no-such-master".to_owned());
    let err = Application::build(config)
        .await
        .err()
        .expect("the start fails");
    let err = format!("{err:#}");
    assert!(
        err.contains("no-such-master") && err.contains("HMDP_REDIS_SENTINEL_MASTER"),
        "{err}"
    );
}

/// One Sentinel that names another primary under the same master name (misconfigured, or
/// hostile) is outvoted: with it listed first and two Sentinels of the real set, the service
/// starts on the primary the two name, writes nothing to the other one, and keeps asking all
/// three without following the lone one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_sentinel_naming_another_primary_is_not_followed() {
    let set = SentinelSet::start(0).await;
    let decoy = RedisServer::start().await;
    let monitor = format!(
        "sentinel monitor {} 127.0.0.1 {} 1",
        SentinelSet::MASTER,
        decoy.port()
    );
    let liar = RedisServer::start_sentinel(free_port(), &monitor).await;
    let honest: Vec<String> = set
        .sentinel_addrs()
        .split(',')
        .take(2)
        .map(str::to_owned)
        .collect();
    let sentinels = format!("127.0.0.1:{},{}", liar.port(), honest.join(","));
    let app = spawn_app_with(Backend::Sqlite, |c| {
        on_sentinel(c, &set);
        c.redis_sentinels = Some(sentinels.parse().unwrap());
    })
    .await;
    let real = set.node_urls()[0].clone();
    let written = async |url: &str| -> (usize, i64) {
        let mut conn = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let ours: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", app.prefix))
            .query_async(&mut conn)
            .await
            .unwrap();
        let all: i64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
        (ours.len(), all)
    };
    app.login("13800000001").await;
    assert!(
        written(&real).await.0 > 0,
        "the session is on the real primary"
    );
    assert_eq!(
        written(&decoy.url()).await.1,
        0,
        "nothing on the lone one's"
    );

    // The service keeps asking the lone Sentinel (its connection, made at start, is used again
    // more than a second later) and still does not follow it.
    let mut liar_conn = redis::Client::open(liar.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    wait_until(
        Duration::from_secs(20),
        "the lone Sentinel asked again after the start",
        async || {
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut liar_conn)
                .await
                .unwrap();
            clients.lines().any(|l| {
                let field = |name: &str| {
                    l.split(' ')
                        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                        .unwrap_or("")
                };
                field("cmd").starts_with("sentinel")
                    && field("age").parse::<u64>().is_ok_and(|age| age >= 2)
                    && field("idle") == "0"
            })
        },
    )
    .await;
    app.login("13800000002").await;
    assert_eq!(
        written(&decoy.url()).await.1,
        0,
        "nothing on the lone one's"
    );
    assert_eq!(
        counter(&app.metrics().await, "hmdp_redis_failovers_total"),
        0,
        "the primary never moved"
    );
}
