//! Integration tests against a real Redis (`HMDP_TEST_REDIS_URL`, default
//! `redis://127.0.0.1:6379`). Every test uses its own random key prefix and
//! deletes its keys at the end.

mod support;

use std::time::{Duration, SystemTime};

use hmdp_id::{
    ErrorKind, IdConnection, IdGenerator, MAX_SEQUENCE, ManualClock, Mode, SegmentOptions, decode,
};
use hmdp_testkit::{
    KeyPrefix, Patience, RedisServer, connect, redis_url, unique_prefix, wait_until,
};
use support::*;

/// 2024-02-29T12:34:56Z
const LEAP_DAY_NOON: i64 = 1_709_210_096;
/// 2025-07-01T00:00:00Z; the second before it is 2025-06-30T23:59:59Z.
const MIDNIGHT: i64 = 1_751_328_000;
/// 2025-03-10T12:00:00Z
const MID_DAY: i64 = 1_741_608_000;

fn compatible<C: IdConnection>(conn: C, prefix: &str) -> IdGenerator<C> {
    IdGenerator::builder(conn, "order")
        .key_prefix(prefix)
        .build()
        .unwrap()
}

fn segment<C: IdConnection>(conn: C, prefix: &str, step: u32) -> IdGenerator<C> {
    IdGenerator::builder(conn, "order")
        .key_prefix(prefix)
        .segment(SegmentOptions::new().step(step))
        .build()
        .unwrap()
}

fn with_clock<C: IdConnection>(
    conn: C,
    prefix: &str,
    mode: Mode,
    clock: &ManualClock,
) -> IdGenerator<C> {
    IdGenerator::builder(conn, "order")
        .key_prefix(prefix)
        .mode(mode)
        .clock(clock.clone())
        .build()
        .unwrap()
}

fn both_modes(step: u32) -> [Mode; 2] {
    [
        Mode::Compatible,
        Mode::Segment(SegmentOptions::new().step(step)),
    ]
}

