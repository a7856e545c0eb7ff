//! The hot voucher on a private three-master cluster, each version for what it shows: one key
//! sells exactly on one master, pinned buckets refuse buyers while units are left, one script
//! over every bucket sells on a single Redis and meets CROSSSLOT on the cluster, the service
//! sells exactly with its scripts on every master.

mod support;

use hmdp_lab::{
    Outcome, experiments,
    trace::{Actor, What},
};
use serde_json::Value;
use support::{Backend, TestLab};

/// Every version of hot-voucher on one fresh SQLite lab, by name.
async fn run_all() -> Vec<(&'static str, Outcome)> {
    let _alone = support::one_at_a_time().await;
    let lab = TestLab::open(Backend::Sqlite).await;
    let mut outcomes = Vec::new();
    let mut failed = None;
    for v in experiments::find("hot-voucher").unwrap().versions {
        match (v.run)(&lab.lab).await {
            Ok(o) => outcomes.push((v.name, o)),
            Err(e) => {
                failed = Some(format!("{}: {e:#}", v.name));
                break;
            }
        }
    }
    lab.close().await;
    if let Some(e) = failed {
        panic!("{e}");
    }
    outcomes
}

fn int(o: &Outcome, metric: &str) -> i64 {
    o.metrics[metric]
        .as_i64()
        .unwrap_or_else(|| panic!("{metric} in {:?}", o.metrics))
}

/// `scripts_per_master` as numbers, busiest first.
fn per_master(o: &Outcome) -> Vec<i64> {
    let Value::String(s) = &o.metrics["scripts_per_master"] else {
        panic!("{:?}", o.metrics)
    };
    s.split('/').map(|n| n.parse().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_version_shows_what_it_is_there_for() {
    let outcomes = run_all().await;
    let of = |name: &str| &outcomes.iter().find(|(n, _)| *n == name).unwrap().1;

    // One key: exact to the unit, every script on one master.
    let o = of("one-key");
    assert_eq!(int(o, "accepted"), 60, "{:?}", o.metrics);
    assert_eq!(int(o, "stock_left"), 0, "{:?}", o.metrics);
    assert_eq!(int(o, "false_refusals"), 0, "{:?}", o.metrics);
    assert_eq!(per_master(o), [300, 0, 0], "{:?}", o.metrics);
    assert!(!o.held);

    // Pinned buckets: buyers told sold out while other buckets held units.
    let o = of("buckets-pinned");
    assert!(int(o, "false_refusals") > 0, "{:?}", o.metrics);
    assert!(per_master(o).iter().all(|&n| n > 0), "{:?}", o.metrics);
    assert!(!o.held);
    let trace = o.trace.as_ref().expect("the pinned version's trace");
    let read = trace
        .events
        .iter()
        .position(|e| matches!(e.what, What::UnitsLeft { total, .. } if total > 0))
        .unwrap_or_else(|| panic!("a look that found units left: {trace:#?}"));
    let What::UnitsLeft { user, .. } = trace.events[read].what else {
        unreachable!()
    };
    assert!(
        trace.events[..read]
            .iter()
            .any(|e| e.actor == Actor::Buyer { user }
                && matches!(e.what, What::BucketEmpty { .. })),
        "buyer {user} was refused before the look: {trace:#?}"
    );

    // One script over every bucket: sells on one Redis, refused by the cluster.
    let o = of("buckets-scan-single-redis");
    assert_eq!(int(o, "sold_on_one_redis"), 60, "{:?}", o.metrics);
    assert_eq!(int(o, "accepted"), 0, "{:?}", o.metrics);
    assert_eq!(int(o, "script_errors"), 300, "{:?}", o.metrics);
    assert_eq!(int(o, "stock_left"), 60, "{:?}", o.metrics);
    let error = o.metrics["script_error"].as_str().unwrap();
    assert!(error.starts_with("CROSSSLOT"), "{error}");
    assert!(!o.held);

    // The service: exact, nobody twice, no false sold out, scripts on every master.
    let o = of("hmdp");
    assert!(o.held, "{:?}", o.metrics);
    assert_eq!(int(o, "orders"), 60, "{:?}", o.metrics);
    assert_eq!(int(o, "users_with_two_or_more"), 0, "{:?}", o.metrics);
    assert_eq!(int(o, "false_refusals"), 0, "{:?}", o.metrics);
    let ran = per_master(o);
    let total: i64 = ran.iter().sum();
    assert!(ran.iter().all(|&n| n * 6 >= total), "{:?}", o.metrics);
}
