//! A private `redis-server` child for the embedded defaults.
//!
//! When no Redis answers at the default URL (and `HMDP_REDIS_URL` is unset), `hmdp` starts one
//! itself: loopback only, a free port, data under `$HMDP_DATA_DIR/redis` with AOF on (so
//! accepted orders survive a restart; `HMDP_REDIS_APPENDFSYNC` decides how often the AOF is
//! flushed, see [`AppendFsync`]), and stops it on exit.
//!
//! Loopback is not private: every local user can reach it, and whoever can write
//! `login:token:…` can forge a session. So the server needs a password (`requirepass`, handed
//! over in a mode-600 config file, never on the command line where `ps` shows it), its folder is
//! mode 700 and it runs with umask 077, so the AOF and its log are readable by us alone.
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

use crate::{
    config::{AppendFsync, Secret, redact_url},
    secret_files::{make_private_dir, write_private},
};

/// Why a managed Redis could not be started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ManagedRedisError {
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
    #[error("cannot write {path}: {source}")]
    Config {
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
pub(crate) struct ManagedRedis {
    child: Child,
    url: String,
    dir: PathBuf,
}

impl ManagedRedis {
    /// Starts `redis-server` with its files in `dir` (AOF with `appendfsync everysec`) and a
    /// random password, and waits until it answers `PING`.
    #[cfg(test)]
    pub(crate) async fn start(dir: &Path) -> Result<Self, ManagedRedisError> {
        let mut bytes = [0u8; 24];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
        Self::start_with(dir, AppendFsync::Everysec, &Secret::new(hex::encode(bytes))).await
    }

    /// Like [`ManagedRedis::start`], with the AOF flushed as `appendfsync` says and `password`
    /// required of every client (hex or another URL-safe text: it goes into [`Self::url`]).
    pub(crate) async fn start_with(
        dir: &Path,
        appendfsync: AppendFsync,
        password: &Secret,
    ) -> Result<Self, ManagedRedisError> {
        let binary = find_on_path("redis-server").ok_or(ManagedRedisError::NotInstalled)?;
        let prepare = |source| ManagedRedisError::DataDir {
            path: dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(prepare)?;
        let dir = std::fs::canonicalize(dir).map_err(prepare)?;
        make_private_dir(&dir).map_err(prepare)?;
        let config = dir.join("redis.conf");
        write_private(&config, &format!("requirepass {}\n", password.expose())).map_err(
            |source| ManagedRedisError::Config {
                path: config.clone(),
                source,
            },
        )?;
        let port = free_port().map_err(ManagedRedisError::Spawn)?;
        let log = dir.join("redis.log");
        let mut cmd = Command::new(binary);
        // The config file first (the password), then the rest as options.
        cmd.arg(&config)
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(port.to_string())
            .arg("--dir")
            .arg(&dir)
            .arg("--appendonly")
            .arg("yes")
            .arg("--appendfsync")
            .arg(appendfsync.to_string())
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
        #[cfg(unix)]
        // SAFETY: umask and prctl are async-signal-safe and touch no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                // Whatever the server creates (AOF, log) is ours alone.
                libc::umask(0o077);
                // Deliver SIGTERM to the child when the parent thread dies.
                #[cfg(target_os = "linux")]
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(ManagedRedisError::Spawn)?;
        let url = format!("redis://:{}@127.0.0.1:{port}", password.expose());
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
        tracing::debug!(
            url = %redact_url(&me.url),
            dir = %me.dir.display(),
            appendfsync = %appendfsync,
            "started a managed redis-server (AOF on)"
        );
        Ok(me)
    }

    /// The URL to connect to, with the password in it.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Asks the server to shut down (flushing the AOF), then waits for it to exit.
    pub(crate) async fn stop(mut self) {
        tracing::info!(url = %redact_url(&self.url), "stopping the managed redis-server");
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
            let password = Secret::new("0123456789abcdef0123");
            let redis = ManagedRedis::start_with(dir.path(), fsync, &password)
                .await
                .unwrap();
            assert_eq!(config_get(redis.url(), "appendonly").await, "yes");
            assert_eq!(
                config_get(redis.url(), "appendfsync").await,
                fsync.to_string()
            );

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

    /// `path` and everything under it, with their modes.
    fn modes(path: &Path, out: &mut Vec<(PathBuf, u32)>) {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).unwrap();
        out.push((path.to_owned(), meta.permissions().mode() & 0o777));
        if meta.is_dir() {
            for entry in std::fs::read_dir(path).unwrap() {
                modes(&entry.unwrap().path(), out);
            }
        }
    }

    #[tokio::test]
    async fn only_a_client_with_the_password_gets_in_and_the_files_are_ours_alone() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("redis");
        let redis = ManagedRedis::start(&data).await.unwrap();
        let mut conn = redis::Client::open(redis.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query_async(&mut conn)
            .await
            .unwrap();

        // The same server without the password: every command is refused.
        let host = redis.url().rsplit('@').next().unwrap();
        let stranger = redis::Client::open(format!("redis://{host}")).unwrap();
        let mut conn = stranger.get_multiplexed_async_connection().await.unwrap();
        let refused = redis::cmd("HSET")
            .arg("login:token:forged")
            .arg("id")
            .arg("1")
            .query_async::<i64>(&mut conn)
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Some("NOAUTH"), "{refused}");
        assert!(!answers_ping(&format!("redis://{host}"), Duration::from_secs(1)).await);

        let mut files = Vec::new();
        modes(&data, &mut files);
        assert!(
            files.len() >= 5,
            "folder, config, log, AOF folder and files: {files:?}"
        );
        for (path, mode) in &files {
            assert_eq!(mode & 0o077, 0, "{} has mode {mode:o}", path.display());
        }
        redis.stop().await;
    }

    #[tokio::test]
    async fn the_default_flushes_every_second() {
        let dir = tempfile::tempdir().unwrap();
        let redis = ManagedRedis::start(dir.path()).await.unwrap();
        assert_eq!(config_get(redis.url(), "appendfsync").await, "everysec");
        redis.stop().await;
    }
}
