//! `floor` and `tokens`: the pieces of the wrk comparison (`scripts/wrk-floor.sh`).
//!
//! `floor` is the bare server a request cannot beat: hyper's HTTP/1.1 on tokio, with the
//! service's runtime (tokio's multi-threaded default) and accept loop settings (`TCP_NODELAY`,
//! keep-alive), answering every request with the envelope `{"success":true}` and nothing else:
//! no routing, no middleware, no session, no Redis. Whatever hmdp serves below it is what hmdp
//! adds. `tokens` logs users in through a running hmdp and writes their session tokens, one per
//! line, for the wrk script that sends a random one with every request, as the pages do.

use std::{convert::Infallible, net::SocketAddr, path::PathBuf};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;

use super::setup::{CodeSource, admin_token, create_users, create_voucher};
use crate::Cli;

/// The fixed answer of the floor.
const ENVELOPE: &[u8] = br#"{"success":true}"#;

/// Serves the floor on `listen` until the process is stopped.
pub async fn serve_floor(listen: SocketAddr) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    eprintln!("floor: serving {{\"success\":true}} on http://{listen}");
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = service_fn(|_req| async {
                Ok::<_, Infallible>(
                    Response::builder()
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from_static(ENVELOPE)))
                        .expect("a fixed response"),
                )
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Logs `users` users in through the hmdp at `--url` (codes read from Redis under
/// `--redis-prefix`), writes their tokens to `out`, and creates a flash-sale voucher with
/// `stock`, whose id it prints on stdout.
pub async fn tokens(cli: &Cli, users: usize, stock: i64, out: &PathBuf) -> anyhow::Result<()> {
    let url = cli
        .url
        .as_deref()
        .ok_or_else(|| anyhow::anyhow!("tokens needs --url (a running hmdp)"))?;
    let addr = super::shop::target(url)?;
    let admin_token = admin_token(cli)?;
    let codes = CodeSource::of_running_server(cli).await?;
    let logged_in = create_users(addr, &codes, users, 32).await?;
    let lines: Vec<&str> = logged_in.iter().map(|u| u.token.as_str()).collect();
    std::fs::write(out, lines.join("\n") + "\n")?;
    let voucher = create_voucher(addr, &admin_token, stock).await?;
    eprintln!(
        "tokens: {} users logged in, tokens in {}; voucher {voucher} (stock {stock})",
        logged_in.len(),
        out.display()
    );
    println!("{voucher}");
    Ok(())
}
