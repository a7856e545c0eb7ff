//! A voucher's stock split over buckets: exact to the unit, one order per user, no buyer told
//! "sold out" while a bucket holds a unit, units of closed orders back once, a grab left
//! half-done by a dead instance settled — on one Redis, and on a three-master cluster with an
//! instance killed mid-sale.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use hmdp::testing::{FlashSale, domain::StockBuckets};

use crate::helpers::{
    ADMIN_TOKEN, Backend, ChildGuard, Patience, RedisCluster, SalePath, TestApp, code_of,
    db_buyers, db_stock, free_port, grab_raw, login_many, open_payment, order_id_of, order_status,
    prior_order_of, reconcile_one, signed_notice, spawn_app_with, spawn_on_path, wait_for_orders,
    wait_for_status, wait_until, wait_until_up,
};

/// Creates a sale of `stock` split over `buckets`, on sale from a minute ago for an hour.
async fn create_split_sale(app: &TestApp, stock: i64, buckets: i64) -> i64 {
    FlashSale::new(stock)
        .buckets(buckets)
        .create(&app.client, &app.url(""), ADMIN_TOKEN)
        .await
        .unwrap()
}

async fn user_id(app: &TestApp, token: &str) -> i64 {
    app.get("/api/user/me", Some(token)).await.body["data"]["id"]
        .as_i64()
        .unwrap()
}

/// The sale's live view with each bucket (computed at most once a second).
async fn stats(app: &TestApp, voucher: i64) -> serde_json::Value {
    app.get(
        &format!("/api/voucher/seckill/{voucher}/stats?buckets=true"),
        None,
    )
    .await
    .body["data"]
        .clone()
}

/// The live view once Redis holds `stock` units in all.
async fn stats_at(app: &TestApp, voucher: i64, stock: i64) -> serde_json::Value {
    let patience = Patience::new(Duration::from_secs(10)).every(Duration::from_millis(100));
    wait_until(patience, "the sale's view", async || {
        let view = stats(app, voucher).await;
        if view["redisStock"] == stock {
            Ok(view)
        } else {
            Err(format!("{view}"))
        }
    })
    .await
}

