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
//! - the peer address as [`ConnectInfo`], from which `client` resolves the client address;
//! - runs of `/` in the path merged before routing, as the original's nginx did;
//! - caps on open connections, in total (`HMDP_MAX_CONNECTIONS`) and per client address
//!   (`HMDP_MAX_CONNECTIONS_PER_IP`, an IPv6 /64 counting as one, trusted proxies exempt): each
//!   connection is a file descriptor and about 12 KiB, so without a cap one client holding idle
//!   connections would run the process out of descriptors and nobody could connect, `/health`
//!   included. A connection over a cap is closed as soon as it is accepted (a refused client
//!   sees its connection closed at once, instead of hanging in the backlog), counted in
//!   `hmdp_http_connections_refused_total` and logged once per 10 s at most;
//! - a limit on the request head (`HMDP_MAX_HEADER_BYTES`; hyper's default read buffer allows
//!   about 400 KiB per connection): a larger head is answered 431 `headers_too_large` with
//!   `Connection: close`. Hyper's buffer is twice the limit, so a head that does not even fit
//!   gets hyper's own 431 (no envelope, `connection: close` as well) and is closed all the same;
//! - a limit on reading a request head (`HMDP_IDLE_TIMEOUT_SECS`), which is also the idle
//!   keep-alive timeout: a client that opens connections and sends nothing, or a byte at a time
//!   (slowloris), cannot pin them forever;
//! - accept errors (out of file descriptors, say) logged and retried after a pause instead of
//!   ending the server;
//! - graceful shutdown: stop accepting, let in-flight requests finish (idle connections are
//!   closed at once), give up on the rest after a bounded drain time.

use std::{
    collections::{HashMap, hash_map::Entry},
    future::Future,
    io,
    net::{IpAddr, SocketAddr},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{Router, extract::ConnectInfo, response::IntoResponse as _};
use hyper::{body::Incoming, server::conn::http1};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
};
use tokio::net::TcpListener;
use tower::ServiceExt as _;

use super::{ApiError, client::limit_key};
use crate::{
    config::{Config, TrustedProxies},
    metrics::{Counter, EncodeLabelSet, Family, Gauge, Registry},
};

/// How [`serve`] guards the process: timeouts and caps.
#[derive(Debug, Clone)]
pub(crate) struct ServeOptions {
    /// `HMDP_IDLE_TIMEOUT_SECS`: to send a request head, and to stay idle between requests.
    pub idle: Duration,
    /// How long shutdown waits for in-flight requests.
    pub drain: Duration,
    /// `HMDP_MAX_CONNECTIONS` (`0` = no cap).
    pub max_connections: usize,
    /// `HMDP_MAX_CONNECTIONS_PER_IP` (`0` = no cap).
    pub max_connections_per_ip: usize,
    /// `HMDP_MAX_HEADER_BYTES`.
    pub max_header_bytes: usize,
    /// Exempt from the per-address cap: every client behind them shares their address.
    pub trusted_proxies: TrustedProxies,
    /// Where open and refused connections are counted.
    pub stats: Arc<ConnectionStats>,
}

impl ServeOptions {
    /// The configured limits, with `drain` for shutdown.
    pub(crate) fn new(config: &Config, drain: Duration, stats: Arc<ConnectionStats>) -> Self {
        Self {
            idle: config.idle_timeout,
            drain,
            max_connections: config.max_connections,
            max_connections_per_ip: config.max_connections_per_ip,
            max_header_bytes: config.max_header_bytes,
            trusted_proxies: config.trusted_proxies.clone(),
            stats,
        }
    }
}

