//! The binary with no configuration: comes up healthy, and its managed Redis; signals, the
//! JSON log format and start-up errors; the banner each process's log opens with, and `hmdp
//! config`; the demo data a new database starts with.

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use std::collections::HashSet;

use sqlx::Row;

use crate::{
    both_backends,
    helpers::{
        Backend, Patience, TestApp, free_port, redis_url, remove_keys, spawn_app, unique_prefix,
        wait_until,
    },
};

both_backends!(the_demo_data_fits_the_original_pages);

/// Runs `hmdp` in `dir` with a clean environment plus `extra` variables.
fn start_hmdp(dir: &Path, port: u16, extra: &[(&str, &str)]) -> Child {
    hmdp_command(dir, port, extra).spawn().unwrap()
}

/// The command [`start_hmdp`] runs: stderr goes to `dir/hmdp.log`.
fn hmdp_command(dir: &Path, port: u16, extra: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hmdp"));
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        // The only setting: a free port instead of 8081, which another process may hold.
        .env("HMDP_LISTEN", format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("hmdp.log")).unwrap());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd
}

/// The URL of the managed Redis of the service running in `dir`: the log's banner shows it
/// with the password hidden, which is in `data/redis-password`.
fn managed_redis_url(dir: &Path) -> String {
    let log = std::fs::read_to_string(dir.join("hmdp.log")).unwrap();
    let shown = log
        .lines()
        .find(|l| l.starts_with("  Redis ") && l.contains(", managed (AOF"))
        .and_then(|l| l.split_whitespace().find(|w| w.starts_with("redis://")))
        .map(|w| w.trim_end_matches(','))
        .unwrap_or_else(|| panic!("no managed redis url in the log: {log}"));
    let password = std::fs::read_to_string(dir.join("data/redis-password")).unwrap();
    assert!(
        shown.contains(":***@") && !log.contains(password.trim()),
        "the log hides the password: {log}"
    );
    shown.replace("***", password.trim())
}

async fn config_get(url: &str, name: &str) -> String {
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let (_, value): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(&mut conn)
        .await
        .unwrap();
    value
}

/// Waits for `child` to exit by itself (after a signal); kills it if it has not within 20 s.
async fn wait_exit(child: &mut Child, what: &str) -> std::process::ExitStatus {
    /// Kills the child when the wait for it gives up (a panic), so it does not outlive the test.
    struct KillOnPanic<'a>(&'a mut Child);
    impl Drop for KillOnPanic<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                let _ = self.0.kill();
            }
        }
    }
    let guard = KillOnPanic(child);
    let patience = Patience::new(Duration::from_secs(20)).every(Duration::from_millis(50));
    let what = format!("hmdp stopping after {what}");
    wait_until(patience, &what, async || guard.0.try_wait().unwrap()).await
}

async fn wait_healthy(port: u16, child: &mut Child, dir: &Path) -> serde_json::Value {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let log = || std::fs::read_to_string(dir.join("hmdp.log")).unwrap_or_default();
    let patience = Patience::new(Duration::from_secs(60)).every(Duration::from_millis(100));
    let health = wait_until(patience, "hmdp healthy", async || {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("hmdp exited with {status}: {}", log());
        }
        match client
            .get(format!("http://127.0.0.1:{port}/health"))
            .send()
            .await
        {
            Ok(r) if r.status() == 200 => Ok(r),
            _ => Err(format!("its log:\n{}", log())),
        }
    })
    .await;
    health.json().await.unwrap()
}

