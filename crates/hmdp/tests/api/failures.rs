//! Redis going away mid-flight: clear 503s, nothing wrongly reported as "log in again",
//! recovery when it returns.

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::helpers::{Backend, free_port, spawn_app_with};

/// A private redis-server on `port`, killed on drop.
struct RedisProcess(Child);

impl RedisProcess {
    async fn start(port: u16) -> Self {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        let url = format!("redis://127.0.0.1:{port}");
        let started = Instant::now();
        while !hmdp::kv::managed::answers_ping(&url, Duration::from_millis(200)).await {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis did not start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self(child)
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_going_away_answers_503_and_recovers() {
    let port = free_port();
    let redis = RedisProcess::start(port).await;
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.redis_url = Some(format!("redis://127.0.0.1:{port}"));
    })
    .await;
    let token = app.login("13812345678").await;
    assert!(app.get("/api/user/me", Some(&token)).await.success());

    drop(redis);

    // A logged-in user is told to retry, not to log in again.
    let r = app.get("/api/user/me", Some(&token)).await;
    assert_eq!((r.status, r.code()), (503, "unavailable"), "{r:?}");
    let r = app.send_code("13912345678").await;
    assert_eq!((r.status, r.code()), (503, "unavailable"), "{r:?}");
    assert!(
        !r.msg().contains("127.0.0.1"),
        "no internals in the message: {r:?}"
    );
    let h = app.get("/health", None).await;
    assert_eq!(h.status, 503);
    assert_eq!(h.body["data"]["redis"], "down");
    assert_eq!(h.body["data"]["database"], "ok");
    // Routes that do not need Redis keep working.
    assert!(app.get("/api/shop/1", None).await.success());

    // Redis comes back (empty: it kept nothing): the service recovers on its own.
    let _redis = RedisProcess::start(port).await;
    let started = Instant::now();
    loop {
        if app.get("/health", None).await.status == 200 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(15), "no recovery");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(app.get("/api/user/me", Some(&token)).await.status, 401);
    let token = app.login("13812345678").await;
    assert!(app.get("/api/user/me", Some(&token)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_means_a_fast_timeout_in_the_envelope() {
    let port = free_port();
    let redis = RedisProcess::start(port).await;
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.redis_url = Some(format!("redis://127.0.0.1:{port}"));
        c.request_timeout = Duration::from_millis(300);
    })
    .await;
    let pid = redis.0.id() as i32;
    // SAFETY: signals to our own child process.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let started = Instant::now();
    let r = app.send_code("13812345678").await;
    let waited = started.elapsed();
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!((r.status, r.code()), (503, "timeout"), "{r:?}");
    assert!(waited < Duration::from_secs(2), "answered after {waited:?}");
    // Once Redis wakes up the service answers normally again.
    let started = Instant::now();
    while !app.get("/health", None).await.success() {
        assert!(started.elapsed() < Duration::from_secs(10), "no recovery");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
