//! A private `redis-server` child for the embedded defaults.
//!
//! When no Redis answers at the default URL (and `HMDP_REDIS_URL` is unset), `hmdp` starts one
//! itself: loopback only, a free port, data under `$HMDP_DATA_DIR/redis` with AOF on (so
//! accepted orders survive a restart; `HMDP_REDIS_APPENDFSYNC` decides how often the AOF is
//! flushed, see [`AppendFsync`]), and stops it on exit.
//!
//! The child runs in its own process group. Ctrl-C in a terminal sends `SIGINT` to the whole
//! foreground process group; if `redis-server` were in ours it would shut down at once, while
//! `hmdp` is still draining requests and the order worker still has to acknowledge its last
//! batch. In its own group it hears only `hmdp`, which stops it last ([`ManagedRedis::stop`]).
//! On Linux the child also gets `SIGTERM` if `hmdp` dies without cleaning up (a crash, `kill
//! -9`), so it never outlives its parent.

use std::{
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use tokio::process::{Child, Command};

use crate::config::AppendFsync;

/// Why a managed Redis could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ManagedRedisError {
    #[error(
        "redis-server was not found on PATH: install it (Debian/Ubuntu: `apt-get install redis-server`) \
         or point HMDP_REDIS_URL at a running Redis"
    )]
    NotInstalled,
    #[error("cannot prepare {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start redis-server: {0}")]
    Spawn(std::io::Error),
    #[error("redis-server did not answer within {0:?}; see {1}")]
    NotReady(Duration, PathBuf),
}

/// A running child `redis-server`. Stop it with [`ManagedRedis::stop`]; dropping it kills it.
#[derive(Debug)]
pub struct ManagedRedis {
    child: Child,
    url: String,
    dir: PathBuf,
}

impl ManagedRedis {
    /// Starts `redis-server` with its files in `dir` (AOF with `appendfsync everysec`) and waits
    /// until it answers `PING`.
    pub async fn start(dir: &Path) -> Result<Self, ManagedRedisError> {
        Self::start_with(dir, AppendFsync::Everysec).await
    }

    /// Like [`ManagedRedis::start`], with the AOF flushed as `appendfsync` says.
    pub async fn start_with(
        dir: &Path,
        appendfsync: AppendFsync,
    ) -> Result<Self, ManagedRedisError> {
        let binary = find_on_path("redis-server").ok_or(ManagedRedisError::NotInstalled)?;
        std::fs::create_dir_all(dir).map_err(|source| ManagedRedisError::DataDir {
            path: dir.to_owned(),
            source,
        })?;
        let dir = std::fs::canonicalize(dir).map_err(|source| ManagedRedisError::DataDir {
            path: dir.to_owned(),
            source,
        })?;
        let port = free_port().map_err(ManagedRedisError::Spawn)?;
        let log = dir.join("redis.log");
        let mut cmd = Command::new(binary);
        cmd.arg("--bind")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(port.to_string())
            .arg("--dir")
            .arg(&dir)
            .arg("--appendonly")
            .arg("yes")
            .arg("--appendfsync")
            .arg(appendfsync.as_str())
            .arg("--save")
            .arg("")
            .arg("--daemonize")
            .arg("no")
            .arg("--protected-mode")
            .arg("yes")
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        // Its own process group: a Ctrl-C meant for `hmdp` must not stop Redis under the drain
        // (see the module docs).
        #[cfg(unix)]
        cmd.process_group(0);
        #[cfg(target_os = "linux")]
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                // Deliver SIGTERM to the child when the parent thread dies.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(ManagedRedisError::Spawn)?;
        let url = format!("redis://127.0.0.1:{port}");
        let mut me = Self { child, url, dir };
        let deadline = Duration::from_secs(10);
        let started = Instant::now();
        loop {
            if answers_ping(&me.url, Duration::from_millis(500)).await {
                break;
            }
            if started.elapsed() > deadline || me.child.try_wait().ok().flatten().is_some() {
                let _ = me.child.start_kill();
                return Err(ManagedRedisError::NotReady(deadline, log));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tracing::info!(
            url = %me.url,
            dir = %me.dir.display(),
            appendfsync = %appendfsync.as_str(),
            "started a managed redis-server (AOF on)"
        );
        Ok(me)
    }

    /// The URL to connect to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Asks the server to shut down (flushing the AOF), then waits for it to exit.
    pub async fn stop(mut self) {
        tracing::info!(url = %self.url, "stopping the managed redis-server");
        if let Ok(client) = redis::Client::open(self.url.as_str())
            && let Ok(Ok(mut conn)) = tokio::time::timeout(
                Duration::from_secs(2),
                client.get_multiplexed_async_connection(),
            )
            .await
        {
            // The server closes the connection instead of answering; that is success.
            let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").query_async(&mut conn).await;
        }
        match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(_) => tracing::info!("managed redis-server stopped"),
            Err(_) => {
                tracing::warn!("managed redis-server did not stop in time; killing it");
                let _ = self.child.kill().await;
            }
        }
    }
}

/// True if a Redis server at `url` answers `PING` within `timeout`.
pub async fn answers_ping(url: &str, timeout: Duration) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    let attempt = async {
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .ok()
    };
    matches!(tokio::time::timeout(timeout, attempt).await, Ok(Some(_)))
}

fn free_port() -> std::io::Result<u16> {
    let l = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    Ok(l.local_addr()?.port())
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn config_get(url: &str, name: &str) -> String {
        let client = redis::Client::open(url).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let (_, value): (String, String) = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query_async(&mut conn)
            .await
            .unwrap();
        value
    }

    #[tokio::test]
    async fn the_aof_is_flushed_as_configured_and_the_child_has_its_own_process_group() {
        for fsync in [AppendFsync::Always, AppendFsync::No] {
            let dir = tempfile::tempdir().unwrap();
            let redis = ManagedRedis::start_with(dir.path(), fsync).await.unwrap();
            assert_eq!(config_get(redis.url(), "appendonly").await, "yes");
            assert_eq!(config_get(redis.url(), "appendfsync").await, fsync.as_str());

            // A Ctrl-C to our process group does not reach the child.
            let pid = redis.child.id().expect("running") as libc::pid_t;
            // SAFETY: getpgid only reads the process table.
            let (child_group, our_group) = unsafe { (libc::getpgid(pid), libc::getpgid(0)) };
            assert_eq!(child_group, pid, "the child leads its own group");
            assert_ne!(child_group, our_group);

            let url = redis.url().to_owned();
            redis.stop().await;
            assert!(!answers_ping(&url, Duration::from_millis(300)).await);
        }
    }

    #[tokio::test]
    async fn the_default_flushes_every_second() {
        let dir = tempfile::tempdir().unwrap();
        let redis = ManagedRedis::start(dir.path()).await.unwrap();
        assert_eq!(config_get(redis.url(), "appendfsync").await, "everysec");
        redis.stop().await;
    }
}