/// Open connections, and the ones closed at accept by a cap.
#[derive(Debug, Default)]
pub(crate) struct ConnectionStats {
    open: Gauge,
    refused: Family<RefusedLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedLabels {
    limit: &'static str,
}

impl ConnectionStats {
    /// Adds `hmdp_http_connections_open` and `hmdp_http_connections_refused_total` to `registry`.
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "hmdp_http_connections_open",
            "Open HTTP connections",
            self.open.clone(),
        );
        registry.register(
            "hmdp_http_connections_refused",
            "Connections closed as soon as accepted, by the cap they hit: `total` \
             (HMDP_MAX_CONNECTIONS) or `per_address` (HMDP_MAX_CONNECTIONS_PER_IP)",
            self.refused.clone(),
        );
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then waits up to `options.drain`
/// for in-flight requests to finish.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
    options: ServeOptions,
) -> io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    let max_head = options.max_header_bytes;
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(options.idle)
        // Hyper's minimum is 8 KiB.
        .max_buf_size((2 * max_head).max(8 * 1024));
    let drain = options.drain;
    let gate = Arc::new(Gate::new(options));
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
        let slot = match gate.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(cap) => {
                drop(stream);
                gate.refused(cap, peer);
                continue;
            }
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, %peer, "cannot set TCP_NODELAY");
        }
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            // The router is always ready, and a clone is one reference count.
            let router = router.clone();
            async move {
                if head_len(&req) > max_head {
                    return Ok(headers_too_large(max_head));
                }
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                router.oneshot(merge_slashes(req)).await
            }
        });
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            let _slot = slot;
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

/// Collapses runs of `/` in the request path (the query is left alone) before routing, as nginx
/// (`merge_slashes on`, the original's front) does: `index.html` asks for `'/imgs/' + icon` with
/// icons stored as `/types/…`, i.e. `/imgs//types/…`.
fn merge_slashes<B>(mut req: hyper::Request<B>) -> hyper::Request<B> {
    let uri = req.uri();
    if !uri.path().contains("//") {
        return req;
    }
    let mut path = String::with_capacity(uri.path().len());
    for c in uri.path().chars() {
        if !(c == '/' && path.ends_with('/')) {
            path.push(c);
        }
    }
    let path_and_query = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    let mut parts = uri.clone().into_parts();
    if let Ok(pq) = path_and_query.parse() {
        parts.path_and_query = Some(pq);
        if let Ok(merged) = axum::http::Uri::from_parts(parts) {
            *req.uri_mut() = merged;
        }
    }
    req
}

/// About the size of a request head as sent: request line and header lines.
fn head_len<B>(req: &hyper::Request<B>) -> usize {
    let target = req.uri().path_and_query().map_or(1, |p| p.as_str().len())
        + req.uri().authority().map_or(0, |a| a.as_str().len());
    let headers: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    req.method().as_str().len() + target + 11 + headers
}

fn headers_too_large(max: usize) -> axum::response::Response {
    ApiError::headers_too_large(max).into_response()
}

/// Which cap refused a connection.
#[derive(Debug, Clone, Copy)]
enum Cap {
    Total,
    PerAddress,
}

/// Counts open connections against the caps.
struct Gate {
    options: ServeOptions,
    open: AtomicUsize,
    /// Open connections per client key, for the per-address cap; no entry at zero.
    per_address: Mutex<HashMap<IpAddr, usize>>,
    started: Instant,
    /// When (s after `started`) each cap may log its next refusal.
    next_log: [AtomicU64; 2],
}

/// One admitted connection; gives its place back when dropped.
struct Slot {
    gate: Arc<Gate>,
    key: Option<IpAddr>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.gate.release(self.key);
    }
}

