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
