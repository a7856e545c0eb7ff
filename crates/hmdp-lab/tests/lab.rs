//! Every experiment, run for real: each broken version must fail and each fixed one hold, on
//! every run, on both databases where a database is involved.

mod support;

use hmdp_lab::experiments;
use support::{Backend, as_taught};

#[test]
fn every_experiment_is_listed_once_with_broken_and_fixed_versions() {
    let mut names: Vec<&str> = experiments::ALL.iter().map(|e| e.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(
        names.len(),
        experiments::ALL.len(),
        "experiment names are unique"
    );
    for e in experiments::ALL {
        assert!(
            e.versions.iter().any(|v| v.holds),
            "{}: a version that holds",
            e.name
        );
        assert!(
            e.versions.iter().any(|v| !v.holds),
            "{}: a version that fails",
            e.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversell_on_sqlite() {
    as_taught("oversell", Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversell_on_mysql() {
    as_taught("oversell", Backend::MySql).await;
}

#[test]
fn the_command_line_is_well_formed() {
    use clap::CommandFactory;
    hmdp_lab::Cli::command().debug_assert();
}

/// `hmdp-lab run ARGS… -q` against the test Redis and a SQLite file of its own: its stdout.
async fn lab_command(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}?mode=rwc", dir.path().join("lab.db").display());
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_hmdp-lab"))
        .arg("run")
        .args(args)
        .args(["-q", "--redis-url", &hmdp_testkit::redis_url()])
        .args(["--database-url", &database])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "hmdp-lab run {args:?}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oversell_trace_shows_two_buyers_reading_one_stock_then_both_decrementing() {
    let _alone = support::one_at_a_time().await;
    let stdout = lab_command(&["oversell", "--trace", "--json"]).await;
    let v1: serde_json::Value = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["version"] == "v1-no-check")
        .expect("a line for v1-no-check");
    let trace = v1["trace"].as_array().expect("v1's trace");
    let t: Vec<u64> = trace.iter().map(|e| e["t_us"].as_u64().unwrap()).collect();
    assert!(t.windows(2).all(|w| w[0] <= w[1]), "in time order: {t:?}");
    let field = |e: &serde_json::Value, k: &str| e[k].as_str().unwrap().to_owned();
    let reads: Vec<(usize, String, String)> = trace
        .iter()
        .enumerate()
        .filter(|(_, e)| e["action"] == "read_stock")
        .map(|(i, e)| (i, field(e, "actor"), field(e, "detail")))
        .collect();
    // Two buyers who read the same stock, each followed (later) by its own successful UPDATE.
    let decremented = |after: usize, actor: &str| {
        trace[after + 1..].iter().any(|e| {
            e["action"] == "update_stock"
                && e["actor"] == actor
                && field(e, "detail").ends_with(": 1 row(s) affected")
        })
    };
    let raced = reads.iter().any(|(i, a, stock)| {
        reads.iter().any(|(j, b, other)| {
            a != b && stock == other && decremented(*i, a) && decremented(*j, b)
        })
    });
    assert!(
        raced,
        "two buyers read one stock and both decremented: {trace:#?}"
    );
    assert!(
        trace.iter().any(|e| e["action"] == "count"),
        "the lab's count closes the timeline"
    );
    assert!(
        v1["trace_left_out"].as_u64().unwrap() > 0,
        "the other buyers are left out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_misdelete_trace_names_whose_lock_a_del_removed_within_100_columns() {
    let _alone = support::one_at_a_time().await;
    let stdout = lab_command(&["lock-misdelete", "--trace"]).await;
    let timeline: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.contains("setnx-del"))
        .skip_while(|l| !l.starts_with("  setnx-del"))
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert!(timeline.len() > 4, "setnx-del's timeline:\n{stdout}");
    for line in &timeline {
        let width = unicode_width::UnicodeWidthStr::width(*line);
        assert!(width <= 100, "{width} columns: {line}");
    }
    assert!(
        timeline
            .iter()
            .any(|l| l.contains("持有者 1") && l.contains("DEL 锁") && l.contains("值是持有者")),
        "holder 1's DEL removed another holder's lock:\n{}",
        timeline.join("\n")
    );
    assert!(
        !stdout.contains("  lua-unlock 的交错"),
        "only broken versions' timelines are printed"
    );
}
