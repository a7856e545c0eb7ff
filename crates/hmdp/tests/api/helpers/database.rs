//! MariaDB for the tests: a fresh database per test, and a proxy that plays "the database went
//! away".

use hmdp_testkit::mysql_server_url;
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

/// A TCP proxy in front of MariaDB that can cut every connection and refuse new ones, to play
/// "the database went away" without stopping the shared server.
pub struct CuttableProxy {
    pub port: u16,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cut: tokio::sync::watch::Sender<u64>,
}

impl CuttableProxy {
    pub async fn start(upstream: String) -> Self {
        use std::sync::{
            Arc,
            atomic::{AtomicBool, Ordering},
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let (up2, cut2) = (up.clone(), cut.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if !up2.load(Ordering::SeqCst) {
                    drop(inbound); // refused: closed at once
                    continue;
                }
                let upstream = upstream.clone();
                let mut cut_rx = cut2.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut_rx.changed() => {}
                    }
                });
            }
        });
        Self { port, up, cut }
    }

    pub fn go_down(&self) {
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    pub fn come_back(&self) {
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}