async fn terminate(child: &mut Child) -> std::process::ExitStatus {
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    wait_exit(child, "SIGTERM").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_with_no_configuration_comes_up_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // No configuration but a key prefix: with nothing configured the service uses the Redis at
    // the default address, which here is the shared test Redis; the prefix keeps its keys apart
    // from everybody else's there, and lets the test remove them afterwards.
    let prefix = unique_prefix();
    let mut child = start_hmdp(dir.path(), port, &[("HMDP_REDIS_PREFIX", &prefix)]);
    let health = wait_healthy(port, &mut child, dir.path()).await;
    assert_eq!(health["data"]["database"], "ok");
    assert_eq!(health["data"]["redis"], "ok");

    // The embedded defaults: a SQLite file and a private admin token under ./data.
    assert!(dir.path().join("data/hmdp.db").is_file());
    let token_file = dir.path().join("data/admin-token");
    let token = std::fs::read_to_string(&token_file).unwrap();
    assert!(token.trim().len() >= 32);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // Every file of the service is its user's alone (umask 077): the database first of all.
    for file in ["data/hmdp.db", "data/hmdp.db-wal"] {
        let path = dir.path().join(file);
        if path.exists() {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{file} is readable by others: {mode:o}");
        }
    }

    let status = terminate(&mut child).await;
    assert!(status.success(), "graceful exit on SIGTERM, got {status}");
    let log = std::fs::read_to_string(dir.path().join("hmdp.log")).unwrap();
    assert!(log.contains("SIGTERM received"), "{log}");
    remove_keys(&redis_url(), &prefix);

    // The generated token is a credential: the log says where it is, never what it is.
    assert!(
        !log.contains(token.trim()),
        "the admin token is in the log: {log}"
    );
    let token_file = std::fs::canonicalize(&token_file).unwrap();
    assert!(
        log.contains(&format!("admin token  in {}", token_file.display())),
        "the banner names the token's file: {log}"
    );
    // Login codes go to the log on loopback with no configuration, said loudly.
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("HMDP_SMS=log")),
        "{log}"
    );
}

/// Codes in the log on an address others reach: refused in one line unless `HMDP_SMS=log` is
/// set, and then said at start-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_codes_in_the_log_on_a_public_address_need_hmdp_sms_log() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let prefix = unique_prefix();
    let public = format!("0.0.0.0:{port}");
    let settings = [
        ("HMDP_LISTEN", public.as_str()),
        ("HMDP_REDIS_PREFIX", &prefix),
    ];
    let mut child = start_hmdp(dir.path(), port, &settings);
    let status = wait_exit(&mut child, "a refused start").await;
    assert_eq!(status.code(), Some(1));
    let log = std::fs::read_to_string(dir.path().join("hmdp.log")).unwrap();
    let refusals: Vec<&str> = log.lines().filter(|l| l.contains("HMDP_SMS")).collect();
    assert_eq!(refusals.len(), 1, "{log}");
    assert!(
        refusals[0].contains("ERROR") && refusals[0].contains(&public),
        "{log}"
    );

    let mut child = start_hmdp(
        dir.path(),
        port,
        &[settings[0], settings[1], ("HMDP_SMS", "log")],
    );
    wait_healthy(port, &mut child, dir.path()).await;
    assert!(terminate(&mut child).await.success());
    remove_keys(&redis_url(), &prefix);
    let log = std::fs::read_to_string(dir.path().join("hmdp.log")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("HMDP_SMS=log: login codes")),
        "{log}"
    );
}

