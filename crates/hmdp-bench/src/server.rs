//! Starting the service in-process for a benchmark, on embedded defaults.

use std::net::SocketAddr;

use hmdp::{Application, Config, config::Secret, http::AppState};

/// A running in-process server; stopped (and its keys deleted) on drop.
pub struct BenchServer {
    pub addr: SocketAddr,
    pub state: AppState,
    pub prefix: String,
    redis_url: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

/// Starts the service on a SQLite file in a temporary folder and the given Redis under a fresh
/// key prefix; `adjust` tweaks the configuration (e.g. turning the L1 off).
pub async fn start(
    redis_url: &str,
    adjust: impl FnOnce(&mut Config),
) -> anyhow::Result<BenchServer> {
    let dir = tempfile::tempdir()?;
    let prefix = format!("bench:{}:", uuid::Uuid::new_v4().simple());
    let mut config = Config {
        listen: "127.0.0.1:0".parse()?,
        database_url: format!("sqlite://{}/hmdp.db", dir.path().display()),
        redis_url: Some(redis_url.to_owned()),
        redis_managed: hmdp::config::ManagedRedis::Never,
        redis_prefix: prefix.clone(),
        admin_token: Some(Secret::new(uuid::Uuid::new_v4().simple().to_string())),
        data_dir: dir.path().to_owned(),
        ..Config::default()
    };
    adjust(&mut config);
    let app = Application::build(config).await?;
    let addr = app.local_addr();
    let state = app.state().clone();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(app.run_until(async {
        let _ = rx.await;
    }));
    Ok(BenchServer {
        addr,
        state,
        prefix,
        redis_url: redis_url.to_owned(),
        shutdown: Some(tx),
        _dir: dir,
    })
}

impl Drop for BenchServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let (url, prefix) = (self.redis_url.clone(), self.prefix.clone());
        let _ = std::thread::spawn(move || -> redis::RedisResult<()> {
            let mut conn = redis::Client::open(url)?.get_connection()?;
            for pattern in [format!("{prefix}*"), format!("{{{prefix}*")] {
                let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query(&mut conn)?;
                for chunk in keys.chunks(1000) {
                    let _: () = redis::cmd("DEL").arg(chunk).query(&mut conn)?;
                }
            }
            Ok(())
        })
        .join();
    }
}
