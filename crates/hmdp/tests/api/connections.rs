//! Connections as a resource: caps on open connections (in total and per client address),
//! the open-files limit raised at start, and a limit on the request head.

use std::{
    io,
    os::unix::process::CommandExt as _,
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::helpers::{
    ADMIN_TOKEN, Backend, ChildGuard, client_from, free_port, spawn_app, wait_until, wait_until_up,
};

/// 1,100 idle connections from one address used to take every file
/// descriptor of a service with the usual soft limit, and then nobody could connect. Now the
/// service raises its soft limit to the hard one, keeps at most `HMDP_MAX_CONNECTIONS_PER_IP`
/// connections per address and closes the rest at once, and `/health` answers everyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_connections_from_one_address_leave_room_for_everyone_else() {
    const IDLE: usize = 1_100;
    const PER_ADDRESS: usize = 100;
    // This test holds 1,100 sockets itself.
    hmdp::testing::startup::raise_open_files_limit().unwrap();
    // The service runs as a process of its own, started with the usual soft limit of open
    // files (far below 1,100 connections) under a hard limit just above it.
    let app = spawn_app(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut command = app.binary(dir.path());
    command
        .env("HMDP_LISTEN", format!("127.0.0.1:{port}"))
        .env("HMDP_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("HMDP_WORKER", "false")
        .env("HMDP_IDLE_TIMEOUT_SECS", "300")
        .env("HMDP_MAX_CONNECTIONS", "1500")
        .env("HMDP_MAX_CONNECTIONS_PER_IP", PER_ADDRESS.to_string());
    // SAFETY: only setrlimit, which is async-signal-safe, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 512,
                rlim_max: 2048,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = ChildGuard(command.spawn().unwrap());
    // From another address than the flood's, so this client's pooled connection is no part of it.
    let other = client_from([127, 0, 0, 2]);
    wait_until_up(&other, port).await;
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.0.id())).unwrap();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    assert_eq!(
        open_files.split_whitespace().nth(3),
        Some("2048"),
        "the soft limit was raised to the hard one: {open_files}"
    );

    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut idle = Vec::with_capacity(IDLE);
    for i in 0..IDLE {
        let conn = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr)).await;
        match conn {
            Ok(Ok(conn)) => idle.push(conn),
            other => panic!("connection {i}: {other:?}"),
        }
    }
    // Everything past the cap was closed as soon as accepted, and counted.
    let metrics = format!("http://127.0.0.1:{port}/metrics");
    let refused = async || -> u64 {
        let text = other
            .get(&metrics)
            .header("x-admin-token", ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find(|l| l.starts_with("hmdp_http_connections_refused_total{limit=\"per_address\"}"))
            .and_then(|l| l.split_whitespace().last())
            .map_or(0, |n| n.parse().unwrap())
    };
    wait_until(Duration::from_secs(30), "the refusals", async || {
        refused().await >= (IDLE - PER_ADDRESS) as u64
    })
    .await;
    assert_eq!(refused().await, (IDLE - PER_ADDRESS) as u64);

    // Everyone else is served: a new connection from another address gets its answer.
    let started = Instant::now();
    let health = tokio::time::timeout(
        Duration::from_secs(5),
        client_from([127, 0, 0, 3])
            .get(format!("http://127.0.0.1:{port}/health"))
            .send(),
    )
    .await
    .expect("/health answers within 5 s")
    .unwrap();
    assert_eq!(health.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(5));

    // The admitted connections work; the refused ones were closed by the service.
    let first = &mut idle[0];
    first
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut status = [0u8; 12];
    first.read_exact(&mut status).await.unwrap();
    assert_eq!(&status, b"HTTP/1.1 200");
    let last = idle.last_mut().unwrap();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), last.read(&mut byte)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "a refused connection is closed: {read:?}"
    );
}

/// Sends `head` on a fresh connection and reads until the service closes it; `None` when the
/// connection did not end within 10 s.
async fn send_head(addr: std::net::SocketAddr, head: Vec<u8>) -> Option<String> {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let (mut read, mut write) = conn.split();
    // The service may close the connection before reading a head that large: writing fails
    // then, and what counts is what comes back.
    let writing = async {
        let _ = write.write_all(&head).await;
    };
    let reading = async {
        let mut answer = Vec::new();
        // A reset after the answer is as good as a close.
        let _ = read.read_to_end(&mut answer).await;
        answer
    };
    let ((), answer) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(writing, reading)
    })
    .await
    .ok()?;
    Some(String::from_utf8_lossy(&answer).into_owned())
}

fn head_with(filler: usize) -> Vec<u8> {
    format!(
        "GET /health HTTP/1.1\r\nHost: x\r\nX-Filler: {}\r\n\r\n",
        "a".repeat(filler)
    )
    .into_bytes()
}

/// A request head over `HMDP_MAX_HEADER_BYTES` (16 KiB by default; hyper's own default let a
/// connection buffer about 400 KiB) is answered 431 with `Connection: close` (as 413 is), in the
/// envelope, and the connection is closed; one too large even to buffer is cut off too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_request_head_is_refused_and_its_connection_closed() {
    let app = spawn_app(Backend::Sqlite).await;
    assert_eq!(app.state.config.max_header_bytes, 16 * 1024);

    // Under the limit: served (and kept alive, so ask for the close).
    let mut fine = head_with(12 * 1024);
    fine.splice(
        fine.len() - 2..fine.len() - 2,
        b"Connection: close\r\n".iter().copied(),
    );
    let answer = send_head(app.addr, fine).await.expect("answered");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // Over it: 431 in the envelope, and closed.
    let answer = send_head(app.addr, head_with(20 * 1024))
        .await
        .expect("the connection is closed");
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("\r\nconnection: close\r\n"),
        "{answer}"
    );
    assert!(
        answer.contains("\"code\":\"headers_too_large\""),
        "{answer}"
    );

    // Far over it: not even buffered; 431 or a plain close, but closed either way.
    let answer = send_head(app.addr, head_with(400 * 1024))
        .await
        .expect("the connection is closed");
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );

    // The service carries on.
    assert!(app.get("/health", None).await.success());
}