/// The original course test: 300 tasks each asking for 100 ids.
async fn three_hundred_tasks<C: IdConnection>(gens: &[IdGenerator<C>]) -> Vec<i64> {
    let mut handles = Vec::new();
    for t in 0..300 {
        let ids = gens[t % gens.len()].clone();
        handles.push(tokio::spawn(async move {
            let mut mine = Vec::with_capacity(100);
            for _ in 0..100 {
                mine.push(ids.next_id().await.unwrap());
            }
            // Sequential calls of one task are strictly increasing.
            assert_strictly_increasing(&mine);
            mine
        }));
    }
    let mut all = Vec::with_capacity(30_000);
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn original_test_300_tasks_of_100_ids_in_compatible_mode() {
    let p = unique_prefix();
    let _cleanup = KeyPrefix(p.clone());
    let ids = compatible(conn().await, &p);
    let all = three_hundred_tasks(std::slice::from_ref(&ids)).await;
    assert_eq!(all.len(), 30_000);
    assert_distinct(&all);
    assert!(all.iter().all(|&id| id > 0));
    let stats = ids.stats();
    assert_eq!(stats.ids_issued, 30_000);
    assert_eq!(stats.round_trips, 30_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn original_test_300_tasks_of_100_ids_in_segment_mode() {
    let p = unique_prefix();
    let _cleanup = KeyPrefix(p.clone());
    // A small step forces many block changes under contention.
    let ids = segment(conn().await, &p, 100);
    let all = three_hundred_tasks(std::slice::from_ref(&ids)).await;
    assert_eq!(all.len(), 30_000);
    assert_distinct(&all);
    assert!(all.iter().all(|&id| id > 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn original_test_with_both_modes_on_one_key_at_once() {
    let p = unique_prefix();
    let _cleanup = KeyPrefix(p.clone());
    let c = conn().await;
    // Two segment generators (like two processes) and one compatible one.
    let gens = [
        segment(c.clone(), &p, 64),
        compatible(c.clone(), &p),
        segment(c.clone(), &p, 1000),
    ];
    let all = three_hundred_tasks(&gens).await;
    assert_eq!(all.len(), 30_000);
    assert_distinct(&all);
    let mut c = conn().await;
    assert_eq!(
        keys_under(&mut c, &p).await.len(),
        1,
        "one key per day, shared by all modes"
    );
}

#[tokio::test]
async fn compatible_ids_decode_to_the_time_and_sequence_and_use_the_documented_key() {
    let p = unique_prefix();
    let _cleanup = KeyPrefix(p.clone());
    let mut c = conn().await;
    let clock = ManualClock::from_unix_seconds(LEAP_DAY_NOON);
    let ids = with_clock(c.clone(), &p, Mode::Compatible, &clock);

    let first = ids.next_id().await.unwrap();
    let second = ids.next_id().await.unwrap();
    assert_eq!(first, ((LEAP_DAY_NOON - 1_640_995_200) << 32) | 1);
    assert_eq!(decode(first), (LEAP_DAY_NOON, 1));
    assert_eq!(decode(second), (LEAP_DAY_NOON, 2));

    let key = format!("{p}icr:order:2024:02:29");
    assert_eq!(
        get_i64(&mut c, &key).await,
        Some(2),
        "counter lives at {key}"
    );
    assert_eq!(keys_under(&mut c, &p).await, vec![key.clone()]);
    assert_eq!(ids.key_at(clock_time(LEAP_DAY_NOON)), key);
}

#[tokio::test]
async fn ids_from_the_real_clock_decode_to_now_and_todays_utc_key() {
    let p = unique_prefix();
    let _cleanup = KeyPrefix(p.clone());
    let mut c = conn().await;
    for mode in both_modes(10) {
        let ids = IdGenerator::builder(c.clone(), "order")
            .key_prefix(&p)
            .mode(mode)
            .build()
            .unwrap();
        let before = unix_now();
        let id = ids.next_id().await.unwrap();
        let after = unix_now();
        let (ts, seq) = decode(id);
        assert!(
            (before..=after).contains(&ts),
            "{before} <= {ts} <= {after}"
        );
        let key = ids.key_at(clock_time(ts));
        let date = chrono::DateTime::from_timestamp(ts, 0)
            .unwrap()
            .format("%Y:%m:%d");
        assert_eq!(key, format!("{p}icr:order:{date}"));
        let counter = get_i64(&mut c, &key).await.expect("day key exists");
        assert!(seq >= 1 && i64::from(seq) <= counter);
    }
}

#[tokio::test]
async fn clock_going_back_within_a_day_is_clamped_in_both_modes() {
    for mode in both_modes(4) {
        let p = unique_prefix();
        let _cleanup = KeyPrefix(p.clone());
        let mut c = conn().await;
        let clock = ManualClock::from_unix_seconds(MID_DAY);
        let ids = with_clock(c.clone(), &p, mode, &clock);
        let mut got = Vec::new();
        take(&ids, 5, &mut got).await;
        clock.rewind(Duration::from_secs(100)); // NTP step back
        take(&ids, 5, &mut got).await;
        clock.advance(Duration::from_secs(50)); // still 50 s behind
        take(&ids, 5, &mut got).await;
        clock.advance(Duration::from_secs(60)); // 10 s past the old high mark
        take(&ids, 5, &mut got).await;

        assert_strictly_increasing(&got);
        assert_distinct(&got);
        let stamps: Vec<i64> = got.iter().map(|&id| decode(id).0).collect();
        assert!(
            stamps[..15].iter().all(|&t| t == MID_DAY),
            "clamped: {stamps:?}"
        );
        assert!(
            stamps[15..].iter().all(|&t| t == MID_DAY + 10),
            "caught up: {stamps:?}"
        );
        // Segment mode may read the clock again after waiting for a block.
        assert!(ids.stats().clock_clamps >= 10, "{mode:?}");
        assert_eq!(ids.stats().ids_issued, 20);
        assert_eq!(keys_under(&mut c, &p).await.len(), 1, "one day, one key");
    }
}

#[tokio::test]
async fn clock_going_back_across_midnight_stays_on_the_new_day_and_its_key() {
    for mode in both_modes(4) {
        let p = unique_prefix();
        let _cleanup = KeyPrefix(p.clone());
        let mut c = conn().await;
        let clock = ManualClock::from_unix_seconds(MIDNIGHT + 2); // 00:00:02
        let ids = with_clock(c.clone(), &p, mode, &clock);
        let mut got = vec![ids.next_id().await.unwrap(), ids.next_id().await.unwrap()];
        clock.rewind(Duration::from_secs(4)); // 23:59:58 the day before
        for _ in 0..6 {
            got.push(ids.next_id().await.unwrap());
        }
        clock.set_unix_seconds(MIDNIGHT + 3);
        got.push(ids.next_id().await.unwrap());

        assert_strictly_increasing(&got);
        assert_distinct(&got);
        for &id in &got[..8] {
            assert_eq!(decode(id).0, MIDNIGHT + 2, "timestamp held at the new day");
        }
        assert_eq!(decode(got[8]).0, MIDNIGHT + 3);
        let old_day = format!("{p}icr:order:2025:06:30");
        let new_day = format!("{p}icr:order:2025:07:01");
        assert_eq!(
            get_i64(&mut c, &old_day).await,
            None,
            "old day's key never touched ({mode:?})"
        );
        let counter = get_i64(&mut c, &new_day).await.unwrap();
        for &id in &got {
            assert!(i64::from(decode(id).1) <= counter);
        }
    }
}

/// The reason a block belongs to its day: a segment generator that kept
/// using day D's block with day D+1 timestamps would repeat the ids that a
/// compatible generator takes from day D+1's counter.
#[tokio::test]
async fn a_segment_block_is_dropped_at_midnight_so_it_cannot_collide_with_the_new_day() {
    let p = unique_prefix();
    let _cleanup = KeyPrefix(p.clone());
    let mut c = conn().await;
    let clock = ManualClock::from_unix_seconds(MIDNIGHT - 1); // 23:59:59
    let seg = with_clock(
        c.clone(),
        &p,
        Mode::Segment(SegmentOptions::new().step(100)),
        &clock,
    );
    let compat = with_clock(c.clone(), &p, Mode::Compatible, &clock);

    let mut seg_ids = Vec::new();
    for _ in 0..10 {
        seg_ids.push(seg.next_id().await.unwrap()); // numbers 1..=10 of day D's block
    }
    clock.set_unix_seconds(MIDNIGHT); // 00:00:00, 90 numbers still in the block
    let mut all = seg_ids.clone();
    for _ in 0..50 {
        all.push(compat.next_id().await.unwrap()); // 1..=50 from day D+1
    }
    for _ in 0..50 {
        let id = seg.next_id().await.unwrap();
        seg_ids.push(id);
        all.push(id);
    }
    assert_distinct(&all);
    assert_strictly_increasing(&seg_ids);
    for &id in &seg_ids[10..] {
        let (ts, seq) = decode(id);
        assert_eq!(ts, MIDNIGHT);
        assert!(
            seq > 50,
            "segment id {seq} must come from day D+1's counter"
        );
    }
    assert_eq!(seg.stats().blocks_discarded, 1);
    assert_eq!(
        get_i64(&mut c, &format!("{p}icr:order:2025:06:30")).await,
        Some(100)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segment_mode_uses_far_fewer_round_trips_than_ids() {
    let p = unique_prefix();
    let _cleanup = KeyPrefix(p.clone());
    let mut c = conn().await;
    let clock = ManualClock::from_unix_seconds(MID_DAY);
    let ids = with_clock(c.clone(), &p, Mode::Segment(SegmentOptions::new()), &clock);
    let all = three_hundred_tasks(std::slice::from_ref(&ids)).await;
    assert_distinct(&all);

    let reserved = get_i64(&mut c, &ids.key_at(clock_time(MID_DAY)))
        .await
        .unwrap();
    let round_trips = ids.stats().round_trips;
    // What Redis saw agrees with the generator's own count...
    assert_eq!(reserved, round_trips as i64 * 1000);
    // ...and is about ids/step, not one per id.
    assert!(
        round_trips <= 30_000 / 1000 + 2,
        "{round_trips} INCRBY for 30000 ids"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_stats_of_a_private_server_count_one_incrby_per_block() {
    let server = RedisServer::start().await;
    let mut c = connect(&server.url()).await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut c)
        .await
        .unwrap();

    // A fixed clock: a run that straddled midnight would add block changes.
    let clock = ManualClock::from_unix_seconds(MID_DAY);
    let seg = with_clock(
        c.clone(),
        "",
        Mode::Segment(SegmentOptions::new().step(500)),
        &clock,
    );
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let seg = seg.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..2_500 {
                seg.next_id().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let compat = compatible(c.clone(), "");
    for _ in 0..300 {
        compat.next_id().await.unwrap();
    }

    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    let incrby = calls(&info, "incrby");
    let incr = calls(&info, "incr");
    assert!(incrby <= 20_000 / 500 + 2, "{incrby} INCRBY for 20000 ids");
    assert!(incrby >= 20_000 / 500, "{incrby}");
    assert_eq!(incr, 300, "compatible mode: one INCR per id");
}

/// The next block arrives before the current one runs out: a caller
/// consuming at a steady pace only ever waits for the very first block.
#[tokio::test]
async fn prefetching_keeps_callers_from_waiting() {
    let p = unique_prefix();
    let _cleanup = KeyPrefix(p.clone());
    let clock = ManualClock::from_unix_seconds(MID_DAY);
    let opts = SegmentOptions::new().step(50).prefetch_at(0.5);
    let ids = with_clock(conn().await, &p, Mode::Segment(opts), &clock);
    let mut got = Vec::new();
    for i in 0..300 {
        got.push(ids.next_id().await.unwrap());
        if i % 5 == 4 {
            // Not a wait: a steady pace, 25 ids (>= 10 ms) of lead for each background fetch.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    assert_strictly_increasing(&got);
    let stats = ids.stats();
    assert!(stats.round_trips >= 6, "{stats:?}");
    assert!(
        stats.fetch_waits <= 2,
        "callers waited for prefetched blocks: {stats:?}"
    );
}

/// Waiters that find the block empty share one fetch instead of each
/// sending their own `INCRBY`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_run_dry_share_one_fetch() {
    let p = unique_prefix();
    let _cleanup = KeyPrefix(p.clone());
    let mut c = conn().await;
    let clock = ManualClock::from_unix_seconds(MID_DAY);
    // No prefetch: every block change makes callers wait.
    let opts = SegmentOptions::new().step(10).prefetch_at(0.0);
    let ids = with_clock(c.clone(), &p, Mode::Segment(opts), &clock);
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(100));
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let (ids, barrier) = (ids.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            ids.next_id().await.unwrap()
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.push(t.await.unwrap());
    }
    assert_distinct(&all);
    let round_trips = ids.stats().round_trips;
    // 100 ids in blocks of 10 need 10 fetches (+1 started when the last
    // block drains); a herd would send one per caller.
    assert!(
        round_trips <= 11,
        "{round_trips} INCRBY for 100 concurrent callers"
    );
    // The fetch started as the last block drained is counted when it is sent: wait for its
    // reply before comparing what the counter reserved.
    let key = ids.key_at(clock_time(MID_DAY));
    let patience = Patience::new(Duration::from_secs(5)).every(Duration::from_millis(10));
    wait_until(
        patience,
        "every counted fetch reserved its block",
        async || {
            let reserved = get_i64(&mut c, &key).await.unwrap();
            match ids.stats().round_trips as i64 * 10 {
                wanted if reserved == wanted => Ok(()),
                wanted => Err(format!("{reserved} reserved, {wanted} counted")),
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_sequence_past_32_bits_is_an_error_in_compatible_mode() {
    let p = unique_prefix();
    let _cleanup = KeyPrefix(p.clone());
    let mut c = conn().await;
    let clock = ManualClock::from_unix_seconds(MID_DAY);
    let ids = with_clock(c.clone(), &p, Mode::Compatible, &clock);
    let key = ids.key_at(clock_time(MID_DAY));
    set_i64(&mut c, &key, MAX_SEQUENCE as i64 - 2).await;

    let a = ids.next_id().await.unwrap();
    let b = ids.next_id().await.unwrap();
    assert_eq!(decode(a), (MID_DAY, u32::MAX - 1));
    assert_eq!(decode(b), (MID_DAY, u32::MAX));
    assert!(a > 0 && b > a);
    for _ in 0..2 {
        let e = ids.next_id().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::SequenceExhausted, "{e}");
    }
    assert_eq!(ids.stats().ids_issued, 2);
}

#[tokio::test]
async fn a_sequence_past_32_bits_is_an_error_in_segment_mode() {
    let p = unique_prefix();
    let _cleanup = KeyPrefix(p.clone());
    let mut c = conn().await;
    let clock = ManualClock::from_unix_seconds(MID_DAY);
    let ids = with_clock(
        c.clone(),
        &p,
        Mode::Segment(SegmentOptions::new().step(100)),
        &clock,
    );
    let key = ids.key_at(clock_time(MID_DAY));
    set_i64(&mut c, &key, MAX_SEQUENCE as i64 - 3).await;

    // The block straddles the limit: only the 3 numbers below it are used.
    let mut got = Vec::new();
    let err = loop {
        match ids.next_id().await {
            Ok(id) => got.push(id),
            Err(e) => break e,
        }
        assert!(
            got.len() <= 3,
            "handed out a wrapped id: {:?}",
            decode(*got.last().unwrap())
        );
    };
    assert!(err.is_sequence_exhausted(), "{err}");
    let seqs: Vec<u32> = got.iter().map(|&id| decode(id).1).collect();
    assert_eq!(seqs, [u32::MAX - 2, u32::MAX - 1, u32::MAX]);
    assert!(ids.next_id().await.unwrap_err().is_sequence_exhausted());
}

#[tokio::test]
async fn a_lost_server_is_a_redis_error_in_both_modes() {
    let mut server = RedisServer::start().await;
    let client = redis::Client::open(server.url()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    let gens = both_modes(10).map(|m| {
        IdGenerator::builder(conn.clone(), "order")
            .mode(m)
            .build()
            .unwrap()
    });
    for g in &gens {
        g.next_id().await.unwrap();
    }
    server.kill();
    // Compatible mode fails at once; segment mode once its block is spent.
    for g in &gens {
        let mut err = None;
        for _ in 0..20 {
            if let Err(e) = g.next_id().await {
                err = Some(e);
                break;
            }
        }
        let e = err.expect("an error once Redis is gone");
        assert!(e.is_redis(), "{e}");
        assert!(e.redis_error().is_some());
    }
}

#[tokio::test]
async fn builder_rejects_unusable_settings() {
    let c = conn().await;
    let bad = [
        IdGenerator::builder(c.clone(), "").build(),
        IdGenerator::builder(c.clone(), "my order").build(),
        IdGenerator::builder(c.clone(), "order")
            .segment(SegmentOptions::new().step(0))
            .build(),
        IdGenerator::builder(c.clone(), "order")
            .segment(SegmentOptions::new().prefetch_at(1.5))
            .build(),
        IdGenerator::builder(c.clone(), "order")
            .segment(SegmentOptions::new().prefetch_at(f64::NAN))
            .build(),
    ];
    for r in bad {
        assert_eq!(r.unwrap_err().kind(), ErrorKind::InvalidConfig);
    }
}

#[tokio::test]
async fn a_clock_before_2022_is_an_error_until_a_valid_second_was_used() {
    let p = unique_prefix();
    let _cleanup = KeyPrefix(p.clone());
    let clock = ManualClock::from_unix_seconds(1_600_000_000); // 2020
    let ids = with_clock(conn().await, &p, Mode::Compatible, &clock);
    assert!(ids.next_id().await.unwrap_err().is_clock_out_of_range());
    clock.set_unix_seconds(MID_DAY);
    let a = ids.next_id().await.unwrap();
    clock.set_unix_seconds(1_600_000_000); // back to 2020: clamped, not an error
    let b = ids.next_id().await.unwrap();
    assert!(b > a);
    assert_eq!(decode(b).0, MID_DAY);
}

// ---------------------------------------------------------------------------
// Two OS processes on one key.
// ---------------------------------------------------------------------------

const CHILD_ENV: &str = "HMDP_ID_CHILD";
const CHILD_TEST: &str = "child_process_prints_ids";
const CHILD_IDS: usize = 8_000;

/// Not a test on its own: the two-process test runs this binary again with
/// `--ignored --exact child_process_prints_ids` and `HMDP_ID_CHILD` set to
/// `prefix,mode,step,unix_second,start_at_unix_ms`. It prints one `ID <n>`
/// line per id. Without the variable it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process for two_processes_on_one_key_never_duplicate"]
async fn child_process_prints_ids() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let [prefix, mode, step, second, start_at] = parts[..] else {
        panic!("bad {CHILD_ENV}: {spec}");
    };
    let mode = match mode {
        "segment" => Mode::Segment(SegmentOptions::new().step(step.parse().unwrap())),
        _ => Mode::Compatible,
    };
    // Every process uses the same second, so all of them draw from the same
    // counter for the same timestamp: any reuse of a number is a duplicate.
    let clock = ManualClock::from_unix_seconds(second.parse().unwrap());
    let ids = with_clock(conn().await, prefix, mode, &clock);
    // Start together.
    let start_at: u128 = start_at.parse().unwrap();
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    if start_at > now {
        // Not a wait on a condition: the processes' agreed starting time.
        tokio::time::sleep(Duration::from_millis((start_at - now) as u64)).await;
    }
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let ids = ids.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            for _ in 0..CHILD_IDS / 16 {
                mine.push(ids.next_id().await.unwrap());
            }
            assert_strictly_increasing(&mine);
            mine
        }));
    }
    let mut out = String::new();
    for t in tasks {
        for id in t.await.unwrap() {
            out.push_str(&format!("ID {id}\n"));
        }
    }
    // libtest has already written "test <name> ... " without a newline.
    print!("\n{out}");
}

#[tokio::test]
async fn two_processes_on_one_key_never_duplicate() {
    let p = unique_prefix();
    let _cleanup = KeyPrefix(p.clone());
    let exe = std::env::current_exe().unwrap();
    let start_at = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 700;
    let specs = [("segment", 37), ("segment", 37), ("compatible", 0)];
    let children: Vec<_> = specs
        .iter()
        .map(|(mode, step)| {
            tokio::process::Command::new(&exe)
                .args([
                    "--ignored",
                    "--exact",
                    CHILD_TEST,
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, format!("{p},{mode},{step},{MID_DAY},{start_at}"))
                .env("HMDP_TEST_REDIS_URL", redis_url())
                .output()
        })
        .collect();
    let outputs = futures_util::future::join_all(children).await;

    let mut all = Vec::new();
    for (out, spec) in outputs.into_iter().zip(specs) {
        let out = out.unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child {spec:?} failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ids: Vec<i64> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("ID "))
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(ids.len(), CHILD_IDS, "child {spec:?} printed all its ids");
        all.extend(ids);
    }
    assert_eq!(all.len(), 3 * CHILD_IDS);
    assert_distinct(&all);
    assert!(all.iter().all(|&id| decode(id).0 == MID_DAY));
}

async fn take<C: IdConnection>(ids: &IdGenerator<C>, n: usize, got: &mut Vec<i64>) {
    for _ in 0..n {
        got.push(ids.next_id().await.unwrap());
    }
}

fn clock_time(unix_seconds: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(unix_seconds as u64)
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `calls=` of `cmdstat_<name>` in `INFO commandstats`, 0 if absent.
fn calls(info: &str, name: &str) -> u64 {
    let tag = format!("cmdstat_{name}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&tag))
        .map(|rest| rest.split(',').next().unwrap().parse().unwrap())
        .unwrap_or(0)
}