/// `POST /user/code?phone=…` puts a phone in the URI; the request log shows it masked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_log_masks_phones() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let prefix = unique_prefix();
    let mut child = start_hmdp(
        dir.path(),
        port,
        &[
            ("HMDP_REDIS_PREFIX", &prefix),
            // Every request's completion, with its span.
            ("HMDP_LOG", "info,tower_http=debug"),
        ],
    );
    wait_healthy(port, &mut child, dir.path()).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    for path in ["/user/code", "/api/user/code"] {
        let r = client
            .post(format!("http://127.0.0.1:{port}{path}?phone=13812345678"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), if path == "/user/code" { 200 } else { 429 });
    }
    assert!(terminate(&mut child).await.success());
    remove_keys(&redis_url(), &prefix);
    let log = std::fs::read_to_string(dir.path().join("hmdp.log")).unwrap();
    let uris: Vec<&str> = log
        .split("uri=")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    let code_uris: Vec<&&str> = uris.iter().filter(|u| u.contains("/user/code")).collect();
    assert!(code_uris.len() >= 2, "{log}");
    for uri in &code_uris {
        assert!(uri.ends_with("?phone=138****5678"), "{uri} in {log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_managed_redis_is_started_and_stopped_with_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = start_hmdp(dir.path(), port, &[("HMDP_REDIS_MANAGED", "always")]);
    wait_healthy(port, &mut child, dir.path()).await;

    let url = managed_redis_url(dir.path());
    assert!(
        hmdp::testing::kv::answers_ping(&url, Duration::from_secs(1)).await,
        "{url}"
    );
    // AOF is on, under the data directory, flushed every second by default.
    assert_eq!(config_get(&url, "appendonly").await, "yes");
    assert_eq!(config_get(&url, "appendfsync").await, "everysec");
    let redis_dir = dir.path().join("data/redis");
    let aof_exists = std::fs::read_dir(&redis_dir).unwrap().any(|e| {
        e.unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("appendonly")
    });
    assert!(aof_exists, "no AOF in {}", redis_dir.display());

    assert!(terminate(&mut child).await.success());
    assert!(
        !hmdp::testing::kv::answers_ping(&url, Duration::from_millis(500)).await,
        "the managed redis-server must stop with the service"
    );
}

/// Loopback is not private: every local user reaches the managed Redis. Without its password
/// (mode 600, beside the admin token) nobody gets in to forge a session, and its files are
/// readable by the service's user alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_managed_redis_needs_its_password_and_keeps_its_files_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = start_hmdp(dir.path(), port, &[("HMDP_REDIS_MANAGED", "always")]);
    wait_healthy(port, &mut child, dir.path()).await;
    let url = managed_redis_url(dir.path());
    assert!(hmdp::testing::kv::answers_ping(&url, Duration::from_secs(1)).await);

    // A local user who knows the port, not the password.
    let host = url.rsplit('@').next().unwrap();
    let mut stranger = redis::Client::open(format!("redis://{host}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let refused = redis::cmd("HSET")
        .arg("login:token:forged")
        .arg("id")
        .arg(1)
        .query_async::<i64>(&mut stranger)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("NOAUTH"), "{refused}");

    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let data = dir.path().join("data");
    assert_eq!(mode(&data.join("redis-password")), 0o600);
    let redis_dir = data.join("redis");
    assert_eq!(mode(&redis_dir), 0o700);
    let mut files = 0;
    let mut pending = vec![redis_dir];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            assert_eq!(
                mode(&path) & 0o077,
                0,
                "{} is open to others",
                path.display()
            );
            if path.is_dir() {
                pending.push(path);
            }
            files += 1;
        }
    }
    assert!(
        files >= 4,
        "config, log, the AOF folder and its files: {files}"
    );
    assert!(terminate(&mut child).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_runs_the_migrations_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hmdp"))
        .arg("migrate")
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("data/hmdp.db").is_file());
}

