//! The lab's test harness: a lab on a database of its own, and the one assertion every
//! experiment's test makes. The experiments measure races and timings, so the tests of one
//! binary run one at a time ([`one_at_a_time`]): two at once on a loaded 2-core machine would
//! starve each other's windows.
#![allow(dead_code)]

use std::sync::LazyLock;

use futures_util::FutureExt;
use hmdp_lab::{Lab, LabOptions, experiments};
use hmdp_testkit::{amqp_url, mysql_server_url, redis_url};

/// A lab on a database of its own: a SQLite file in a temporary folder, or a fresh MariaDB
/// database dropped when the test is done (with the `hmdp` versions' service database beside
/// it).
pub struct TestLab {
    pub lab: Lab,
    mysql_database: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Sqlite,
    MySql,
}

impl TestLab {
    /// A lab whose RabbitMQ is the shared broker's default vhost.
    pub async fn open(backend: Backend) -> Self {
        Self::open_with_amqp(backend, &amqp_url()).await
    }

    /// A lab whose RabbitMQ is `amqp_url`.
    pub async fn open_with_amqp(backend: Backend, amqp_url: &str) -> Self {
        let (database_url, mysql_database, dir) = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}?mode=rwc", dir.path().join("lab.db").display());
                (url, None, Some(dir))
            }
            Backend::MySql => {
                let name = format!("hmdp_lab_test_{}", uuid::Uuid::new_v4().simple());
                (format!("{}/{name}", mysql_server_url()), Some(name), None)
            }
        };
        let lab = Lab::open(LabOptions {
            redis_url: redis_url(),
            amqp_url: amqp_url.to_owned(),
            database_url: Some(database_url),
            exe: env!("CARGO_BIN_EXE_hmdp-lab").into(),
            progress: false,
        })
        .await
        .expect("open the lab");
        Self {
            lab,
            mysql_database,
            _dir: dir,
        }
    }

    /// Runs every version of `name`; panics naming each version that did not behave as the
    /// course teaches, with what it measured.
    pub async fn assert_as_taught(&self, name: &str) {
        let experiment = experiments::find(name).expect("a known experiment");
        let mut wrong = Vec::new();
        for v in experiment.versions {
            let outcome = (v.run)(&self.lab).await.unwrap_or_else(|e| {
                panic!("{name} / {}: {e:#}", v.name);
            });
            if outcome.held != v.holds {
                wrong.push(format!(
                    "{}: held = {}, taught to {} ({:?})",
                    v.name,
                    outcome.held,
                    if v.holds { "hold" } else { "fail" },
                    outcome.metrics
                ));
            }
        }
        assert!(wrong.is_empty(), "{name}: {}", wrong.join("; "));
    }

    pub async fn close(self) {
        self.lab.clean_up().await.unwrap();
        if let Some(name) = self.mysql_database {
            use sqlx::Executor;
            self.lab.db.close().await;
            let server = sqlx::any::AnyPoolOptions::new()
                .max_connections(1)
                .connect(&mysql_server_url())
                .await
                .unwrap();
            server
                .execute(format!("DROP DATABASE `{name}`").as_str())
                .await
                .unwrap();
            // The database of the `hmdp` versions' service, beside the lab's, when one ran.
            let service = hmdp_lab::service_database_url(&self.lab.database_url).unwrap();
            let service = service.rsplit('/').next().unwrap();
            server
                .execute(format!("DROP DATABASE IF EXISTS `{service}`").as_str())
                .await
                .unwrap();
        }
    }
}

/// Held by each lab test for its whole run.
static ONE_AT_A_TIME: LazyLock<tokio::sync::Mutex<()>> =
    LazyLock::new(|| tokio::sync::Mutex::new(()));

/// Waits until no other lab test of this binary runs; the guard lets the next one in.
pub async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().await
}

/// Asserts `name` as taught on `lab`, then closes it, also when the assertion panics (the
/// panic is raised again after the clean-up).
pub async fn assert_then_close(lab: TestLab, name: &str) {
    let result = std::panic::AssertUnwindSafe(lab.assert_as_taught(name))
        .catch_unwind()
        .await;
    lab.close().await;
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Runs `name` on a fresh lab of `backend`, alone, then cleans up.
pub async fn as_taught(name: &str, backend: Backend) {
    let _alone = one_at_a_time().await;
    assert_then_close(TestLab::open(backend).await, name).await;
}
