//! Helpers for hmdp-id's integration tests: a real Redis (never mocked), reading counters
//! back, and assertions on id sequences. Servers, prefixes and clean-up come from
//! `hmdp-testkit`.
#![allow(dead_code)]

use std::collections::HashSet;

use redis::aio::ConnectionManager;

use hmdp_testkit::{connect, redis_url};

/// A connection to the shared test Redis.
pub async fn conn() -> ConnectionManager {
    connect(&redis_url()).await
}

pub async fn keys_under(c: &mut ConnectionManager, prefix: &str) -> Vec<String> {
    let mut cursor: u64 = 0;
    let mut out = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(c)
            .await
            .unwrap();
        out.extend(batch);
        if next == 0 {
            return out;
        }
        cursor = next;
    }
}

pub async fn get_i64(c: &mut ConnectionManager, key: &str) -> Option<i64> {
    redis::cmd("GET").arg(key).query_async(c).await.unwrap()
}

pub async fn set_i64(c: &mut ConnectionManager, key: &str, value: i64) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(c)
        .await
        .unwrap();
}

/// Panics on the first duplicate; returns the set.
pub fn assert_distinct(ids: &[i64]) -> HashSet<i64> {
    let mut seen = HashSet::with_capacity(ids.len());
    for &id in ids {
        assert!(seen.insert(id), "duplicate id {id}");
    }
    seen
}

pub fn assert_strictly_increasing(ids: &[i64]) {
    for w in ids.windows(2) {
        assert!(w[0] < w[1], "ids not increasing: {} then {}", w[0], w[1]);
    }
}
