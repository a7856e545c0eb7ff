//! Starting the service in-process for a benchmark, on embedded defaults.

use std::{net::SocketAddr, sync::Arc};

use hmdp::{
    Application, Config, Dependencies,
    config::Secret,
    testing::{auth::CapturingSms, http::AppState},
};
use sqlx::{Connection, Executor};

/// A running in-process server; stopped (its keys deleted, a MariaDB database it created
/// dropped) on drop.
pub struct BenchServer {
    pub addr: SocketAddr,
    pub state: AppState,
    pub prefix: String,
    pub sms: Arc<CapturingSms>,
    pub admin_token: String,
    redis_url: String,
    /// `(server URL, database name)` of a MariaDB database created for this run.
    mysql: Option<(String, String)>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _dir: tempfile::TempDir,
}

/// Where the in-process server keeps its data.
#[derive(Debug, Clone, Default)]
pub enum Database {
    /// A SQLite file in a temporary folder (the embedded default).
    #[default]
    Sqlite,
    /// A fresh database on this MariaDB/MySQL server (`mysql://user@host:port`), dropped after.
    MySql(String),
}

impl Database {
    /// `--database-url` for an in-process server: a `mysql://` URL names the server (a
    /// database name in it is ignored: the bench always uses a fresh one and drops it).
    pub fn from_flag(url: Option<&str>) -> Self {
        match url {
            Some(u) if u.starts_with("mysql:") || u.starts_with("mariadb:") => {
                let u = u.replacen("mariadb:", "mysql:", 1);
                let rest = u.trim_start_matches("mysql://");
                let server = match rest.find('/') {
                    Some(i) => format!("mysql://{}", &rest[..i]),
                    None => format!("mysql://{rest}"),
                };
                Database::MySql(server)
            }
            _ => Database::Sqlite,
        }
    }
}

/// Starts the service on `database` and the given Redis under a fresh key prefix; `adjust`
/// tweaks the configuration (e.g. turning the L1 off).
pub async fn start_on(
    redis_url: &str,
    database: &Database,
    adjust: impl FnOnce(&mut Config),
) -> anyhow::Result<BenchServer> {
    let dir = tempfile::tempdir()?;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let prefix = format!("bench:{run}:");
    let (database_url, mysql) = match database {
        Database::Sqlite => (format!("sqlite://{}/hmdp.db", dir.path().display()), None),
        Database::MySql(server) => {
            let name = format!("hmdp_bench_{}", &run[..16]);
            (
                format!("{server}/{name}"),
                Some((server.clone(), name.clone())),
            )
        }
    };
    let admin_token = uuid::Uuid::new_v4().simple().to_string();
    let mut config = Config {
        listen: "127.0.0.1:0".parse()?,
        database_url,
        redis_url: Some(redis_url.to_owned()),
        redis_managed: hmdp::config::ManagedMode::Never,
        redis_prefix: prefix.clone(),
        admin_token: Some(Secret::new(admin_token.clone())),
        data_dir: dir.path().to_owned(),
        // One client address and a few users send thousands of requests a second over up to
        // 10,000 connections (`conns`): the abuse limits would measure themselves
        // (docs/configuration.md: "off for benchmarks").
        rate_limit_ip: 0,
        rate_limit_user: 0,
        max_connections: 0,
        max_connections_per_ip: 0,
        ..Config::default()
    };
    config.code.ip_per_min = 0;
    // Every login of the login scenario is a new phone's code.
    config.sms.hourly_limit = 0;
    adjust(&mut config);
    let sms = Arc::new(CapturingSms::default());
    let app = Application::build_with(config, Dependencies { sms: sms.clone() }).await?;
    let addr = app.local_addr();
    let state = app.state().clone();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = rx.await;
    }));
    Ok(BenchServer {
        addr,
        state,
        prefix,
        sms,
        admin_token,
        redis_url: redis_url.to_owned(),
        mysql,
        shutdown: Some(tx),
        server: Some(server),
        _dir: dir,
    })
}

/// Starts the service on a SQLite file in a temporary folder.
pub async fn start(
    redis_url: &str,
    adjust: impl FnOnce(&mut Config),
) -> anyhow::Result<BenchServer> {
    start_on(redis_url, &Database::Sqlite, adjust).await
}

impl BenchServer {
    /// Stops the server and waits until it has finished (the order worker's current batch
    /// included), so the clean-up in `drop` does not race it.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(s) = self.server.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(15), s).await;
        }
        self.state.db.close().await;
    }
}

impl Drop for BenchServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let (url, prefix) = (self.redis_url.clone(), self.prefix.clone());
        let mysql = self.mysql.take();
        let _ = std::thread::spawn(move || -> anyhow::Result<()> {
            let mut conn = redis::Client::open(url)?.get_connection()?;
            for pattern in [format!("{prefix}*"), format!("{{{prefix}*")] {
                let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query(&mut conn)?;
                for chunk in keys.chunks(1000) {
                    let _: () = redis::cmd("DEL").arg(chunk).query(&mut conn)?;
                }
            }
            if let Some((server, name)) = mysql {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?
                    .block_on(async {
                        let mut c = sqlx::MySqlConnection::connect(&server).await?;
                        c.execute(format!("DROP DATABASE IF EXISTS `{name}`").as_str())
                            .await?;
                        anyhow::Ok(())
                    })?;
            }
            Ok(())
        })
        .join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_flag() {
        assert!(matches!(Database::from_flag(None), Database::Sqlite));
        assert!(matches!(
            Database::from_flag(Some("sqlite://x.db")),
            Database::Sqlite
        ));
        match Database::from_flag(Some("mysql://root@127.0.0.1:3306/whatever")) {
            Database::MySql(s) => assert_eq!(s, "mysql://root@127.0.0.1:3306"),
            d => panic!("{d:?}"),
        }
        match Database::from_flag(Some("mariadb://root@127.0.0.1:3306")) {
            Database::MySql(s) => assert_eq!(s, "mysql://root@127.0.0.1:3306"),
            d => panic!("{d:?}"),
        }
    }
}
