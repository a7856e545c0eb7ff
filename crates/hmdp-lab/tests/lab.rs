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
async fn lab_run(args: &[&str]) -> String {
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

/// `hmdp-lab ARGS` with the test's Redis: its standard output, after asserting it exited 0.
fn lab_command(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hmdp-lab"))
        .args(args)
        .env("HMDP_LAB_REDIS_URL", hmdp_testkit::redis_url())
        .env_remove("HMDP_LAB_LANG")
        .output()
        .expect("run hmdp-lab");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "hmdp-lab {args:?}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_like_trace_shows_both_clicks_of_one_user_seeing_not_liked_then_both_adding() {
    let _alone = support::one_at_a_time().await;
    let stdout = lab_run(&["likes", "--trace", "--json"]).await;
    let line: serde_json::Value = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["version"] == "check-then-like")
        .expect("a line for check-then-like");
    let trace = line["trace"].as_array().expect("its trace");
    let of = |action: &str, detail: &str| {
        trace
            .iter()
            .filter(|e| e["action"] == action && e["detail"] == detail)
            .count()
    };
    assert_eq!(of("check_liked", "not liked yet"), 2, "{trace:#?}");
    assert_eq!(of("update_liked", "liked +1"), 2, "{trace:#?}");
    let checks_first = trace
        .iter()
        .position(|e| e["action"] == "update_liked")
        .is_some_and(|first_update| {
            trace[..first_update]
                .iter()
                .filter(|e| e["action"] == "check_liked")
                .count()
                == 2
        });
    assert!(
        checks_first,
        "both checks come before either update: {trace:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oversell_trace_shows_two_buyers_reading_one_stock_then_both_decrementing() {
    let _alone = support::one_at_a_time().await;
    let stdout = lab_run(&["oversell", "--trace", "--json"]).await;
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

/// The lines of `text` wider than a 100-column terminal.
fn too_wide(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| hmdp_lab::display_width(l) > hmdp_lab::COLUMNS)
        .map(|l| format!("{} columns: {l}", hmdp_lab::display_width(l)))
        .collect()
}

#[test]
fn list_json_has_one_object_per_experiment_with_its_versions() {
    let out = lab_command(&["list", "--json"]);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    assert_eq!(lines.len(), experiments::ALL.len());
    for (line, e) in lines.iter().zip(experiments::ALL) {
        let keys: Vec<&str> = line
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["name", "chapter", "versions"], "{line}");
        assert_eq!(line["name"], e.name);
        assert_eq!(line["chapter"], e.chapter);
        let versions = line["versions"].as_array().unwrap();
        assert_eq!(versions.len(), e.versions.len(), "{line}");
        for (got, v) in versions.iter().zip(e.versions) {
            let keys: Vec<&str> = got
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, ["name", "expected_to_hold", "about"], "{got}");
            assert_eq!(got["name"], v.name);
            assert_eq!(got["expected_to_hold"], v.holds);
            assert_eq!(got["about"], v.about_zh, "Chinese unless told otherwise");
        }
    }
    let en = lab_command(&["list", "--json", "--lang", "en"]);
    let first: serde_json::Value = serde_json::from_str(en.lines().next().unwrap()).unwrap();
    assert_eq!(
        first["versions"][0]["about"],
        experiments::ALL[0].versions[0].about
    );
}

#[test]
fn every_version_is_described_in_both_languages() {
    for e in experiments::ALL {
        let has_cjk = |s: &str| s.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c));
        assert!(has_cjk(e.invariant_zh), "{}: a Chinese invariant", e.name);
        assert!(has_cjk(e.lesson.zh), "{}: a Chinese lesson", e.name);
        assert!(!has_cjk(e.lesson.en), "{}: an English lesson", e.name);
        for v in e.versions {
            assert!(
                !v.about.is_empty() && !v.about_zh.is_empty(),
                "{} / {}",
                e.name,
                v.name
            );
        }
    }
}

