//! The lab's test harness: a lab on a database of its own, and the one assertion every
//! experiment's test makes.
#![allow(dead_code)]

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

/// Runs `name` on a fresh lab of `backend`, then cleans up.
pub async fn as_taught(name: &str, backend: Backend) {
    let lab = TestLab::open(backend).await;
    lab.assert_as_taught(name).await;
    lab.close().await;
}
