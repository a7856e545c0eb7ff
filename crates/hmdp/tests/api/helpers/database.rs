//! MariaDB for the tests: a fresh database per test, a proxy that plays "the database went
//! away", and the dumps in the original project's schema that compatibility tests load.

use std::path::{Path, PathBuf};

use hmdp_testkit::{CuttableProxy, mysql_server_url};
use sqlx::{Connection, Executor};

/// A fresh, empty MariaDB database; dropped when the value is dropped.
pub struct TestDatabase {
    pub name: String,
    pub url: String,
}

impl TestDatabase {
    pub async fn create() -> Self {
        let name = format!(
            "hmdp_t_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..16]
        );
        let server = mysql_server_url();
        let mut conn = sqlx::MySqlConnection::connect(&server)
            .await
            .unwrap_or_else(|e| {
                panic!("MariaDB/MySQL must be running at {server} (set HMDP_TEST_MYSQL_URL): {e}")
            });
        conn.execute(format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4").as_str())
            .await
            .unwrap();
        conn.close().await.unwrap();
        Self {
            url: format!("{server}/{name}"),
            name,
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        run_blocking(async move {
            if let Ok(mut conn) = sqlx::MySqlConnection::connect(&mysql_server_url()).await {
                let _ = conn
                    .execute(format!("DROP DATABASE IF EXISTS `{name}`").as_str())
                    .await;
            }
        });
    }
}

/// A user of its own with every privilege on one test database and none elsewhere (as a
/// service in production connects), dropped with the value. Unlike root, it is bound by the
/// server's `read_only`.
pub struct DatabaseUser {
    pub name: String,
    /// `database_url` as this user.
    pub url: String,
}

impl DatabaseUser {
    pub async fn create(database_url: &str) -> Self {
        let name = format!(
            "hmdp_u_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..16]
        );
        let server = mysql_server_url();
        let (host_port, database) = database_url
            .rsplit_once('@')
            .and_then(|(_, rest)| rest.split_once('/'))
            .unwrap_or_else(|| panic!("not a MySQL database URL: {database_url}"));
        let mut conn = sqlx::MySqlConnection::connect(&server).await.unwrap();
        conn.execute(format!("CREATE USER '{name}'@'%' IDENTIFIED BY 'pw'").as_str())
            .await
            .unwrap();
        conn.execute(format!("GRANT ALL ON `{database}`.* TO '{name}'@'%'").as_str())
            .await
            .unwrap();
        conn.close().await.unwrap();
        Self {
            url: format!("mysql://{name}:pw@{host_port}/{database}"),
            name,
        }
    }
}

impl Drop for DatabaseUser {
    fn drop(&mut self) {
        let name = self.name.clone();
        run_blocking(async move {
            if let Ok(mut conn) = sqlx::MySqlConnection::connect(&mysql_server_url()).await {
                let _ = conn
                    .execute(format!("DROP USER IF EXISTS '{name}'@'%'").as_str())
                    .await;
            }
        });
    }
}

/// The test server in `read_only` mode until the value is dropped (also when the test panics).
///
/// `read_only` is global: it refuses writes of every user without `READ ONLY ADMIN`. The tests
/// connect as root, which holds it, so only a [`DatabaseUser`] notices; keep the window short.
pub struct ReadOnlyServer(());

impl ReadOnlyServer {
    pub async fn on() -> Self {
        set_read_only(true).await;
        Self(())
    }
}

impl Drop for ReadOnlyServer {
    fn drop(&mut self) {
        run_blocking(set_read_only(false));
    }
}

async fn set_read_only(on: bool) {
    let mut conn = sqlx::MySqlConnection::connect(&mysql_server_url())
        .await
        .unwrap();
    conn.execute(format!("SET GLOBAL read_only = {}", if on { "ON" } else { "OFF" }).as_str())
        .await
        .unwrap();
    conn.close().await.unwrap();
}

/// Runs a future to completion on a private runtime (for clean-up in `Drop`).
fn run_blocking(f: impl std::future::Future<Output = ()> + Send + 'static) {
    let _ = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    })
    .join();
}

/// `url`, a database on the test MariaDB server, reached through a new [`CuttableProxy`].
pub async fn mysql_via_proxy(url: &str) -> (String, CuttableProxy) {
    let server = mysql_server_url();
    let hostport = server.rsplit('@').next().unwrap().to_owned();
    let target = std::net::ToSocketAddrs::to_socket_addrs(&hostport)
        .ok()
        .and_then(|mut a| a.next())
        .unwrap_or_else(|| panic!("no address for {hostport}"));
    let proxy = CuttableProxy::start(target).await;
    let via = url.replace(&hostport, &proxy.addr().to_string());
    (via, proxy)
}

/// A dump in the original project's schema, to load into a fresh database.
pub enum SchemaDump {
    /// `tests/fixtures/original-schema.sql`: the original's tables with a few invented rows;
    /// always there.
    Fixture,
    /// The original project's `hmdp.sql` with its data, which is not ours to ship: found only
    /// outside the repository.
    Original(PathBuf),
}

impl SchemaDump {
    /// The fixture, then the original dump if it can be found: at `HMDP_ORIGINAL_SQL` (which
    /// then must exist), else at `shared/data/hmdp.sql` beside any ancestor of this crate.
    pub fn available() -> Vec<SchemaDump> {
        let original = match std::env::var_os("HMDP_ORIGINAL_SQL").filter(|p| !p.is_empty()) {
            Some(path) => {
                let path = PathBuf::from(path);
                assert!(
                    path.is_file(),
                    "HMDP_ORIGINAL_SQL={} is not a file; unset it to test on the repository \
                     fixture alone",
                    path.display()
                );
                Some(path)
            }
            None => Path::new(env!("CARGO_MANIFEST_DIR"))
                .ancestors()
                .map(|dir| dir.join("shared/data/hmdp.sql"))
                .find(|p| p.is_file()),
        };
        std::iter::once(SchemaDump::Fixture)
            .chain(original.map(SchemaDump::Original))
            .collect()
    }

    fn path(&self) -> PathBuf {
        match self {
            SchemaDump::Fixture => {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/original-schema.sql")
            }
            SchemaDump::Original(path) => path.clone(),
        }
    }

    /// Loads the dump into `db` as the original project would have, on MySQL 5.6.
    pub async fn load_into(&self, db: &TestDatabase) {
        let path = self.path();
        eprintln!("loading {}", path.display());
        let sql = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let mut conn = sqlx::MySqlConnection::connect(&db.url).await.unwrap();
        // '0000-00-00' defaults, which today's strict modes reject.
        conn.execute("SET SESSION sql_mode = ''").await.unwrap();
        sqlx::raw_sql(&sql).execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
    }

    /// Runs `check` on every available dump, then says on stderr which ones `test` ran on.
    pub async fn check_each(test: &str, check: impl AsyncFn(&SchemaDump)) {
        let dumps = Self::available();
        for dump in &dumps {
            check(dump).await;
        }
        let original = dumps
            .iter()
            .find_map(|d| match d {
                SchemaDump::Original(path) => Some(format!("ran on it too ({})", path.display())),
                SchemaDump::Fixture => None,
            })
            .unwrap_or_else(|| "not found (set HMDP_ORIGINAL_SQL)".to_owned());
        eprintln!("{test}: ran on the repository fixture; original dump: {original}");
    }
}