#[test]
fn list_fits_a_100_column_terminal_in_both_languages() {
    for lang in ["zh", "en"] {
        let out = lab_command(&["list", "--lang", lang]);
        assert!(out.lines().count() > experiments::ALL.len());
        assert_eq!(too_wide(&out), Vec::<String>::new(), "--lang {lang}");
    }
    for args in [&["--help"][..], &["run", "--help"], &["list", "--help"]] {
        assert_eq!(
            too_wide(&lab_command(args)),
            Vec::<String>::new(),
            "{args:?}"
        );
    }
    let help = lab_command(&["run", "--help"]);
    assert!(
        help.contains("rabbitmq-server") && help.contains("mysql://"),
        "{help}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_misdelete_trace_names_whose_lock_a_del_removed_within_100_columns() {
    let _alone = support::one_at_a_time().await;
    let stdout = lab_run(&["lock-misdelete", "--trace"]).await;
    let timeline: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("  setnx-del 的交错"))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_explains_itself_in_chinese_within_100_columns() {
    let _alone = support::one_at_a_time().await;
    let out = lab_command(&["run", "session", "-q"]);
    for expected in [
        "不变量：",
        "版本：",
        "列的含义：",
        "结论：",
        "lost_logins",
        "登录后至少有一次",
    ] {
        assert!(out.contains(expected), "{expected:?} in\n{out}");
    }
    for v in experiments::find("session").unwrap().versions {
        let start: String = v.about_zh.chars().take(12).collect();
        assert!(out.contains(&start), "{} described in\n{out}", v.name);
    }
    assert!(!out.contains("  ?"), "every column explained:\n{out}");
    assert_eq!(too_wide(&out), Vec::<String>::new());
    let en = lab_command(&["run", "session", "-q", "--lang", "en"]);
    assert!(en.contains("conclusion: ") && !en.contains("结论"), "{en}");
    assert_eq!(too_wide(&en), Vec::<String>::new());
}

/// The metrics `version` of `experiment` measured on a fresh SQLite lab.
async fn measure(experiment: &str, version: &str) -> hmdp_lab::Outcome {
    let _alone = support::one_at_a_time().await;
    let lab = support::TestLab::open(Backend::Sqlite).await;
    let v = experiments::find(experiment)
        .unwrap()
        .versions
        .iter()
        .find(|v| v.name == version)
        .unwrap();
    let outcome = (v.run)(&lab.lab).await;
    lab.close().await;
    outcome.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_ge_0_sells_exactly_one_more_than_the_stock() {
    let o = measure("oversell", "v2-stock-ge-0").await;
    assert!(!o.held);
    assert_eq!(o.metrics["oversold"], 1, "{:?}", o.metrics);
    assert_eq!(o.metrics["stock_left"], -1, "{:?}", o.metrics);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn likes_on_sqlite() {
    as_taught("likes", Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn likes_on_mysql() {
    as_taught("likes", Backend::MySql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feed_paging_on_sqlite() {
    as_taught("feed-paging", Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feed_paging_on_mysql() {
    as_taught("feed-paging", Backend::MySql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nearby_shops_on_sqlite() {
    as_taught("nearby-shops", Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nearby_shops_on_mysql() {
    as_taught("nearby-shops", Backend::MySql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_streak() {
    as_taught("sign-streak", Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uv_count() {
    as_taught("uv-count", Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_click_counts_twice_only_in_the_course_s_version() {
    let o = measure("likes", "check-then-like").await;
    assert_eq!(
        o.metrics["miscounted"], 20,
        "every double click: {:?}",
        o.metrics
    );
    let o = measure("likes", "lua-toggle").await;
    assert_eq!(
        o.metrics["liked_in_db"], 20,
        "the single clicks: {:?}",
        o.metrics
    );
}

#[test]
fn every_chapter_from_01_to_11_has_an_experiment() {
    let chapters: Vec<&str> = experiments::ALL.iter().map(|e| e.chapter).collect();
    for chapter in [
        "短信登录",
        "商户查询缓存",
        "优惠券秒杀",
        "分布式锁",
        "Redis消息队列",
        "达人探店",
        "好友关注",
        "附近商户",
        "用户签到",
        "UV统计",
    ] {
        assert!(chapters.contains(&chapter), "{chapter}: {chapters:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_course_s_grab_script_errors_on_every_grab_before_the_stock_is_loaded() {
    let o = measure("oversell", "lua-before-preload").await;
    assert!(!o.held);
    assert_eq!(o.metrics["script_errors"], 400, "{:?}", o.metrics);
    assert_eq!(o.metrics["orders"], 0, "{:?}", o.metrics);
}