/// Runs `hmdp` to its end in an empty folder with nothing but `env` set: its exit code and what
/// it wrote to stderr.
fn run_to_the_end(env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hmdp"))
        .current_dir(dir.path())
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_configuration_is_one_clear_line() {
    let (code, err) = run_to_the_end(&[("HMDP_LISTEN", "not-an-address")]);
    assert_eq!(code, Some(2));
    assert!(err.contains("HMDP_LISTEN"), "{err}");
}

/// Behind a proxy the listen address is loopback, yet the clients are public: the login codes'
/// destination must be chosen, or nothing starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_an_unset_sms_setting_stops_the_start() {
    let listen = format!("127.0.0.1:{}", free_port());
    // Were the configuration accepted, the start would end at once for want of a Redis.
    let (code, err) = run_to_the_end(&[
        ("PATH", ""),
        ("HMDP_REDIS_MANAGED", "always"),
        ("HMDP_LISTEN", &listen),
        ("HMDP_TRUSTED_PROXIES", "127.0.0.1/32"),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("HMDP_SMS"), "{err}");
    assert!(err.contains("HMDP_TRUSTED_PROXIES"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_server_installed_the_error_says_how_to_fix_it() {
    let listen = format!("127.0.0.1:{}", free_port());
    // An empty PATH: no redis-server to be found.
    let (code, err) = run_to_the_end(&[
        ("PATH", ""),
        ("HMDP_REDIS_MANAGED", "always"),
        ("HMDP_LISTEN", &listen),
    ]);
    assert_eq!(code, Some(1));
    let last = err.lines().last().unwrap_or_default();
    assert!(last.contains("apt-get install redis-server"), "{err}");
    assert!(last.contains("HMDP_REDIS_URL"), "{err}");
    // Said once, not once by the log and again on stderr.
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("redis-server was not found"))
            .count(),
        1,
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_managed_redis_flushes_its_aof_as_configured() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = start_hmdp(
        dir.path(),
        port,
        &[
            ("HMDP_REDIS_MANAGED", "always"),
            ("HMDP_REDIS_APPENDFSYNC", "always"),
        ],
    );
    wait_healthy(port, &mut child, dir.path()).await;
    let log = std::fs::read_to_string(dir.path().join("hmdp.log")).unwrap();
    assert!(log.contains(", managed (AOF, appendfsync always)"), "{log}");
    let url = managed_redis_url(dir.path());
    assert_eq!(config_get(&url, "appendfsync").await, "always");
    assert!(terminate(&mut child).await.success());
}

/// Ctrl-C in a terminal signals the whole foreground process group. The managed Redis must not
/// hear it: `hmdp` drains, lets the worker finish, and only then stops Redis itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_to_the_process_group_drains_before_the_managed_redis_stops() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut cmd = hmdp_command(
        dir.path(),
        port,
        &[
            ("HMDP_REDIS_MANAGED", "always"),
            ("HMDP_ADMIN_TOKEN", "embedded-test-admin-token"),
        ],
    );
    // Like a shell job: `hmdp` leads a process group of its own (so the signal below does
    // not reach the test runner), and the Ctrl-C goes to the whole group.
    cmd.process_group(0);
    let mut child = cmd.spawn().unwrap();
    wait_healthy(port, &mut child, dir.path()).await;
    let url = managed_redis_url(dir.path());

    // SAFETY: kill(2) with a negative pid signals the process group our child leads.
    unsafe {
        libc::kill(-(child.id() as i32), libc::SIGINT);
    }
    let status = wait_exit(&mut child, "SIGINT").await;
    let log = std::fs::read_to_string(dir.path().join("hmdp.log")).unwrap();
    assert!(
        status.success(),
        "graceful exit on SIGINT, got {status}: {log}"
    );
    assert!(
        !hmdp::testing::kv::answers_ping(&url, Duration::from_millis(500)).await,
        "the managed redis-server stops with the service"
    );
    let position = |what: &str| {
        log.find(what)
            .unwrap_or_else(|| panic!("{what:?} not in the log: {log}"))
    };
    assert!(
        position("SIGINT received") < position("finishing the order worker's current batch")
            && position("finishing the order worker's current batch")
                < position("stopping the managed redis-server"),
        "drain first, Redis last: {log}"
    );
    // Nothing failed on the way down while Redis was still needed (the worker's last
    // acknowledgements). Then hmdp stops Redis (its L1 subscription may complain after that).
    let before_redis_stops =
        &log[position("SIGINT received")..position("stopping the managed redis-server")];
    let complaints: Vec<&str> = before_redis_stops
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    assert!(complaints.is_empty(), "{complaints:#?}");
    // Redis itself was asked to shut down by hmdp; it never saw the signal.
    let redis_log = std::fs::read_to_string(dir.path().join("data/redis/redis.log")).unwrap();
    assert!(
        redis_log.contains("User requested shutdown") && !redis_log.contains("Received SIG"),
        "{redis_log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_log_format_writes_one_json_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let prefix = unique_prefix();
    let url = redis_url();
    let mut child = start_hmdp(
        dir.path(),
        port,
        &[
            ("HMDP_LOG_FORMAT", "json"),
            ("HMDP_REDIS_URL", &url),
            ("HMDP_REDIS_PREFIX", &prefix),
            ("HMDP_ADMIN_TOKEN", "embedded-test-admin-token"),
        ],
    );
    wait_healthy(port, &mut child, dir.path()).await;
    assert!(terminate(&mut child).await.success());
    remove_keys(&redis_url(), &prefix);

    let log = std::fs::read_to_string(dir.path().join("hmdp.log")).unwrap();
    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}")))
        .collect();
    let listening = events
        .iter()
        .find(|e| e["fields"]["message"] == "hmdp listening")
        .unwrap_or_else(|| panic!("no 'hmdp listening' event: {log}"));
    assert_eq!(listening["level"], "INFO");
    assert!(listening["timestamp"].is_string(), "{listening}");
    assert_eq!(
        listening["fields"]["addr"],
        format!("127.0.0.1:{port}"),
        "{listening}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["fields"]["message"] == "SIGTERM received; shutting down"),
        "{log}"
    );
}

/// The banner `log` opens with: its first line and the indented ones after it, each under 100
/// characters.
fn banner_of(log: &str) -> Vec<&str> {
    let mut lines = log.lines();
    let first = lines.next().unwrap_or_else(|| panic!("an empty log"));
    let banner: Vec<&str> = std::iter::once(first)
        .chain(lines.take_while(|l| l.starts_with("  ")))
        .collect();
    for line in &banner {
        assert!(
            line.chars().count() < 100,
            "a banner line of 100 or more: {line:?}"
        );
    }
    banner
}

/// The text of the banner's line `label`.
fn fact<'a>(banner: &[&'a str], label: &str) -> Option<&'a str> {
    let start = format!("  {label:<12} ");
    banner.iter().find_map(|l| l.strip_prefix(start.as_str()))
}

