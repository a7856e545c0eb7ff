//! The cache client against a real Redis.

use std::{
    collections::HashSet,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use hmdp_cache::{
    BloomFilter, BloomOptions, CacheClient, InvalidatedCache, L1Options, Membership, ReadOptions,
    RedisDown, Strategy,
};
use hmdp_testkit::{KeyPrefix, Patience, RedisServer, connect, redis_url, wait_until};
use redis::aio::ConnectionManager;

/// A client as one service instance would build it: own connection, own lock client.
async fn client(prefix: &KeyPrefix) -> CacheClient<ConnectionManager> {
    let url = redis_url();
    let conn = connect(&url).await;
    let locks = hmdp_lock::LockClient::builder(conn.clone())
        .subscriber(redis::Client::open(url).unwrap())
        .key_prefix(prefix.0.clone())
        .build()
        .unwrap();
    CacheClient::builder(conn)
        .key_prefix(prefix.0.clone())
        .locks(locks)
        .build()
}

/// A loader that counts its calls and takes `delay` to answer `value`.
fn slow_loader(
    calls: Arc<AtomicUsize>,
    value: Option<String>,
    delay: Duration,
) -> impl FnOnce() -> futures_util::future::BoxFuture<'static, Result<Option<String>, std::io::Error>>
+ Send
+ 'static {
    move || {
        Box::pin(async move {
            calls.fetch_add(1, Ordering::SeqCst);
            // Not a wait: the database's time to answer.
            tokio::time::sleep(delay).await;
            Ok(value)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stampede_on_a_cold_key_loads_once() {
    let prefix = KeyPrefix::new();
    let cache = client(&prefix).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let opts = ReadOptions::new(Strategy::Mutex, Duration::from_secs(60));
    let mut tasks = Vec::new();
    for _ in 0..500 {
        let (cache, calls, opts) = (cache.clone(), calls.clone(), opts.clone());
        tasks.push(tokio::spawn(async move {
            cache
                .get_or_load(
                    "cache:shop:1",
                    &opts,
                    slow_loader(calls, Some("面馆".into()), Duration::from_millis(100)),
                )
                .await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap().as_deref(), Some("面馆"));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(cache.stats().loads.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_load_once_per_rebuild() {
    let prefix = KeyPrefix::new();
    let (a, b) = (client(&prefix).await, client(&prefix).await);
    let calls = Arc::new(AtomicUsize::new(0));
    let opts = ReadOptions::new(Strategy::Mutex, Duration::from_secs(60));
    for round in 0..3 {
        let mut tasks = Vec::new();
        for i in 0..200 {
            let cache = if i % 2 == 0 { a.clone() } else { b.clone() };
            let (calls, opts) = (calls.clone(), opts.clone());
            tasks.push(tokio::spawn(async move {
                cache
                    .get_or_load(
                        "cache:hot",
                        &opts,
                        slow_loader(calls, Some(format!("v{round}")), Duration::from_millis(150)),
                    )
                    .await
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap(), Some(format!("v{round}")));
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            round + 1,
            "one load per rebuild"
        );
        a.invalidate("cache:hot").await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_missing_ids_loads_each_once_within_the_null_ttl() {
    let prefix = KeyPrefix::new();
    let cache = client(&prefix).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let opts = ReadOptions::new(Strategy::Mutex, Duration::from_secs(60))
        .null_ttl(Duration::from_secs(60));
    let ids: Vec<u32> = (0..10_000)
        .map(|_| rand::random_range(1_000_000..1_000_500))
        .collect();
    let distinct: HashSet<u32> = ids.iter().copied().collect();
    let mut tasks = Vec::new();
    for chunk in ids.chunks(500) {
        let (cache, calls, opts, chunk) =
            (cache.clone(), calls.clone(), opts.clone(), chunk.to_vec());
        tasks.push(tokio::spawn(async move {
            for id in chunk {
                let v: Option<String> = cache
                    .get_or_load(
                        &format!("cache:shop:{id}"),
                        &opts,
                        slow_loader(calls.clone(), None, Duration::ZERO),
                    )
                    .await
                    .unwrap();
                assert!(v.is_none());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let loads = calls.load(Ordering::SeqCst);
    assert_eq!(loads, distinct.len(), "one database query per distinct id");
    // The null marker is the original's empty string, with a TTL.
    let mut conn = connect(&redis_url()).await;
    let id = ids[0];
    let key = format!("{}cache:shop:{id}", prefix.0);
    let stored: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(stored, "");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 0 && ttl <= 66_000, "{ttl}");
}

/// The items `from..to` as strings, as a rebuild snapshot.
fn numbers(from: u32, to: u32) -> Vec<String> {
    (from..to).map(|i| i.to_string()).collect()
}

async fn snapshot_of(items: Vec<String>) -> Result<Vec<String>, std::io::Error> {
    Ok(items)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bloom_filter_has_no_false_negatives_and_few_false_positives() {
    let prefix = KeyPrefix::new();
    let conn = connect(&redis_url()).await;
    let key = format!("{}bloom:shop", prefix.0);
    let bloom = BloomFilter::open(conn.clone(), &key).await.unwrap();
    assert_eq!(bloom.size(), None, "nothing installed yet");
    assert_eq!(bloom.check(b"1").await.unwrap(), Membership::Missing);
    assert!(
        bloom.might_contain(b"1").await.unwrap(),
        "a missing filter rules nothing out"
    );
    let installed = bloom
        .rebuild(BloomOptions::new(10_000, 0.01), || {
            snapshot_of(numbers(0, 10_000))
        })
        .await
        .unwrap();
    assert!(installed);
    assert_eq!(bloom.size(), Some((95_851, 7)));
    for i in (0..10_000).step_by(97) {
        assert_eq!(
            bloom.check(i.to_string().as_bytes()).await.unwrap(),
            Membership::MaybePresent,
            "false negative for {i}"
        );
    }
    let mut false_positives = 0;
    for i in 0..5_000 {
        if bloom
            .might_contain(format!("x{i}").as_bytes())
            .await
            .unwrap()
        {
            false_positives += 1;
        }
    }
    assert!(
        false_positives < 150,
        "{false_positives} false positives of 5000 at p=0.01"
    );
    bloom.add(b"x-added").await.unwrap();
    assert!(bloom.might_contain(b"x-added").await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_sized_differently_agree_on_one_filter() {
    let prefix = KeyPrefix::new();
    let key = format!("{}bloom:shop", prefix.0);
    let mut conn = connect(&redis_url()).await;
    // Instance A builds a small filter.
    let a = BloomFilter::open(connect(&redis_url()).await, &key)
        .await
        .unwrap();
    assert!(
        a.rebuild(BloomOptions::new(1_000, 0.01), || snapshot_of(numbers(
            0, 1_000
        )))
        .await
        .unwrap()
    );
    let small = a.size().unwrap();
    let small_bitmap = a.bitmap_key().unwrap();
    // Instance B, which would size it differently, adopts what is installed.
    let b = BloomFilter::open(connect(&redis_url()).await, &key)
        .await
        .unwrap();
    assert_eq!(b.size(), Some(small));
    // The items outgrew it: B rebuilds bigger, with more items.
    assert!(
        b.rebuild(BloomOptions::new(100_000, 0.001), || snapshot_of(numbers(
            0, 3_000
        )))
        .await
        .unwrap()
    );
    let big = b.size().unwrap();
    assert_ne!(big, small);
    // A still holds the old parameters, but never answers "absent" from the wrong bits: its
    // first check sees the new config and adopts it.
    assert_eq!(a.size(), Some(small));
    for i in 0..3_000 {
        assert!(
            a.might_contain(i.to_string().as_bytes()).await.unwrap(),
            "A answered absent for {i}"
        );
    }
    assert_eq!(a.size(), Some(big), "A adopted the installed filter");
    let mut false_positives = 0;
    for i in 0..2_000 {
        if a.might_contain(format!("x{i}").as_bytes()).await.unwrap() {
            false_positives += 1;
        }
    }
    assert!(false_positives < 20, "{false_positives} of 2000 at p=0.001");
    // Adds follow the installed filter too, whoever made it.
    let c = BloomFilter::open(connect(&redis_url()).await, &key)
        .await
        .unwrap();
    assert!(
        c.rebuild(BloomOptions::new(200_000, 0.001), || snapshot_of(numbers(
            0, 3_000
        )))
        .await
        .unwrap()
    );
    b.add(b"new shop").await.unwrap(); // B still knows the previous filter
    assert!(c.might_contain(b"new shop").await.unwrap());
    assert_eq!(b.size(), c.size());
    // Replaced bitmaps are gone.
    let exists: bool = redis::cmd("EXISTS")
        .arg(&small_bitmap)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!exists);
    // A rebuild that lost the race adopts the winner's filter instead of installing its own.
    let stale = a.clone();
    assert!(
        !stale
            .rebuild(BloomOptions::new(10, 0.1), || snapshot_of(numbers(0, 10)))
            .await
            .unwrap(),
        "A's handle still knew B's filter, which C replaced"
    );
    assert_eq!(a.size(), c.size());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_added_during_a_rebuild_is_not_lost() {
    let prefix = KeyPrefix::new();
    let key = format!("{}bloom:shop", prefix.0);
    let a = BloomFilter::open(connect(&redis_url()).await, &key)
        .await
        .unwrap();
    a.rebuild(BloomOptions::new(100, 0.01), || {
        snapshot_of(numbers(0, 100))
    })
    .await
    .unwrap();
    let b = BloomFilter::open(connect(&redis_url()).await, &key)
        .await
        .unwrap();
    let snapshots = Arc::new(AtomicUsize::new(0));
    let (snaps, adder) = (snapshots.clone(), b.clone());
    let installed = a
        .rebuild(BloomOptions::new(10_000, 0.001), move || {
            let (snaps, adder) = (snaps.clone(), adder.clone());
            async move {
                let n = snaps.fetch_add(1, Ordering::SeqCst);
                let mut items = numbers(0, 100);
                if n == 0 {
                    // The database is read; then a new item is inserted and added (to the
                    // old filter, the one B knows) before the new filter is installed.
                    adder.add(b"late").await.unwrap();
                } else {
                    items.push("late".to_owned());
                }
                Ok::<_, std::io::Error>(items)
            }
        })
        .await
        .unwrap();
    assert!(installed);
    assert_eq!(snapshots.load(Ordering::SeqCst), 2, "a second snapshot");
    assert!(
        a.might_contain(b"late").await.unwrap(),
        "the late add survived"
    );
    assert!(b.might_contain(b"late").await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_bloom_filter_answers_missing_never_absent() {
    let prefix = KeyPrefix::new();
    let key = format!("{}bloom:shop", prefix.0);
    let mut conn = connect(&redis_url()).await;
    let bloom = BloomFilter::open(conn.clone(), &key).await.unwrap();
    bloom
        .rebuild(BloomOptions::new(100, 0.01), || {
            snapshot_of(numbers(0, 100))
        })
        .await
        .unwrap();
    assert!(!bloom.is_missing().await.unwrap());
    assert_eq!(bloom.check(b"nope").await.unwrap(), Membership::Absent);
    // The bitmap is evicted: its sentinel is gone with it.
    let _: () = redis::cmd("DEL")
        .arg(bloom.bitmap_key().unwrap())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(bloom.is_missing().await.unwrap());
    assert_eq!(bloom.check(b"nope").await.unwrap(), Membership::Missing);
    // Adds to a lost bitmap do not make it look intact again.
    bloom.add(b"1").await.unwrap();
    assert_eq!(bloom.check(b"nope").await.unwrap(), Membership::Missing);
    // Everything is flushed.
    let _: () = redis::cmd("DEL")
        .arg(format!("{{{key}}}:config"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(bloom.check(b"nope").await.unwrap(), Membership::Missing);
    bloom.add(b"2").await.unwrap();
    assert_eq!(bloom.size(), None);
    // A rebuild brings it back.
    assert!(
        bloom
            .rebuild(BloomOptions::new(100, 0.01), || snapshot_of(numbers(
                0, 100
            )))
            .await
            .unwrap()
    );
    assert_eq!(bloom.check(b"nope").await.unwrap(), Membership::Absent);
    assert_eq!(bloom.check(b"7").await.unwrap(), Membership::MaybePresent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logical_expiry_serves_stale_at_once_and_rebuilds_exactly_once() {
    let prefix = KeyPrefix::new();
    let (a, b) = (client(&prefix).await, client(&prefix).await);
    let opts = ReadOptions::new(Strategy::LogicalExpiry, Duration::from_secs(60)).jitter(0.0);
    // Warm up with a value that is already stale.
    a.set_logical("cache:shop:9", &"old".to_owned(), Duration::ZERO, 0.0)
        .await
        .unwrap();
    let mut conn = connect(&redis_url()).await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(format!("{}cache:shop:9", prefix.0))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(ttl, -1, "logical entries have no Redis TTL");

    let calls = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let cache = if i % 2 == 0 { a.clone() } else { b.clone() };
        let (calls, opts) = (calls.clone(), opts.clone());
        tasks.push(tokio::spawn(async move {
            cache
                .get_or_load(
                    "cache:shop:9",
                    &opts,
                    slow_loader(calls, Some("new".into()), Duration::from_secs(3)),
                )
                .await
                .unwrap()
        }));
    }
    for t in tasks {
        assert_eq!(
            t.await.unwrap().as_deref(),
            Some("old"),
            "stale is served while rebuilding"
        );
    }
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "nobody waited for the 3 s loader"
    );

    // After the rebuild: the fresh value, and exactly one load for it.
    let patience = Patience::new(Duration::from_secs(15)).every(Duration::from_millis(50));
    wait_until(patience, "the rebuilt value", async || {
        let v: Option<String> = a
            .get_or_load(
                "cache:shop:9",
                &opts,
                slow_loader(calls.clone(), Some("newer".into()), Duration::ZERO),
            )
            .await
            .unwrap();
        v.as_deref() == Some("new")
    })
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "exactly one rebuild");
    let rebuilds =
        a.stats().rebuilds.load(Ordering::SeqCst) + b.stats().rebuilds.load(Ordering::SeqCst);
    assert_eq!(rebuilds, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_gets_a_jittered_ttl() {
    let prefix = KeyPrefix::new();
    let cache = client(&prefix).await;
    let opts = ReadOptions::new(Strategy::CacheAside, Duration::from_secs(1000)).jitter(0.1);
    for i in 0..100 {
        let _: Option<u32> = cache
            .get_or_load(&format!("k{i}"), &opts, move || async move {
                Ok::<_, std::io::Error>(Some(i))
            })
            .await
            .unwrap();
    }
    let mut conn = connect(&redis_url()).await;
    let mut ttls = Vec::new();
    for i in 0..100 {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(format!("{}k{i}", prefix.0))
            .query_async(&mut conn)
            .await
            .unwrap();
        ttls.push(ttl);
    }
    assert!(
        ttls.iter().all(|t| (890_000..=1_100_000).contains(t)),
        "{ttls:?}"
    );
    let spread = ttls.iter().max().unwrap() - ttls.iter().min().unwrap();
    assert!(
        spread > 100_000,
        "ttls are spread out, not written to expire together: {spread} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_is_invalidated_on_every_instance() {
    let prefix = KeyPrefix::new();
    let url = redis_url();
    let channel = format!("{}cache:l1", prefix.0);
    let mk = || async {
        CacheClient::builder(connect(&url).await)
            .key_prefix(prefix.0.clone())
            .l1(
                L1Options::new(1000, Duration::from_secs(60)),
                redis::Client::open(url.clone()).unwrap(),
                &channel,
            )
            .await
            .unwrap()
            .build()
    };
    let (a, b) = (mk().await, mk().await);
    let opts = ReadOptions::new(Strategy::CacheAside, Duration::from_secs(60));
    let load = |v: &'static str| move || async move { Ok::<_, std::io::Error>(Some(v.to_owned())) };
    assert_eq!(
        a.get_or_load("k", &opts, load("one"))
            .await
            .unwrap()
            .as_deref(),
        Some("one")
    );
    assert_eq!(
        b.get_or_load("k", &opts, load("x"))
            .await
            .unwrap()
            .as_deref(),
        Some("one")
    );
    // B now answers from its L1 without Redis.
    let before = b.stats().l1_hits.load(Ordering::SeqCst);
    assert_eq!(
        b.get_or_load("k", &opts, load("x"))
            .await
            .unwrap()
            .as_deref(),
        Some("one")
    );
    assert_eq!(b.stats().l1_hits.load(Ordering::SeqCst), before + 1);

    // The value changes (database first, then invalidate): B sees it once the message lands.
    a.invalidate("k").await.unwrap();
    // Well within the L1's 60 s lifetime: the message, not the expiry.
    wait_until(
        Duration::from_secs(10),
        "B dropping its stale L1",
        async || {
            let v = b.get_or_load("k", &opts, load("two")).await.unwrap();
            v.as_deref() == Some("two")
        },
    )
    .await;
}

/// A client on a private redis-server that is then killed: Redis is down for every read.
async fn client_with_redis_down(max_concurrent: usize) -> CacheClient<ConnectionManager> {
    let mut redis = RedisServer::start().await;
    // Short timeouts and few retries, as a service would configure them: reads notice the
    // outage in well under a second.
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(300)))
        .set_response_timeout(Some(Duration::from_millis(500)))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(100));
    let conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection_manager_with_config(config)
        .await
        .unwrap();
    let cache = CacheClient::builder(conn)
        .on_redis_down(RedisDown::FallbackToLoader {
            max_concurrent,
            max_wait: Duration::from_millis(20),
        })
        .build();
    redis.kill();
    cache
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_the_loader_fallback_is_bounded() {
    let cache = client_with_redis_down(2).await;

    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let opts = ReadOptions::new(Strategy::Mutex, Duration::from_secs(60));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (cache, running, peak, opts) =
            (cache.clone(), running.clone(), peak.clone(), opts.clone());
        tasks.push(tokio::spawn(async move {
            // Twenty different keys: reads of one key would share one load.
            cache
                .get_or_load(&format!("k{i}"), &opts, move || async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    // Not a wait: the database's time to answer.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok::<_, std::io::Error>(Some(7u32))
                })
                .await
        }));
    }
    let (mut served, mut refused) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(v) => {
                assert_eq!(v, Some(7));
                served += 1;
            }
            Err(e) => {
                assert!(e.is_overloaded(), "{e}");
                refused += 1;
            }
        }
    }
    assert!(peak.load(Ordering::SeqCst) <= 2, "at most 2 loads at once");
    assert!(
        served >= 2 && refused > 0,
        "served {served}, refused {refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_concurrent_reads_of_one_key_share_one_load() {
    let cache = client_with_redis_down(2).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let opts = ReadOptions::new(Strategy::Mutex, Duration::from_secs(60));
    // A first read notices that Redis is gone.
    let first: Option<u32> = cache
        .get_or_load("other", &opts, || async {
            Ok::<_, std::io::Error>(Some(1))
        })
        .await
        .unwrap();
    assert_eq!(first, Some(1));
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (cache, calls, opts) = (cache.clone(), calls.clone(), opts.clone());
        tasks.push(tokio::spawn(async move {
            cache
                .get_or_load(
                    "cache:shop:1",
                    &opts,
                    slow_loader(calls, Some("面馆".into()), Duration::from_millis(1000)),
                )
                .await
        }));
    }
    for t in tasks {
        // Every reader is answered (none refused for want of a slot) from the one load.
        assert_eq!(t.await.unwrap().unwrap().as_deref(), Some("面馆"));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "one database query");
    assert_eq!(cache.stats().fallbacks.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_written_under_another_strategy_is_a_miss_not_an_error() {
    let prefix = KeyPrefix::new();
    let cache = client(&prefix).await;
    let mut conn = connect(&redis_url()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let mutex = ReadOptions::new(Strategy::Mutex, Duration::from_secs(60));
    let logical = ReadOptions::new(Strategy::LogicalExpiry, Duration::from_secs(60));

    // Logical → mutex: a {"expireTime","data"} entry with no TTL, read as a plain value.
    cache
        .set_logical(
            "cache:shop:1",
            &"old".to_owned(),
            Duration::from_secs(600),
            0.0,
        )
        .await
        .unwrap();
    let v: Option<String> = cache
        .get_or_load(
            "cache:shop:1",
            &mutex,
            slow_loader(calls.clone(), Some("fresh".into()), Duration::ZERO),
        )
        .await
        .expect("an old-format entry is a miss, not a serialization error");
    assert_eq!(v.as_deref(), Some("fresh"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let key = format!("{}cache:shop:1", prefix.0);
    let stored: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        stored, "\"fresh\"",
        "replaced by the mutex strategy's format"
    );
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 0, "with a TTL again: {ttl}");

    // Mutex → logical: plain JSON, read as a logical entry.
    let v: Option<String> = cache
        .get_or_load(
            "cache:shop:1",
            &logical,
            slow_loader(calls.clone(), Some("fresher".into()), Duration::ZERO),
        )
        .await
        .expect("a plain entry is a miss for the logical strategy");
    assert_eq!(v.as_deref(), Some("fresher"));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let stored: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let stored: serde_json::Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(stored["data"], "fresher");

    // And the entry now reads as a hit under the new strategy.
    let v: Option<String> = cache
        .get_or_load(
            "cache:shop:1",
            &logical,
            slow_loader(calls.clone(), Some("x".into()), Duration::ZERO),
        )
        .await
        .unwrap();
    assert_eq!(v.as_deref(), Some("fresher"));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// A client with an L1 whose entries live a minute, so only invalidations refresh it.
async fn client_with_l1(prefix: &KeyPrefix) -> CacheClient<ConnectionManager> {
    let url = redis_url();
    let conn = connect(&url).await;
    let locks = hmdp_lock::LockClient::builder(conn.clone())
        .subscriber(redis::Client::open(url.clone()).unwrap())
        .key_prefix(prefix.0.clone())
        .build()
        .unwrap();
    CacheClient::builder(conn)
        .key_prefix(prefix.0.clone())
        .locks(locks)
        .l1(
            L1Options::new(1000, Duration::from_secs(60)),
            redis::Client::open(url).unwrap(),
            &format!("{}cache:l1", prefix.0),
        )
        .await
        .unwrap()
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_rebuild_reaches_the_l1_of_every_instance() {
    let prefix = KeyPrefix::new();
    let (a, b) = (client_with_l1(&prefix).await, client_with_l1(&prefix).await);
    let opts = ReadOptions::new(Strategy::LogicalExpiry, Duration::from_secs(60)).jitter(0.0);
    let calls = Arc::new(AtomicUsize::new(0));
    a.set_logical(
        "cache:shop:1",
        &"old".to_owned(),
        Duration::from_millis(300),
        0.0,
    )
    .await
    .unwrap();
    let read = |c: &CacheClient<ConnectionManager>, value: &'static str| {
        let (c, calls, opts) = (c.clone(), calls.clone(), opts.clone());
        async move {
            c.get_or_load(
                "cache:shop:1",
                &opts,
                slow_loader(calls, Some(value.into()), Duration::ZERO),
            )
            .await
            .unwrap()
        }
    };
    // B reads the fresh entry into its L1 and keeps it there (a copy read before A's
    // announcement of the write reached B is dropped when it does, and read again).
    wait_until(
        Duration::from_secs(5),
        "B serving from its L1",
        async || {
            let hits = b.stats().l1_hits.load(Ordering::SeqCst);
            assert_eq!(read(&b, "from b").await.as_deref(), Some("old"));
            b.stats().l1_hits.load(Ordering::SeqCst) > hits
        },
    )
    .await;
    // Not a wait: the entry's 300 ms logical lifetime runs out.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // It turns stale; A rebuilds it.
    assert_eq!(read(&a, "new").await.as_deref(), Some("old"));
    wait_until(Duration::from_secs(10), "A's rebuild", async || {
        read(&a, "new").await.as_deref() == Some("new")
    })
    .await;
    // B drops its stale L1 copy when A's rebuild is announced (not after its 60 s L1 TTL).
    wait_until(
        Duration::from_secs(10),
        "B dropping its stale L1 copy",
        async || read(&b, "from b").await.as_deref() == Some("new"),
    )
    .await;
    // Not a wait: time for a rebuild by B, which must not come.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "B never rebuilt");
    assert_eq!(b.stats().rebuilds.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_reads_during_a_rebuild_spawn_no_tasks() {
    let prefix = KeyPrefix::new();
    let cache = client(&prefix).await;
    let opts = ReadOptions::new(Strategy::LogicalExpiry, Duration::from_secs(60));
    cache
        .set_logical("cache:shop:1", &"old".to_owned(), Duration::ZERO, 0.0)
        .await
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let read = || {
        cache.get_or_load(
            "cache:shop:1",
            &opts,
            slow_loader(calls.clone(), Some("new".into()), Duration::from_secs(3)),
        )
    };
    // The first stale read starts the rebuild.
    assert_eq!(read().await.unwrap().as_deref(), Some("old"));
    wait_until(Duration::from_secs(5), "the rebuild loading", async || {
        calls.load(Ordering::SeqCst) == 1
    })
    .await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let started = Instant::now();
    for _ in 0..1000 {
        assert_eq!(read().await.unwrap().as_deref(), Some("old"));
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "all during the rebuild"
    );
    let grown = metrics.num_alive_tasks().saturating_sub(before);
    assert!(grown < 10, "1000 stale reads left {grown} tasks behind");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_slower_than_the_lock_lease_keeps_its_lock() {
    let prefix = KeyPrefix::new();
    let (a, b) = (client(&prefix).await, client(&prefix).await);
    // A lease far shorter than the load: a fixed lease would run out mid-rebuild.
    let opts = ReadOptions::new(Strategy::LogicalExpiry, Duration::from_secs(60))
        .lock(Duration::from_secs(1), Duration::from_millis(200));
    a.set_logical("cache:shop:1", &"old".to_owned(), Duration::ZERO, 0.0)
        .await
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let read = |c: &CacheClient<ConnectionManager>| {
        let (c, calls, opts) = (c.clone(), calls.clone(), opts.clone());
        async move {
            c.get_or_load(
                "cache:shop:1",
                &opts,
                slow_loader(calls, Some("new".into()), Duration::from_millis(1500)),
            )
            .await
        }
    };
    assert_eq!(read(&a).await.unwrap().as_deref(), Some("old"));
    // Not a wait: well past the 200 ms lease, another instance finds the entry still stale.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(read(&b).await.unwrap().as_deref(), Some("old"));
    let patience = Patience::new(Duration::from_secs(10)).every(Duration::from_millis(50));
    wait_until(patience, "the rebuilt value", async || {
        read(&a).await.unwrap().as_deref() == Some("new")
    })
    .await;
    // Not a wait: time for a second rebuild by B's read, which must not come.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "B's rebuild found the lock held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logical_expiry_times_are_jittered() {
    let prefix = KeyPrefix::new();
    let cache = client(&prefix).await;
    let mut conn = connect(&redis_url()).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for i in 0..100 {
        cache
            .set_logical(&format!("warm:{i}"), &i, Duration::from_secs(1000), 0.1)
            .await
            .unwrap();
    }
    let mut expiries = Vec::new();
    for i in 0..100 {
        let raw: String = redis::cmd("GET")
            .arg(format!("{}warm:{i}", prefix.0))
            .query_async(&mut conn)
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
        expiries.push(v["expireTime"].as_i64().unwrap() - now);
    }
    assert!(
        expiries.iter().all(|t| (899_000..=1_101_000).contains(t)),
        "{expiries:?}"
    );
    let spread = expiries.iter().max().unwrap() - expiries.iter().min().unwrap();
    assert!(
        spread > 100_000,
        "entries warmed up together turn stale at different times: {spread} ms"
    );
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Named {
    id: i64,
    name: String,
}

/// The JSON read answers the value as this client encodes it, whatever text Redis held, and
/// the same from the L1 as from Redis or a load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_reads_answer_this_clients_encoding() {
    let prefix = KeyPrefix::new();
    let cache = client_with_l1(&prefix).await;
    let opts = ReadOptions::new(Strategy::Mutex, Duration::from_secs(60));
    let read = |key: &'static str, loaded: Option<Named>| {
        let (cache, opts) = (cache.clone(), opts.clone());
        async move {
            cache
                .get_or_load_json_filtered(
                    key,
                    &opts,
                    || async { true },
                    move || async move { Ok::<_, std::io::Error>(loaded) },
                )
                .await
                .unwrap()
        }
    };
    // Written by another program: another field order, spaces, a field this one does not know.
    let _: () = redis::cmd("SET")
        .arg(format!("{}cache:shop:1", prefix.0))
        .arg(r#"{ "name": "面馆", "stars": 5, "id": 1 }"#)
        .query_async(&mut connect(&redis_url()).await)
        .await
        .unwrap();
    for _ in 0..2 {
        let json = read("cache:shop:1", None).await;
        assert_eq!(json.as_deref(), Some(r#"{"id":1,"name":"面馆"}"#));
    }
    assert_eq!(cache.stats().l1_hits.load(Ordering::SeqCst), 1);
    let loaded = || {
        Some(Named {
            id: 2,
            name: "粥铺".into(),
        })
    };
    for _ in 0..2 {
        let json = read("cache:shop:2", loaded()).await;
        assert_eq!(json.as_deref(), Some(r#"{"id":2,"name":"粥铺"}"#));
    }
    assert_eq!(cache.stats().loads.load(Ordering::SeqCst), 1);
    assert_eq!(cache.stats().l1_hits.load(Ordering::SeqCst), 2);
    // A missing one is the null marker, from Redis and from the L1 alike.
    for _ in 0..2 {
        assert_eq!(read("cache:shop:3", None).await, None);
    }
    assert_eq!(cache.stats().null_hits.load(Ordering::SeqCst), 1);
}

/// An `InvalidatedCache` entry lives until its TTL and no longer, and one instance's
/// invalidation reaches every instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidated_cache_forgets_after_its_ttl_and_when_told() {
    let prefix = KeyPrefix::new();
    let url = redis_url();
    let channel = format!("{}drop", prefix.0);
    let ttl = Duration::from_millis(300);
    let start = || {
        InvalidatedCache::<u64>::start(
            L1Options::new(100, ttl),
            redis::Client::open(url.clone()).unwrap(),
            channel.clone(),
        )
    };
    let (a, b) = (start().await.unwrap(), start().await.unwrap());
    a.insert("k", 1).await;
    b.insert("k", 1).await;
    assert_eq!(b.get("k").await, Some(1));
    a.invalidate_everywhere(&mut connect(&url).await, "k")
        .await
        .unwrap();
    assert_eq!(a.get("k").await, None);
    wait_until(Duration::from_secs(5), "b drops k", async || {
        b.get("k").await.is_none()
    })
    .await;

    let inserted = Instant::now();
    a.insert("t", 2).await;
    assert_eq!(a.get("t").await, Some(2));
    wait_until(Duration::from_secs(5), "t expires", async || {
        a.get("t").await.is_none()
    })
    .await;
    assert!(inserted.elapsed() >= ttl, "expired before its TTL");
}

/// A value read before an invalidation and stored after it (a read racing a logout) is not kept,
/// on the instance that invalidated and on one that heard of it by message; a value read after
/// the invalidation is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_raced_an_invalidation_is_not_kept() {
    let prefix = KeyPrefix::new();
    let url = redis_url();
    let channel = format!("{}drop", prefix.0);
    let start = || {
        InvalidatedCache::<u64>::start(
            L1Options::new(100, Duration::from_secs(30)),
            redis::Client::open(url.clone()).unwrap(),
            channel.clone(),
        )
    };
    let (a, b) = (start().await.unwrap(), start().await.unwrap());
    b.insert("k", 0).await;
    let read_at = Instant::now();
    a.invalidate_everywhere(&mut connect(&url).await, "k")
        .await
        .unwrap();
    wait_until(
        Duration::from_secs(5),
        "b hears of the invalidation",
        async || b.get("k").await.is_none(),
    )
    .await;
    for cache in [&a, &b] {
        cache.insert_read_at("k", 1, read_at).await;
        assert_eq!(cache.get("k").await, None, "the raced read was kept");
        cache.insert_read_at("k", 2, Instant::now()).await;
        assert_eq!(cache.get("k").await, Some(2), "a later read is kept");
        // Other keys are not affected.
        cache.insert_read_at("other", 3, read_at).await;
        assert_eq!(cache.get("other").await, Some(3));
    }
}

/// When its source moves to another server, an `InvalidatedCache` subscribes there (no
/// connection broke: the old server still runs), forgets what it held (what was published
/// meanwhile is unknown), and hears the invalidations published on the new server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidated_cache_follows_its_source_to_another_server() {
    let other = RedisServer::start().await;
    let prefix = KeyPrefix::new();
    let channel = format!("{}drop", prefix.0);
    let source = hmdp_lock::testing::MovingSource::new(redis_url());
    let cache = InvalidatedCache::<u64>::start(
        L1Options::new(100, Duration::from_secs(60)),
        source.clone(),
        channel.clone(),
    )
    .await
    .unwrap();
    cache.insert("k", 1).await;
    assert_eq!(cache.get("k").await, Some(1));

    source.move_to(other.url());
    let mut there = connect(&other.url()).await;
    wait_until(
        Duration::from_secs(5),
        "a subscriber on the new server",
        async || {
            let (_, n): (String, u64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query_async(&mut there)
                .await
                .unwrap();
            n == 1
        },
    )
    .await;
    wait_until(
        Duration::from_secs(5),
        "k forgotten on the move",
        async || cache.get("k").await.is_none(),
    )
    .await;
    cache.insert("k", 2).await;
    assert_eq!(cache.get("k").await, Some(2));
    let _: i64 = redis::cmd("PUBLISH")
        .arg(&channel)
        .arg("k")
        .query_async(&mut there)
        .await
        .unwrap();
    wait_until(
        Duration::from_secs(5),
        "k dropped by a message on the new server",
        async || cache.get("k").await.is_none(),
    )
    .await;
}
