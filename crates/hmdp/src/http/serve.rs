//! The accept loop: the router served over HTTP/1.1 by hyper, with graceful shutdown.
//!
//! `axum::serve` would do, but it serves every connection through hyper-util's HTTP/1 + HTTP/2
//! auto-detection, whose per-connection state is sized for the larger HTTP/2 machinery. A flash
//! sale is many idle keep-alive connections: with 10,000 of them open the auto-detecting server
//! held about 18 KiB per connection, this one about 12 KiB (BENCHMARKS.md, `conns`). Every
//! client of this API (the original pages, browsers through the original nginx setup, curl,
//! load generators) speaks HTTP/1.1; HTTP/2 belongs to the TLS-terminating proxy in front.
//!
//! What the loop adds on top of hyper:
//! - `TCP_NODELAY` on every connection, so a response never waits for Nagle's algorithm;
//! - the peer address as [`ConnectInfo`], which the per-IP rate limits read;
//! - a limit on reading a request head (`HMDP_IDLE_TIMEOUT_SECS`), which is also the idle
//!   keep-alive timeout: a client that opens connections and sends nothing, or a byte at a time
//!   (slowloris), cannot pin them forever;
//! - accept errors (out of file descriptors, say) logged and retried after a pause instead of
//!   ending the server;
//! - graceful shutdown: stop accepting, let in-flight requests finish (idle connections are
//!   closed at once), give up on the rest after a bounded drain time.

use std::{future::Future, io, net::SocketAddr, time::Duration};

use axum::{Router, extract::ConnectInfo};
use hyper::{body::Incoming, server::conn::http1};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
};
use tokio::net::TcpListener;
use tower::ServiceExt as _;

/// Serves `router` on `listener` until `shutdown` completes, then waits up to `drain` for
/// in-flight requests to finish. A connection that takes longer than `idle` to send a request
/// head (or sits idle that long between requests) is closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
    idle: Duration,
    drain: Duration,
) -> io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(idle);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, %peer, "cannot set TCP_NODELAY");
        }
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
            // The router is always ready, and a clone is one reference count.
            router.clone().oneshot(req)
        });
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                // Clients going away mid-request, header timeouts, garbage on the wire: the
                // connection's business, not the server's.
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(drain) => {
            tracing::warn!(?drain, "requests still running after the drain time; closing their connections");
        }
    }
    Ok(())
}

/// Per-connection failures (the peer reset before we accepted) are nothing; anything else
/// (typically EMFILE, out of file descriptors) is logged and retried after a pause, so the
/// server neither dies nor spins.
async fn accept_failed(e: io::Error) {
    use io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed; retrying in 100 ms");
    tokio::time::sleep(Duration::from_millis(100)).await;
}