/// Whether the shared test Redis writes an append-only file.
async fn test_redis_has_aof() -> bool {
    config_get(&redis_url(), "appendonly").await == "yes"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_opens_with_a_short_banner() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let prefix = unique_prefix();
    let url = redis_url();
    let settings = [
        ("HMDP_REDIS_URL", url.as_str()),
        ("HMDP_REDIS_PREFIX", &prefix),
    ];
    let mut child = start_hmdp(dir.path(), port, &settings);
    wait_healthy(port, &mut child, dir.path()).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let log = std::fs::read_to_string(dir.path().join("hmdp.log")).unwrap();
    let banner = banner_of(&log);
    assert!(
        banner[0].contains(" INFO ") && banner[0].ends_with(" serving"),
        "{log}"
    );
    let listening = fact(&banner, "listening").unwrap_or_else(|| panic!("{log}"));
    assert!(
        listening.starts_with(&format!("http://127.0.0.1:{port} ")),
        "{log}"
    );
    let ui = fact(&banner, "web UI").unwrap_or_else(|| panic!("{log}"));
    let page = client.get(ui).send().await.unwrap();
    assert_eq!(page.status(), 200, "the UI at {ui}");
    assert!(terminate(&mut child).await.success());
    remove_keys(&redis_url(), &prefix);

    let data = std::fs::canonicalize(dir.path().join("data")).unwrap();
    let token = fact(&banner, "admin token").unwrap_or_else(|| panic!("{log}"));
    assert!(
        token.starts_with(&format!("in {}", data.join("admin-token").display())),
        "{log}"
    );
    let codes = fact(&banner, "login codes").unwrap_or_else(|| panic!("{log}"));
    assert!(codes.contains("this log"), "{log}");
    let database = fact(&banner, "database").unwrap_or_else(|| panic!("{log}"));
    assert!(
        database.starts_with(&format!("SQLite file {}", data.join("hmdp.db").display())),
        "{log}"
    );
    assert_eq!(fact(&banner, "Redis"), Some(url.as_str()), "{log}");
    assert_eq!(
        fact(&banner, "not durable").is_some(),
        !test_redis_has_aof().await,
        "{log}"
    );
    assert!(fact(&banner, "settings").is_some_and(|s| s.ends_with("hmdp config")));
    assert!(!log.contains("effective configuration"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_process_log_opens_with_a_short_banner() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let prefix = unique_prefix();
    let url = redis_url();
    let listen = format!("127.0.0.1:{port}");
    let mut cmd = hmdp_command(
        dir.path(),
        free_port(),
        &[
            ("HMDP_REDIS_URL", &url),
            ("HMDP_REDIS_PREFIX", &prefix),
            ("HMDP_WORKER_LISTEN", &listen),
        ],
    );
    let mut child = cmd.arg("worker").spawn().unwrap();
    wait_healthy(port, &mut child, dir.path()).await;
    assert!(terminate(&mut child).await.success());
    remove_keys(&redis_url(), &prefix);

    let log = std::fs::read_to_string(dir.path().join("hmdp.log")).unwrap();
    let banner = banner_of(&log);
    assert!(
        banner[0].contains(" INFO ") && banner[0].ends_with(" worker"),
        "{log}"
    );
    assert!(fact(&banner, "orders").is_some(), "{log}");
    assert_eq!(
        fact(&banner, "metrics"),
        Some(format!("http://{listen}/metrics and /health").as_str()),
        "{log}"
    );
    let data = std::fs::canonicalize(dir.path().join("data")).unwrap();
    let database = fact(&banner, "database").unwrap_or_else(|| panic!("{log}"));
    assert!(
        database.starts_with(&format!("SQLite file {}", data.join("hmdp.db").display())),
        "{log}"
    );
    assert_eq!(fact(&banner, "Redis"), Some(url.as_str()), "{log}");
    assert_eq!(
        fact(&banner, "not durable").is_some(),
        !test_redis_has_aof().await,
        "{log}"
    );
}

/// `hmdp config`: a line a setting, `VARIABLE  source  value`.
#[test]
fn hmdp_config_lists_every_setting_with_its_source() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hmdp.toml"),
        "redis_prefix = \"from-the-file:\"\nseckill_shards = 4\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hmdp"))
        .args(["--config", "hmdp.toml", "config"])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HMDP_SECKILL_SHARDS", "8")
        .env(
            "HMDP_DATABASE_URL",
            "mysql://root:hunter2-db@db.example/hmdp",
        )
        .env("HMDP_ADMIN_TOKEN", "the-admin-token-of-the-environment")
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = |var: &str| -> (String, String) {
        let line = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(var))
            .unwrap_or_else(|| panic!("no {var} in {stdout}"));
        let mut words = line.split_whitespace().skip(1);
        let source = words.next().unwrap_or_default().to_owned();
        (source, words.collect::<Vec<_>>().join(" "))
    };
    let pair = |source: &str, value: &str| (source.to_owned(), value.to_owned());
    assert_eq!(listed("HMDP_SECKILL_SHARDS"), pair("environment", "8"));
    assert_eq!(listed("HMDP_REDIS_PREFIX"), pair("file", "from-the-file:"));
    assert_eq!(listed("HMDP_LISTEN"), pair("default", "127.0.0.1:8081"));
    assert_eq!(
        listed("HMDP_DATABASE_URL"),
        pair("environment", "mysql://root:***@db.example/hmdp")
    );
    assert_eq!(listed("HMDP_ADMIN_TOKEN"), pair("environment", "***"));
    assert!(
        !stdout.contains("hunter2") && !stdout.contains("the-admin-token"),
        "{stdout}"
    );
    let settings = hmdp::Config::markdown_table()
        .lines()
        .filter(|l| l.starts_with("| `HMDP_"))
        .count();
    assert_eq!(
        stdout.lines().count(),
        settings,
        "one line a setting: {stdout}"
    );
}

