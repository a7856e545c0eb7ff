//! Shops on a cache that cannot be knocked over: stampedes, floods of unknown ids, logical
//! expiry, updates, jitter, nearby search, Redis down.

use std::{
    collections::HashSet,
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use reqwest::Method;
use serde_json::json;

use crate::{
    both_backends,
    helpers::{
        ADMIN_TOKEN, Backend, Patience, RedisServer, SchemaDump, TestApp, TestDatabase, free_port,
        spawn_app, spawn_app_with, spawn_with_config, test_config, wait_until,
    },
};

both_backends!(
    a_stampede_on_a_cold_shop_queries_the_database_once,
    an_update_is_visible_on_the_next_read,
    shop_lists_page_like_the_original,
);

fn loads(app: &TestApp) -> u64 {
    app.state
        .catalogue
        .cache()
        .stats()
        .loads
        .load(Ordering::SeqCst)
}

async fn hammer(app: &TestApp, path: &str, n: usize) -> Vec<serde_json::Value> {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (client, url) = (app.client.clone(), app.url(path));
        tasks.push(tokio::spawn(async move {
            client
                .get(url)
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

async fn a_stampede_on_a_cold_shop_queries_the_database_once(backend: Backend) {
    let app = spawn_app(backend).await;
    let before = loads(&app);
    let answers = hammer(&app, "/api/shop/1", 500).await;
    assert!(
        answers
            .iter()
            .all(|a| a["success"] == true && a["data"]["id"] == 1)
    );
    assert_eq!(
        loads(&app) - before,
        1,
        "500 concurrent cold reads, one database query"
    );
    // And the cached copy is the original's shape: a JSON string of the shop at cache:shop:1.
    let raw: String = redis::AsyncCommands::get(
        &mut app.redis().await,
        format!("{}cache:shop:1", app.prefix),
    )
    .await
    .unwrap();
    let cached: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(cached["id"], 1);
}

/// A second instance of the service on the same database and Redis prefix.
async fn second_instance(first: &TestApp, database_url: String) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(database_url, dir.path());
    config.redis_prefix = first.prefix.clone();
    spawn_with_config(config, first.backend_kind(), None, dir).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_load_once_per_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/shared.db", dir.path().display());
    let mut config = test_config(url.clone(), dir.path());
    config.cache.ttl = Duration::from_secs(600);
    let a = spawn_with_config(config, Backend::Sqlite, None, dir).await;
    let b = second_instance(&a, url).await;
    for round in 0..3 {
        let (la, lb) = (loads(&a), loads(&b));
        let (ra, rb) = tokio::join!(
            hammer(&a, "/api/shop/2", 100),
            hammer(&b, "/api/shop/2", 100)
        );
        assert!(ra.iter().chain(rb.iter()).all(|r| r["data"]["id"] == 2));
        let total = loads(&a) - la + loads(&b) - lb;
        assert_eq!(total, 1, "round {round}: one load across both instances");
        // The entry goes away (as after an update); the next stampede rebuilds it once more.
        let _: () =
            redis::AsyncCommands::del(&mut a.redis().await, format!("{}cache:shop:2", a.prefix))
                .await
                .unwrap();
        a.state
            .catalogue
            .cache()
            .invalidate("cache:shop:2")
            .await
            .unwrap();
    }
}

async fn an_update_is_visible_on_the_next_read(backend: Backend) {
    let app = spawn_app(backend).await;
    let shop = app.get("/api/shop/3", None).await.body["data"].clone();
    let mut changed = shop.clone();
    changed["name"] = json!("新名字小店");
    changed["avgPrice"] = json!(77);
    // The top of the original's INT UNSIGNED range survives the round trip (MySQL once read it
    // back sign-extended: -1 and -2).
    changed["sold"] = json!(4_294_967_295_u64);
    changed["comments"] = json!(4_294_967_294_u64);
    let r = app.admin_json(Method::PUT, "/api/shop", &changed).await;
    assert!(r.success(), "{r:?}");
    let after = app.get("/api/shop/3", None).await;
    assert_eq!(after.body["data"]["name"], "新名字小店");
    assert_eq!(after.body["data"]["avgPrice"], 77);
    assert_eq!(after.body["data"]["sold"], 4_294_967_295_u64);
    assert_eq!(after.body["data"]["comments"], 4_294_967_294_u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_reaches_the_l1_of_another_instance() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/shared.db", dir.path().display());
    let mut config = test_config(url.clone(), dir.path());
    config.cache.l1_ttl = Duration::from_secs(60);
    let a = spawn_with_config(config, Backend::Sqlite, None, dir).await;
    let b = second_instance(&a, url).await;
    assert!(b.get("/api/shop/4", None).await.success());
    assert!(b.get("/api/shop/4", None).await.success()); // now in B's L1
    let mut shop = a.get("/api/shop/4", None).await.body["data"].clone();
    shop["name"] = json!("改过的店");
    let r = a.admin_json(Method::PUT, "/api/shop", &shop).await;
    assert!(r.success());
    assert_eq!(
        a.get("/api/shop/4", None).await.body["data"]["name"],
        "改过的店"
    );
    // Well within B's 60 s L1 lifetime: the invalidation message, not the expiry.
    wait_until(
        Duration::from_secs(10),
        "B dropping its stale L1 copy",
        async || b.get("/api/shop/4", None).await.body["data"]["name"] == "改过的店",
    )
    .await;
}

async fn flood(app: &TestApp, ids: &[u32]) {
    let mut tasks = Vec::new();
    for chunk in ids.chunks(ids.len() / 50 + 1) {
        let (client, base, chunk) = (app.client.clone(), app.url("/api/shop/"), chunk.to_vec());
        tasks.push(tokio::spawn(async move {
            for id in chunk {
                let r: serde_json::Value = client
                    .get(format!("{base}{id}"))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                assert_eq!(r["code"], "shop_not_found");
                assert_eq!(r["errorMsg"], "店铺不存在！");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unknown_ids_costs_one_query_per_id_or_none_with_the_bloom_filter() {
    let ids: Vec<u32> = (0..10_000)
        .map(|_| rand::random_range(100_000..100_800))
        .collect();
    let distinct: HashSet<u32> = ids.iter().copied().collect();

    let plain = spawn_app_with(Backend::Sqlite, |c| c.cache.bloom = false).await;
    let before = loads(&plain);
    flood(&plain, &ids).await;
    assert_eq!(
        loads(&plain) - before,
        distinct.len() as u64,
        "one query per distinct id within the null TTL"
    );

    let guarded = spawn_app(Backend::Sqlite).await;
    let before = loads(&guarded);
    flood(&guarded, &ids).await;
    assert_eq!(
        loads(&guarded) - before,
        0,
        "the Bloom filter answers for ids that never existed"
    );
    // No null markers were written either.
    let keys: Vec<String> = redis::AsyncCommands::keys(
        &mut guarded.redis().await,
        format!("{}cache:shop:*", guarded.prefix),
    )
    .await
    .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    // A shop created now passes the filter at once.
    let shop = json!({"name": "新店", "typeId": 1, "x": 104.06, "y": 30.66});
    let r = guarded.admin_json(Method::POST, "/api/shop", &shop).await;
    let id = r.body["data"].as_i64().unwrap();
    assert_eq!(
        guarded.get(&format!("/api/shop/{id}"), None).await.body["data"]["name"],
        "新店"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_bloom_filter_is_not_trusted() {
    let app = spawn_app(Backend::Sqlite).await;
    let bloom = app
        .state
        .catalogue
        .bloom()
        .expect("the filter is on")
        .clone();
    let _: () = redis::AsyncCommands::del(&mut app.redis().await, bloom.bitmap_key().unwrap())
        .await
        .unwrap();
    // Without its filter, existing shops must still be found (and the filter comes back).
    assert!(app.get("/api/shop/5", None).await.success());
    let patience = Patience::new(Duration::from_secs(10)).every(Duration::from_millis(50));
    wait_until(patience, "the filter rebuilt", async || {
        !bloom.is_missing().await.unwrap()
    })
    .await;
    assert!(app.get("/api/shop/6", None).await.success());
    assert_eq!(
        app.get("/api/shop/999999", None).await.code(),
        "shop_not_found"
    );
    assert_eq!(
        app.state
            .catalogue
            .bloom()
            .unwrap()
            .check(b"999999")
            .await
            .unwrap(),
        hmdp_cache::Membership::Absent
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shop_cached_under_another_strategy_is_reloaded_not_an_error() {
    // The service runs with the mutex strategy; the entry was written with logical expiry
    // (before HMDP_SHOP_CACHE was switched): {"expireTime", "data"} without a TTL.
    let app = spawn_app(Backend::Sqlite).await;
    let key = format!("{}cache:shop:1", app.prefix);
    let logical = json!({"expireTime": 4_102_444_800_000_i64, "data": {"id": 1, "name": "旧"}});
    let _: () = redis::AsyncCommands::set(&mut app.redis().await, &key, logical.to_string())
        .await
        .unwrap();
    let r = app.get("/api/shop/1", None).await;
    assert!(r.success(), "{r:?}");
    assert_eq!(r.body["data"]["id"], 1);
    assert_ne!(r.body["data"]["name"], "旧");
    assert!(app.pttl(&key).await > 0, "stored again in the mutex format");

    // And the other way round: plain JSON read by an instance running logical expiry.
    let logical_app = spawn_app_with(Backend::Sqlite, |c| {
        c.cache.shop_strategy = hmdp::config::ShopCacheStrategy::Logical;
    })
    .await;
    let key = format!("{}cache:shop:2", logical_app.prefix);
    let _: () = redis::AsyncCommands::set(
        &mut logical_app.redis().await,
        &key,
        json!({"id": 2, "name": "旧"}).to_string(),
    )
    .await
    .unwrap();
    let r = logical_app.get("/api/shop/2", None).await;
    assert!(r.success(), "{r:?}");
    assert_ne!(r.body["data"]["name"], "旧");
    assert_eq!(
        logical_app.pttl(&key).await,
        -1,
        "stored as a logical entry"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_shop_is_not_hidden_by_an_earlier_miss() {
    // Without the Bloom filter a read of a not-yet-created id caches a null marker (and the
    // L1 keeps a copy); creating the shop must drop both.
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.cache.bloom = false;
        c.cache.l1_ttl = Duration::from_secs(60);
    })
    .await;
    let create = |name: &str| {
        app.client
            .post(app.url("/api/shop"))
            .header("x-admin-token", ADMIN_TOKEN)
            .json(&json!({"name": name, "typeId": 1, "x": 104.06, "y": 30.66}))
    };
    let first = app.send(create("先开的店")).await.body["data"]
        .as_i64()
        .unwrap();
    let next = format!("/api/shop/{}", first + 1);
    for _ in 0..2 {
        assert_eq!(app.get(&next, None).await.code(), "shop_not_found");
    }
    let null: String = redis::AsyncCommands::get(
        &mut app.redis().await,
        format!("{}cache:shop:{}", app.prefix, first + 1),
    )
    .await
    .unwrap();
    assert_eq!(null, "", "the miss is remembered");
    let id = app.send(create("后开的店")).await.body["data"]
        .as_i64()
        .unwrap();
    assert_eq!(id, first + 1);
    let r = app.get(&next, None).await;
    assert!(r.success(), "the new shop is visible at once: {r:?}");
    assert_eq!(r.body["data"]["name"], "后开的店");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nearby_search_loads_a_type_once_and_remembers_one_without_shops() {
    let app = spawn_app(Backend::Sqlite).await;
    let path = "/api/shop/of/type?typeId=1&current=1&x=104.08&y=30.66";
    let warm = app.get(path, None).await.body["data"].clone();
    assert!(!warm.as_array().unwrap().is_empty(), "{warm}");
    // The type's GEO index is lost (as after a flush): a burst reloads it from the database
    // once, not once per request.
    let _: () =
        redis::AsyncCommands::del(&mut app.redis().await, format!("{}shop:geo:1", app.prefix))
            .await
            .unwrap();
    let before = loads(&app);
    for a in hammer(&app, path, 100).await {
        assert_eq!(a["data"], warm);
    }
    assert_eq!(loads(&app) - before, 1, "one load of the type's positions");

    // A type without shops: one database query, then remembered.
    let empty = "/api/shop/of/type?typeId=987654&current=1&x=104.08&y=30.66";
    let before = loads(&app);
    for _ in 0..2 {
        for a in hammer(&app, empty, 100).await {
            assert!(a["success"] == true && a["data"] == json!([]), "{a}");
        }
    }
    assert_eq!(loads(&app) - before, 1, "one query for 200 requests");
    // A shop created in it is found at once all the same.
    let r = app
        .admin_json(
            Method::POST,
            "/api/shop",
            &json!({"name": "新类型的店", "typeId": 987654, "x": 104.08, "y": 30.66}),
        )
        .await;
    assert!(r.success(), "{r:?}");
    let found = app.get(empty, None).await.body["data"].clone();
    assert_eq!(found[0]["name"], "新类型的店", "{found}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logical_expiry_serves_stale_at_once_then_fresh_after_one_rebuild() {
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.cache.shop_strategy = hmdp::config::ShopCacheStrategy::Logical;
        c.cache.ttl = Duration::from_secs(1);
        c.cache.jitter = 0.0;
        c.cache.l1_ttl = Duration::ZERO;
    })
    .await;
    assert_eq!(app.get("/api/shop/1", None).await.body["data"]["id"], 1);
    let key = format!("{}cache:shop:1", app.prefix);
    assert_eq!(
        app.pttl(&key).await,
        -1,
        "logical entries have no Redis TTL"
    );

    // The database changes behind the cache's back; the entry turns stale.
    if let hmdp::testing::storage::Db::Sqlite(pool) = &app.state.db {
        sqlx::query("UPDATE tb_shop SET name = '逻辑过期后的新名字' WHERE id = 1")
            .execute(pool)
            .await
            .unwrap();
    }
    // Not a wait: the entry's 1 s logical lifetime runs out.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let rebuilds = || {
        app.state
            .catalogue
            .cache()
            .stats()
            .rebuilds
            .load(Ordering::SeqCst)
    };
    assert_eq!(rebuilds(), 0);
    let answers = hammer(&app, "/api/shop/1", 100).await;
    let stale = answers
        .iter()
        .filter(|a| a["data"]["name"] != "逻辑过期后的新名字")
        .count();
    assert!(stale > 0, "stale data is served while the rebuild runs");
    wait_until(Duration::from_secs(10), "the rebuilt entry", async || {
        app.get("/api/shop/1", None).await.body["data"]["name"] == "逻辑过期后的新名字"
    })
    .await;
    assert_eq!(rebuilds(), 1, "exactly one rebuild for the whole burst");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_shops_get_spread_out_ttls() {
    let app = spawn_app(Backend::Sqlite).await;
    for id in 1..=6 {
        assert!(app.get(&format!("/api/shop/{id}"), None).await.success());
    }
    let mut ttls = Vec::new();
    for id in 1..=6 {
        ttls.push(app.pttl(&format!("{}cache:shop:{id}", app.prefix)).await);
    }
    let base = 1_800_000;
    assert!(
        ttls.iter()
            .all(|t| (base * 88 / 100..=base * 110 / 100).contains(t)),
        "{ttls:?}"
    );
    let distinct: HashSet<i64> = ttls.iter().map(|t| t / 1000).collect();
    assert!(
        distinct.len() >= 4,
        "TTLs written together are spread apart: {ttls:?}"
    );
}

async fn shop_lists_page_like_the_original(backend: Backend) {
    let app = spawn_app(backend).await;
    // Without a position: the type's shops by id, five per page.
    let admin = |body: serde_json::Value| {
        app.client
            .post(app.url("/api/shop"))
            .header("x-admin-token", ADMIN_TOKEN)
            .json(&body)
    };
    for i in 0..6 {
        let r = app.send(admin(json!({"name": format!("面馆{i}"), "typeId": 4, "x": 104.07 + i as f64 * 0.001, "y": 30.66}))).await;
        assert!(r.success(), "{r:?}");
    }
    let p1 = app
        .get("/api/shop/of/type?typeId=4&current=1", None)
        .await
        .body["data"]
        .clone();
    let p2 = app
        .get("/api/shop/of/type?typeId=4&current=2", None)
        .await
        .body["data"]
        .clone();
    assert_eq!(p1.as_array().unwrap().len(), 5);
    assert_eq!(p2.as_array().unwrap().len(), 2, "6 new + 1 demo gym");
    // By name, with wildcards taken literally.
    let r = app
        .get("/api/shop/of/name?name=%E9%9D%A2%E9%A6%86", None)
        .await; // 面馆
    assert_eq!(r.body["data"].as_array().unwrap().len(), 6);
    let r = app.get("/api/shop/of/name?name=%25", None).await; // "%"
    assert_eq!(r.body["data"].as_array().unwrap().len(), 0);
    // Nearby: sorted by distance, distances set, 5 per page, [] past the end.
    let near = app
        .get(
            "/api/shop/of/type?typeId=4&current=1&x=104.07&y=30.66",
            None,
        )
        .await
        .body["data"]
        .clone();
    let near = near.as_array().unwrap();
    assert_eq!(near.len(), 5);
    assert_eq!(near[0]["name"], "面馆0");
    let d: Vec<f64> = near
        .iter()
        .map(|s| s["distance"].as_f64().unwrap())
        .collect();
    assert!(d.windows(2).all(|w| w[0] <= w[1]), "{d:?}");
    assert!(d[0] < 1.0 && (d[1] - 95.8).abs() < 2.0, "{d:?}");
    let past = app
        .get(
            "/api/shop/of/type?typeId=4&current=9&x=104.07&y=30.66",
            None,
        )
        .await;
    assert_eq!(past.body["data"], json!([]));
    // Bad paging input is a 400.
    assert_eq!(
        app.get("/api/shop/of/type?typeId=4&current=0", None)
            .await
            .status,
        400
    );
    assert_eq!(
        app.get("/api/shop/of/type?typeId=4&x=1", None).await.status,
        400
    );
    assert_eq!(
        app.get("/api/shop/of/type?current=1", None).await.status,
        400
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nearby_search_on_the_original_data_matches_the_original() {
    SchemaDump::check_each(
        "nearby_search_on_the_original_data",
        nearby_search_matches_the_original,
    )
    .await;
}

async fn nearby_search_matches_the_original(dump: &SchemaDump) {
    let db = TestDatabase::create().await;
    dump.load_into(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(db.url.clone(), dir.path());
    let app = spawn_with_config(config, Backend::MySql, Some(db), dir).await;
    // The front-end's hard-coded position (shop-list.html).
    let (x, y) = (120.149993, 30.334229);
    let mut seen = Vec::new();
    for page in 1.. {
        let r = app
            .get(
                &format!("/api/shop/of/type?typeId=1&current={page}&x={x}&y={y}"),
                None,
            )
            .await;
        let shops = r.body["data"].as_array().unwrap().clone();
        if shops.is_empty() {
            break;
        }
        assert!(shops.len() <= 5);
        seen.extend(shops);
    }
    // All of type 1 within 5 km, nearest first, each distance as the haversine formula says.
    assert!(seen.len() >= 5, "{seen:?}");
    let mut last = 0.0;
    for s in &seen {
        let d = s["distance"].as_f64().unwrap();
        let expected = haversine(x, y, s["x"].as_f64().unwrap(), s["y"].as_f64().unwrap());
        assert!(
            (d - expected).abs() < 1.0,
            "shop {}: {d} vs {expected}",
            s["id"]
        );
        assert!(d >= last && d <= 5000.0);
        last = d;
        assert_eq!(s["typeId"], 1);
    }
    let ids: HashSet<i64> = seen.iter().map(|s| s["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), seen.len(), "no shop on two pages");
}

/// Great-circle distance in metres with Redis's earth radius.
fn haversine(x1: f64, y1: f64, x2: f64, y2: f64) -> f64 {
    let r = 6_372_797.560856_f64;
    let (lat1, lat2) = (y1.to_radians(), y2.to_radians());
    let (dlat, dlon) = ((y2 - y1).to_radians(), (x2 - x1).to_radians());
    let a = (dlat / 2.0).sin().powi(2) + lat1.cos() * lat2.cos() * (dlon / 2.0).sin().powi(2);
    2.0 * r * a.sqrt().asin()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_shop_reads_fall_back_to_the_database_within_a_limit() {
    let port = free_port();
    let redis = RedisServer::start_on(port).await;
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.redis_url = Some(format!("redis://127.0.0.1:{port}"));
        c.cache.l1_ttl = Duration::ZERO;
        c.cache.fallback_concurrency = 2;
    })
    .await;
    assert!(app.get("/api/shop/1", None).await.success());
    drop(redis);
    // A read still answers from the database…
    let r = app.get("/api/shop/2", None).await;
    assert!(r.success(), "{r:?}");
    assert_eq!(r.body["data"]["id"], 2);
    let fallbacks = app
        .state
        .catalogue
        .cache()
        .stats()
        .fallbacks
        .load(Ordering::SeqCst);
    assert!(fallbacks >= 1);
    // …and a burst gets answers or fast 503s, never a hang or a 500.
    let started = Instant::now();
    for a in hammer(&app, "/api/shop/3", 50).await {
        assert!(a["success"] == true || a["code"] == "unavailable", "{a}");
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_and_no_fallback_reads_fail_fast() {
    let port = free_port();
    let redis = RedisServer::start_on(port).await;
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.redis_url = Some(format!("redis://127.0.0.1:{port}"));
        c.cache.fallback_concurrency = 0;
        c.cache.l1_ttl = Duration::ZERO;
    })
    .await;
    drop(redis);
    let r = app.get("/api/shop/2", None).await;
    assert_eq!((r.status, r.code()), (503, "unavailable"), "{r:?}");
}
