//! The binary with no configuration: comes up healthy, and its managed Redis.

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::helpers::free_port;

/// Runs `hmdp` in `dir` with a clean environment plus `extra` variables.
fn start_hmdp(dir: &Path, port: u16, extra: &[(&str, &str)]) -> Child {
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
    cmd.spawn().unwrap()
}

async fn wait_healthy(port: u16, child: &mut Child, dir: &Path) -> serde_json::Value {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let started = Instant::now();
    loop {
        if let Ok(r) = client
            .get(format!("http://127.0.0.1:{port}/health"))
            .send()
            .await
            && r.status() == 200
        {
            return r.json().await.unwrap();
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "hmdp exited with {status}: {}",
                std::fs::read_to_string(dir.join("hmdp.log")).unwrap_or_default()
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not healthy after 60 s: {}",
            std::fs::read_to_string(dir.join("hmdp.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let started = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("hmdp did not stop within 20 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_with_no_configuration_comes_up_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = start_hmdp(dir.path(), port, &[]);
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

    let status = terminate(&mut child);
    assert!(status.success(), "graceful exit on SIGTERM, got {status}");
    let log = std::fs::read_to_string(dir.path().join("hmdp.log")).unwrap();
    assert!(log.contains("SIGTERM received"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_managed_redis_is_started_and_stopped_with_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = start_hmdp(dir.path(), port, &[("HMDP_REDIS_MANAGED", "always")]);
    wait_healthy(port, &mut child, dir.path()).await;

    let log = std::fs::read_to_string(dir.path().join("hmdp.log")).unwrap();
    let url = log
        .split("started a managed redis-server")
        .nth(1)
        .and_then(|rest| rest.split("url=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no managed redis url in the log: {log}"))
        .to_owned();
    assert!(
        hmdp::kv::managed::answers_ping(&url, Duration::from_secs(1)).await,
        "{url}"
    );
    // AOF is on, under the data directory.
    let redis_dir = dir.path().join("data/redis");
    let aof_exists = std::fs::read_dir(&redis_dir).unwrap().any(|e| {
        e.unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("appendonly")
    });
    assert!(aof_exists, "no AOF in {}", redis_dir.display());

    assert!(terminate(&mut child).success());
    assert!(
        !hmdp::kv::managed::answers_ping(&url, Duration::from_millis(500)).await,
        "the managed redis-server must stop with the service"
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_configuration_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hmdp"))
        .current_dir(dir.path())
        .env_clear()
        .env("HMDP_LISTEN", "not-an-address")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("HMDP_LISTEN"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_server_installed_the_error_says_how_to_fix_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hmdp"))
        .current_dir(dir.path())
        .env_clear()
        // An empty PATH: no redis-server to be found.
        .env("PATH", "")
        .env("HMDP_REDIS_MANAGED", "always")
        .env("HMDP_LISTEN", format!("127.0.0.1:{}", free_port()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(last.contains("apt-get install redis-server"), "{err}");
    assert!(last.contains("HMDP_REDIS_URL"), "{err}");
}