/// Rows of `sql` as strings, on either back end (the query casts its columns to CHAR).
async fn rows(app: &TestApp, sql: &str) -> Vec<Vec<String>> {
    hmdp::on_pool!(&app.state.db, pool => {
        sqlx::query(sql)
            .fetch_all(pool)
            .await
            .unwrap()
            .iter()
            .map(|r| (0..r.len()).map(|i| r.try_get::<String, _>(i).unwrap()).collect())
            .collect()
    })
}

/// A GET of one of our images: 200 with an image content type.
async fn assert_image(app: &TestApp, path: &str) {
    let r = app.client.get(app.url(path)).send().await.unwrap();
    assert_eq!(r.status(), 200, "{path}");
    let kind = r.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(kind.starts_with("image/"), "{path}: {kind}");
    assert!(!r.bytes().await.unwrap().is_empty(), "{path}");
}

/// What the original pages ask for finds the demo data: shops of every type within 5 km of the
/// position `shop-list.html` always sends, type icons at `'/imgs/' + icon`, notes with their
/// photos and authors, and follows.
async fn the_demo_data_fits_the_original_pages(backend: Backend) {
    let app = spawn_app(backend).await;
    let (x, y) = (120.149993, 30.334229);

    let types = app.get("/api/shop-type/list", None).await.body["data"].clone();
    let types = types.as_array().unwrap();
    assert!(types.len() >= 6, "{types:?}");
    let mut nearby = HashSet::new();
    for t in types {
        let icon = t["icon"].as_str().unwrap();
        assert!(
            icon.starts_with("/types/") && icon.ends_with(".png"),
            "the original's icon paths: {icon}"
        );
        assert_image(&app, &format!("/imgs{icon}")).await;
        // Every type has shops near the page's position, nearest first, all within 5 km.
        let mut last = 0.0;
        for page in 1.. {
            let r = app
                .get(
                    &format!(
                        "/api/shop/of/type?typeId={}&current={page}&x={x}&y={y}",
                        t["id"]
                    ),
                    None,
                )
                .await;
            let shops = r.body["data"].as_array().unwrap().clone();
            if shops.is_empty() {
                assert!(
                    page > 1,
                    "no shop of type {} near the page: {r:?}",
                    t["name"]
                );
                break;
            }
            for s in &shops {
                let d = s["distance"].as_f64().unwrap();
                assert!(d >= last && d <= 5000.0, "{s}");
                last = d;
                nearby.insert(s["id"].as_i64().unwrap());
                for img in s["images"].as_str().unwrap_or("").split(',') {
                    if !img.is_empty() {
                        assert_image(&app, img).await;
                    }
                }
            }
        }
    }
    // Food fills more than one page of five.
    let food = app
        .get(
            &format!("/api/shop/of/type?typeId=1&current=2&x={x}&y={y}"),
            None,
        )
        .await;
    assert!(
        !food.body["data"].as_array().unwrap().is_empty(),
        "{food:?}"
    );

    // Notes by demo users about shops the pages find, with photos and avatars we serve.
    let notes = rows(
        &app,
        "SELECT CAST(b.id AS CHAR), CAST(b.shop_id AS CHAR), CAST(b.user_id AS CHAR), b.title, \
         b.images, CAST(b.liked AS CHAR), u.nick_name, u.icon \
         FROM tb_blog b JOIN tb_user u ON u.id = b.user_id ORDER BY b.liked DESC",
    )
    .await;
    assert!(notes.len() >= 6, "{notes:?}");
    for n in &notes {
        assert!(nearby.contains(&n[1].parse().unwrap()), "note {n:?}");
        assert!(!n[3].is_empty() && !n[6].is_empty(), "{n:?}");
        for img in n[4].split(',') {
            assert!(img.starts_with("/imgs/demo/"), "{n:?}");
            assert_image(&app, img).await;
        }
        assert_image(&app, &n[7]).await;
    }
    assert!(
        notes[0][5].parse::<i64>().unwrap() > 0,
        "the hot list has an order"
    );
    let authors: HashSet<&str> = notes.iter().map(|n| n[2].as_str()).collect();
    assert!(authors.len() >= 3, "{authors:?}");

    // Everyone follows someone and has a fan; one row per pair.
    let follows = rows(
        &app,
        "SELECT CAST(user_id AS CHAR), CAST(follow_user_id AS CHAR) FROM tb_follow",
    )
    .await;
    let pairs: HashSet<(String, String)> = follows
        .iter()
        .map(|f| (f[0].clone(), f[1].clone()))
        .collect();
    assert_eq!(pairs.len(), follows.len());
    let users = rows(&app, "SELECT CAST(id AS CHAR), phone FROM tb_user").await;
    for u in &users {
        assert!(
            follows.iter().any(|f| f[0] == u[0]),
            "{u:?} follows someone"
        );
        assert!(follows.iter().any(|f| f[1] == u[0]), "{u:?} has a fan");
    }
    // A demo user logs in with its phone and is who the notes say.
    let (id, phone) = (&users[0][0], &users[0][1]);
    let token = app.login(phone).await;
    let me = app.get("/api/user/me", Some(&token)).await;
    assert_eq!(me.body["data"]["id"].to_string(), *id, "{me:?}");
    assert!(
        me.body["data"]["icon"]
            .as_str()
            .unwrap()
            .starts_with("/imgs/demo/")
    );
}