impl Gate {
    fn new(options: ServeOptions) -> Self {
        Self {
            options,
            open: AtomicUsize::new(0),
            per_address: Mutex::default(),
            started: Instant::now(),
            next_log: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// Takes a place for a connection from `peer`, or says which cap is full. Only the accept
    /// loop takes places, so checking and then counting cannot overshoot.
    fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, Cap> {
        let o = &self.options;
        if o.max_connections > 0 && self.open.load(Ordering::Relaxed) >= o.max_connections {
            return Err(Cap::Total);
        }
        let key = (o.max_connections_per_ip > 0 && !o.trusted_proxies.contains(peer))
            .then(|| limit_key(peer));
        if let Some(key) = key {
            let mut open = self.per_address.lock().expect("connection counts poisoned");
            let n = open.entry(key).or_insert(0);
            if *n >= o.max_connections_per_ip {
                return Err(Cap::PerAddress);
            }
            *n += 1;
        }
        self.open.fetch_add(1, Ordering::Relaxed);
        o.stats.open.inc();
        Ok(Slot {
            gate: self.clone(),
            key,
        })
    }

    fn release(&self, key: Option<IpAddr>) {
        self.open.fetch_sub(1, Ordering::Relaxed);
        self.options.stats.open.dec();
        if let Some(key) = key {
            let mut open = self.per_address.lock().expect("connection counts poisoned");
            if let Entry::Occupied(mut n) = open.entry(key) {
                *n.get_mut() -= 1;
                if *n.get() == 0 {
                    n.remove();
                }
            }
        }
    }

    /// Counts a refusal, and logs it unless this cap logged one in the last 10 s (a flood
    /// would otherwise write a line per connection).
    fn refused(&self, cap: Cap, peer: SocketAddr) {
        let label = match cap {
            Cap::Total => "total",
            Cap::PerAddress => "per_address",
        };
        self.options
            .stats
            .refused
            .get_or_create(&RefusedLabels { limit: label })
            .inc();
        let now = self.started.elapsed().as_secs();
        let next = &self.next_log[cap as usize];
        let due = next.load(Ordering::Relaxed);
        if now < due
            || next
                .compare_exchange(due, now + 10, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        match cap {
            Cap::Total => tracing::warn!(
                %peer,
                max = self.options.max_connections,
                "HMDP_MAX_CONNECTIONS reached: closing new connections (logged once per 10 s)"
            ),
            Cap::PerAddress => tracing::debug!(
                %peer,
                max = self.options.max_connections_per_ip,
                "HMDP_MAX_CONNECTIONS_PER_IP reached for this address: closing its new \
                 connections (logged once per 10 s)"
            ),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(total: usize, per_address: usize, trusted: &str) -> Arc<Gate> {
        Arc::new(Gate::new(ServeOptions {
            idle: Duration::from_secs(1),
            drain: Duration::from_secs(1),
            max_connections: total,
            max_connections_per_ip: per_address,
            max_header_bytes: 16 * 1024,
            trusted_proxies: trusted.parse().unwrap(),
            stats: Arc::default(),
        }))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn connections_are_capped_per_address_and_freed_when_they_close() {
        let gate = gate(0, 2, "10.0.0.1");
        let a = [
            gate.admit(ip("192.0.2.1")).unwrap(),
            gate.admit(ip("192.0.2.1")).unwrap(),
        ];
        assert!(matches!(gate.admit(ip("192.0.2.1")), Err(Cap::PerAddress)));
        assert!(gate.admit(ip("192.0.2.2")).is_ok(), "another address");
        // One IPv6 /64 is one address.
        let _v6 = gate.admit(ip("2001:db8:0:1::1")).unwrap();
        let _v6b = gate.admit(ip("2001:db8:0:1::2")).unwrap();
        assert!(matches!(
            gate.admit(ip("2001:db8:0:1:ffff::3")),
            Err(Cap::PerAddress)
        ));
        assert!(gate.admit(ip("2001:db8:0:2::1")).is_ok());
        // A trusted proxy carries everyone's connections: no per-address cap.
        let proxied: Vec<_> = (0..5)
            .map(|_| gate.admit(ip("10.0.0.1")).unwrap())
            .collect();
        drop(a);
        assert!(
            gate.admit(ip("192.0.2.1")).is_ok(),
            "closing frees the places"
        );
        drop(proxied);
        assert!(
            !gate
                .per_address
                .lock()
                .unwrap()
                .contains_key(&ip("192.0.2.1")),
            "an address with no open connection is forgotten"
        );
    }

    #[test]
    fn the_total_cap_counts_every_connection() {
        let gate = gate(3, 0, "");
        let open: Vec<_> = ["192.0.2.1", "192.0.2.2", "10.0.0.1"]
            .iter()
            .map(|a| gate.admit(ip(a)).unwrap())
            .collect();
        assert!(matches!(gate.admit(ip("192.0.2.3")), Err(Cap::Total)));
        gate.refused(Cap::Total, "192.0.2.3:1".parse().unwrap());
        let text = {
            let mut registry = Registry::default();
            gate.options.stats.register(&mut registry);
            crate::metrics::encode(&registry)
        };
        assert!(text.contains("hmdp_http_connections_open 3"), "{text}");
        assert!(
            text.contains("hmdp_http_connections_refused_total{limit=\"total\"} 1"),
            "{text}"
        );
        drop(open);
        assert!(gate.admit(ip("192.0.2.3")).is_ok());
    }
}