/// Each bucket's Redis stock in a live view with buckets.
fn bucket_stocks(view: &serde_json::Value) -> Vec<i64> {
    view["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["redisStock"].as_i64().unwrap())
        .collect()
}

/// A counter of the app's metrics, summed over its labels.
async fn metric(app: &TestApp, name: &str) -> f64 {
    app.metrics()
        .await
        .lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buyers_of_one_bucket_buy_every_unit_of_the_others() {
    let app = Arc::new(spawn_app_with(Backend::Sqlite, |c| c.seckill.shards = 4).await);
    let (stock, n) = (12, 4);
    let voucher = create_split_sale(&app, stock, n).await;
    let buckets = StockBuckets::new(n).unwrap();
    let view = stats(&app, voucher).await;
    assert_eq!(view["stockBuckets"], 4);
    assert_eq!(bucket_stocks(&view), [3, 3, 3, 3], "{view}");

    // Buyers whose home is bucket 0, which holds 3 units: a version that pins them to it
    // would tell the fourth "sold out" with 9 units left.
    let tokens = login_many(&app, 100).await;
    let mut homed = Vec::new();
    for t in &tokens {
        if buckets.home(user_id(&app, t).await) == 0 {
            homed.push(t.clone());
        }
    }
    assert!(homed.len() > stock as usize, "{} buyers homed", homed.len());
    let mut orders = HashSet::new();
    for t in &homed[..stock as usize] {
        let (_, body) = grab_raw(&app, voucher, t).await;
        orders.insert(order_id_of(&body).unwrap_or_else(|| panic!("{body}")));
    }
    assert_eq!(orders.len(), stock as usize);
    let view = stats_at(&app, voucher, 0).await;
    assert_eq!(view["buckets"][0]["accepted"], stock, "every buyer at home");
    assert_eq!(metric(&app, "hmdp_seckill_borrowed").await, 9.0);
    let (_, body) = grab_raw(&app, voucher, &homed[stock as usize]).await;
    assert_eq!(code_of(&body), "sold_out");
    // One order per user, whatever bucket the unit came from.
    let (_, body) = grab_raw(&app, voucher, &homed[5]).await;
    assert_eq!(code_of(&body), "duplicate_order");
    assert!(orders.contains(&prior_order_of(&body).unwrap()));

    wait_for_orders(&app, voucher, stock).await;
    assert_eq!(db_buyers(&app, voucher).await, stock);
    let check = reconcile_one(&app, voucher).await;
    assert!(!check.drift(), "{check}");
    assert_eq!(check.buckets.len(), 4);

    // A cancelled order's unit comes back once, however often it is cancelled, and sells.
    let first = *orders.iter().next().unwrap();
    let owner = &homed[..stock as usize];
    let mut cancelled = false;
    for t in owner {
        let r = app
            .post(&format!("/api/voucher-order/{first}/cancel"), Some(t))
            .await;
        if r.success() {
            cancelled = true;
            for _ in 0..2 {
                let again = app
                    .post(&format!("/api/voucher-order/{first}/cancel"), Some(t))
                    .await;
                assert!(again.success(), "{again:?}");
            }
            break;
        }
    }
    assert!(cancelled);
    stats_at(&app, voucher, 1).await;
    assert_eq!(db_stock(&app, voucher).await, 1);
    let outsider = tokens.iter().find(|t| !homed.contains(t)).unwrap();
    let (_, body) = grab_raw(&app, voucher, outsider).await;
    assert!(order_id_of(&body).is_some(), "{body}");
    let (_, body) = grab_raw(&app, voucher, &homed[stock as usize + 1]).await;
    assert_eq!(code_of(&body), "sold_out");
    wait_for_orders(&app, voucher, stock + 1).await;
    let check = reconcile_one(&app, voucher).await;
    assert!(!check.drift(), "{check}");
}

mod order_life {
    use super::*;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_sync() {
        a_split_sale_lives_the_order_life(Backend::Sqlite, SalePath::Sync).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_stream() {
        a_split_sale_lives_the_order_life(Backend::Sqlite, SalePath::Stream).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql_rabbitmq() {
        a_split_sale_lives_the_order_life(Backend::MySql, SalePath::RabbitMq).await
    }
}

/// A split sale in each mode and on each transport: a crowd buys exactly the stock, one order
/// pays, one is cancelled (twice), the rest close at their pay deadline; each closed unit comes
/// back once — to its bucket, in Redis — and sells again.
async fn a_split_sale_lives_the_order_life(backend: Backend, path: SalePath) {
    let pay_timeout = Duration::from_secs(3);
    let app = Arc::new(
        spawn_on_path(backend, path, |c| {
            c.seckill.shards = 3;
            c.seckill.pay_timeout = pay_timeout;
        })
        .await,
    );
    let in_redis = path != SalePath::Sync;
    let (stock, n) = (6, 3);
    let voucher = create_split_sale(&app, stock, n).await;
    let tokens = login_many(&app, 8).await;
    let grabs: Vec<_> = tokens
        .iter()
        .map(|t| {
            let (app, t) = (app.clone(), t.clone());
            tokio::spawn(async move { (t.clone(), grab_raw(&app, voucher, &t).await) })
        })
        .collect();
    let (mut bought, mut refused) = (Vec::new(), Vec::new());
    for g in grabs {
        let (token, (status, body)) = g.await.unwrap();
        assert_eq!(status, 200, "{body}");
        match order_id_of(&body) {
            Some(id) => bought.push((token, id)),
            None => {
                assert_eq!(code_of(&body), "sold_out", "{body}");
                refused.push(token);
            }
        }
    }
    assert_eq!((bought.len(), refused.len()), (6, 2));
    wait_for_orders(&app, voucher, stock).await;
    if in_redis {
        let view = stats_at(&app, voucher, 0).await;
        assert_eq!(view["accepted"], stock, "{view}");
    }

    let (payer, paid) = &bought[0];
    let (trade, amount) = open_payment(&app, payer, *paid).await;
    assert!(
        signed_notice(&app, *paid, &trade, amount, "paid")
            .await
            .success()
    );
    let (canceller, cancelled) = &bought[1];
    for _ in 0..2 {
        let r = app
            .post(
                &format!("/api/voucher-order/{cancelled}/cancel"),
                Some(canceller),
            )
            .await;
        assert!(r.success(), "{r:?}");
    }
    // The rest close: within a few seconds of their deadline (the id's second + the timeout).
    for (token, id) in &bought[1..] {
        wait_for_status(&app, token, *id, 4, pay_timeout + Duration::from_secs(8)).await;
    }
    assert_eq!(order_status(&app, payer, *paid).await, 2, "paid stays paid");
    assert_eq!(db_stock(&app, voucher).await, 5);
    if in_redis {
        // Each closed unit back once, in the bucket it is returned to.
        let buckets = StockBuckets::new(n).unwrap();
        let mut back = [0i64; 3];
        for (_, id) in &bought[1..] {
            back[buckets.return_bucket(*id) as usize] += 1;
        }
        let view = stats_at(&app, voucher, 5).await;
        assert_eq!(bucket_stocks(&view), back, "{view}");
        let check = reconcile_one(&app, voucher).await;
        assert!(!check.drift(), "{check}");
    }

    // The returned units sell again, whatever bucket the new buyers call home.
    for token in &refused {
        let (_, body) = grab_raw(&app, voucher, token).await;
        assert!(order_id_of(&body).is_some(), "{body}");
    }
    wait_for_orders(&app, voucher, stock + 2).await;
    assert_eq!(db_stock(&app, voucher).await, 3);
    if in_redis {
        stats_at(&app, voucher, 3).await;
        let check = reconcile_one(&app, voucher).await;
        assert!(!check.drift(), "{check}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_left_by_a_dead_instance_is_settled() {
    let app = Arc::new(spawn_app_with(Backend::Sqlite, |c| c.seckill.shards = 3).await);
    let voucher = create_split_sale(&app, 6, 3).await;
    let buckets = StockBuckets::new(3).unwrap();
    let tokens = login_many(&app, 2).await;
    let (abandoned, lent) = (&tokens[0], &tokens[1]);
    let keys = &app.state.keys;
    let mut redis = app.redis().await;
    // Two grabs that died after claiming their buyer's record: one before any bucket lent it
    // a unit, one after (its order is in a stream; only its claim was left).
    let now: (i64, i64) = redis::cmd("TIME").query_async(&mut redis).await.unwrap();
    let long_ago = now.0 * 1000 - 60_000;
    let mut claim = async |token: &str, order: i64| {
        let user = user_id(&app, token).await;
        let home = buckets.home(user);
        let shard = hmdp::testing::kv::Keys::seckill_bucket_shard(voucher, home, 3);
        let _: () = redis::pipe()
            .hset(
                keys.seckill_bucket_buyers(shard, voucher, home),
                user,
                order,
            )
            .hincr(keys.seckill_bucket(shard, voucher, home), "sold", 1)
            .zadd(
                keys.seckill_bucket_claims(shard, voucher, home),
                format!("{order}:{user}"),
                long_ago,
            )
            .query_async(&mut redis)
            .await
            .unwrap();
        (user, home)
    };
    claim(abandoned, 1001).await;
    let (user, home) = claim(lent, 1002).await;
    let lender = (home + 1) % 3;
    let shard = hmdp::testing::kv::Keys::seckill_bucket_shard(voucher, lender, 3);
    let _: () = redis::cmd("HSET")
        .arg(keys.seckill_bucket_lent(shard, voucher, lender))
        .arg(1002)
        .arg(user)
        .query_async(&mut redis)
        .await
        .unwrap();
    // A claim is no order: the live view counts neither yet.
    let view = stats(&app, voucher).await;
    assert_eq!(view["accepted"], 0, "{view}");

    // The abandoned buyer may buy: their record was a claim no bucket served.
    let (_, body) = grab_raw(&app, voucher, abandoned).await;
    let order = order_id_of(&body).unwrap_or_else(|| panic!("{body}"));
    assert_ne!(order, 1001);
    assert_eq!(metric(&app, "hmdp_seckill_claims_dropped").await, 1.0);
    // The other one's order exists: they are told about it.
    let (_, body) = grab_raw(&app, voucher, lent).await;
    assert_eq!(code_of(&body), "duplicate_order", "{body}");
    assert_eq!(prior_order_of(&body), Some(1002));
    // No claim is left, and no unit went anywhere but to the one accepted grab.
    let view = stats_at(&app, voucher, 5).await;
    assert_eq!(
        view["accepted"], 2,
        "the new order and the lent one: {view}"
    );
    for b in 0..3u32 {
        let shard = hmdp::testing::kv::Keys::seckill_bucket_shard(voucher, b, 3);
        let left: i64 = redis::cmd("ZCARD")
            .arg(keys.seckill_bucket_claims(shard, voucher, b))
            .query_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(left, 0, "bucket {b}");
    }
}

/// `EVALSHA` calls each master of the cluster has answered.
async fn evalsha_calls(cluster: &RedisCluster) -> Vec<i64> {
    let mut calls = Vec::new();
    for url in cluster.urls() {
        let mut c = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut c)
            .await
            .unwrap();
        let n = info
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap());
        calls.push(n);
    }
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_voucher_sells_exactly_over_three_masters_with_an_instance_killed() {
    const STOCK: i64 = 60;
    const BUYERS: usize = 150;
    let cluster = RedisCluster::start().await;
    let url = cluster.urls().join(",");
    let app = Arc::new(
        spawn_app_with(Backend::Sqlite, {
            let url = url.clone();
            move |c| {
                c.redis_url = Some(url);
                c.seckill.shards = 12;
            }
        })
        .await,
    );
    let voucher = create_split_sale(&app, STOCK, 12).await;
    let tokens = Arc::new(login_many(&app, BUYERS).await);
    for url in cluster.urls() {
        let mut c = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut c)
            .await
            .unwrap();
    }

    // A second instance in its own process, serving half of the buyers; its orders are
    // written by the first one's worker.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let spawn_other = || {
        ChildGuard(
            app.binary(dir.path())
                .arg("serve")
                .env("HMDP_LISTEN", format!("127.0.0.1:{port}"))
                .env("HMDP_ADMIN_TOKEN", ADMIN_TOKEN)
                .env("HMDP_REDIS_URL", &url)
                .env("HMDP_SECKILL_SHARDS", "12")
                .env("HMDP_WORKER", "false")
                .spawn()
                .unwrap(),
        )
    };
    let mut other = spawn_other();
    wait_until_up(&app.client, port).await;
    let other_base = format!("http://127.0.0.1:{port}");

    // Every buyer grabs until they hold an order or are told "sold out", retrying errors and
    // a connection the killed instance dropped.
    let answers = Arc::new(std::sync::Mutex::new(HashMap::<usize, String>::new()));
    let mut tasks = Vec::new();
    for i in 0..BUYERS {
        let (app, tokens, answers) = (app.clone(), tokens.clone(), answers.clone());
        let base = if i % 2 == 0 {
            app.url("")
        } else {
            other_base.clone()
        };
        tasks.push(tokio::spawn(async move {
            loop {
                let sent = app
                    .client
                    .post(format!("{base}/api/voucher-order/seckill/{voucher}"))
                    .header("authorization", &tokens[i])
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await;
                let Ok(r) = sent else {
                    tokio::task::yield_now().await;
                    continue;
                };
                let body = r.text().await.unwrap_or_default();
                let code = if body.is_empty() {
                    String::new()
                } else {
                    serde_json::from_str::<serde_json::Value>(&body)
                        .map(|v| v["code"].as_str().unwrap_or("").to_owned())
                        .unwrap_or_default()
                };
                // A grab answered by the killed instance may have been accepted: asking again
                // names the order.
                let held = code == "duplicate_order" && prior_order_of(&body).is_some();
                if order_id_of(&body).is_some() || code == "sold_out" || held {
                    answers.lock().unwrap().insert(i, body);
                    return;
                }
                // Duplicate while another grab of theirs borrows, 503s, the dead instance.
                tokio::task::yield_now().await;
            }
        }));
    }
    // Killed -9 once a third of the stock is sold, then started again.
    let patience = Patience::new(Duration::from_secs(60)).every(Duration::from_millis(5));
    wait_until(patience, "a third of the stock sold", async || {
        let accepted = answers
            .lock()
            .unwrap()
            .values()
            .filter(|b| order_id_of(b).is_some())
            .count();
        if accepted as i64 >= STOCK / 3 {
            Ok(())
        } else {
            Err(format!("{accepted} accepted"))
        }
    })
    .await;
    other.0.kill().unwrap();
    let _ = other.0.wait();
    other = spawn_other();
    wait_until_up(&app.client, port).await;
    for t in tasks {
        t.await.unwrap();
    }
    drop(other);

    let answers = answers.lock().unwrap().clone();
    let accepted: HashSet<i64> = answers
        .values()
        .filter_map(|b| order_id_of(b).or_else(|| prior_order_of(b)))
        .collect();
    assert_eq!(accepted.len() as i64, STOCK, "exactly the stock was sold");
    wait_for_orders(&app, voucher, STOCK).await;
    let buyers = db_buyers(&app, voucher).await;
    assert_eq!(buyers, STOCK, "no user twice");
    stats_at(&app, voucher, 0).await;
    let check = reconcile_one(&app, voucher).await;
    assert!(!check.drift(), "{check}");

    // Every master ran a fair share of the grab scripts (12 buckets fall 4, 3 and 5 on them).
    let calls = evalsha_calls(&cluster).await;
    let total: i64 = calls.iter().sum();
    assert!(
        calls.iter().all(|&c| c * 10 >= total),
        "grab scripts per master: {calls:?}"
    );
}

/// Deletes a bucket's hash and buyers, as a Redis that lost its data would.
async fn lose_bucket(app: &TestApp, voucher: i64, shards: u32, bucket: u32) {
    let keys = &app.state.keys;
    let shard = hmdp::testing::kv::Keys::seckill_bucket_shard(voucher, bucket, shards);
    let _: () = redis::AsyncCommands::del(
        &mut app.redis().await,
        &[
            keys.seckill_bucket(shard, voucher, bucket),
            keys.seckill_bucket_buyers(shard, voucher, bucket),
        ],
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_bucket_rebuilds_the_whole_sale_from_the_database() {
    let app = Arc::new(spawn_app_with(Backend::Sqlite, |c| c.seckill.shards = 3).await);
    let (stock, n) = (9, 3);
    let voucher = create_split_sale(&app, stock, n).await;
    let buckets = StockBuckets::new(n).unwrap();
    // Enough buyers that each bucket is home to some of those who buy later.
    let tokens = login_many(&app, 40).await;
    let mut buyers = Vec::new();
    for t in &tokens[..5] {
        let (_, body) = grab_raw(&app, voucher, t).await;
        buyers.push((
            t.clone(),
            order_id_of(&body).unwrap_or_else(|| panic!("{body}")),
        ));
    }
    wait_for_orders(&app, voucher, 5).await;

    // One bucket lost while the others sell: the next grab that meets it (a buyer at home
    // there) rebuilds every bucket, with the lost bucket's buyers known again.
    let (token, order) = buyers[0].clone();
    let home = buckets.home(user_id(&app, &token).await);
    lose_bucket(&app, voucher, 3, home).await;
    let mut fresh = Vec::new();
    for t in &tokens[5..] {
        fresh.push((t.clone(), buckets.home(user_id(&app, t).await)));
    }
    let at_home = fresh.iter().position(|(_, b)| *b == home).unwrap();
    let (t, _) = fresh.remove(at_home);
    let (_, body) = grab_raw(&app, voucher, &t).await;
    assert!(order_id_of(&body).is_some(), "{body}");
    let view = stats_at(&app, voucher, stock - 6).await;
    assert_eq!(view["accepted"], 6, "{view}");
    let check = reconcile_one(&app, voucher).await;
    assert!(!check.drift(), "{check}");
    assert!(
        check.unknown_to_redis.is_empty() && check.buyers == 6,
        "{check}"
    );
    let (_, body) = grab_raw(&app, voucher, &token).await;
    assert_eq!(prior_order_of(&body), Some(order), "{body}");

    // Every bucket lost (an empty Redis): the same, from the database alone.
    for b in 0..3 {
        lose_bucket(&app, voucher, 3, b).await;
    }
    let mut sold = 6;
    for (t, _) in &fresh {
        let (_, body) = grab_raw(&app, voucher, t).await;
        if order_id_of(&body).is_some() {
            sold += 1;
        } else {
            assert_eq!(code_of(&body), "sold_out", "{body}");
        }
    }
    assert_eq!(sold, stock, "exactly the stock, across the reloads");
    stats_at(&app, voucher, 0).await;
    wait_for_orders(&app, voucher, stock).await;
    let check = reconcile_one(&app, voucher).await;
    assert!(!check.drift(), "{check}");
}
