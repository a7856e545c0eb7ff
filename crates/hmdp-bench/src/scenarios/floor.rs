//! `floor` and `tokens`: the pieces of the wrk comparison (`scripts/wrk-floor.sh`).
//!
//! `floor` is the bare server a request cannot beat: hyper's HTTP/1.1 on tokio, with the
//! service's runtime (tokio's multi-threaded default) and accept loop settings (`TCP_NODELAY`,
//! keep-alive), answering every request with the envelope `{"success":true}` and nothing else:
//! no routing, no middleware, no session, no Redis. Whatever hmdp serves below it is what hmdp
//! adds. The grab's floor (`--grab-redis-url`) adds to it the one thing an accepted grab cannot
//! do without: each POST runs hmdp's grab script once, with the same keys and arguments,
//! through hmdp's own Redis connection (`RedisConn`, a redis-rs `ConnectionManager`), for a
//! new buyer of one sale with unlimited stock; no session, id generator, memory or worker. `tokens` logs users in through a running hmdp and writes their session tokens, one per
//! line, for the wrk script that sends a random one with every request, as the pages do.

use std::{
    convert::Infallible,
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
};

use bytes::Bytes;
use hmdp::testing::{
    domain::{UserId, VoucherId},
    kv::{Keys, RedisConn},
    order_stream::PendingRecord,
    seckill::{GRAB, GrabAnswer, GrabCall, voucher_hash::Sale},
};
use http_body_util::Full;
use hyper::{Method, Response, StatusCode, server::conn::http1, service::service_fn};
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

/// The grab floor's sale: voucher 1 of shard 0, under this key prefix.
const GRAB_PREFIX: &str = "floor:";
const GRAB_VOUCHER: i64 = 1;

/// Serves the grab's floor on `listen`: every POST grabs voucher [`GRAB_VOUCHER`] for a new
/// buyer through the Redis at `redis_url`, everything else is a 404.
pub async fn serve_grab_floor(listen: SocketAddr, redis_url: &str) -> anyhow::Result<()> {
    let mut redis = RedisConn::connect(redis_url).await?;
    let keys = Keys::new(GRAB_PREFIX);
    let now_ms = chrono::Utc::now().timestamp_millis();
    let sale = Sale {
        // Far more than any run grabs, and exact as a Lua number (the load script passes it).
        stock: 1_000_000_000,
        begin_ms: now_ms - 60_000,
        end_ms: now_ms + 365 * 24 * 3_600_000,
        sold: 0,
        generation: 1,
    };
    sale.load(&keys.seckill_voucher(0, GRAB_VOUCHER), &mut redis)
        .await?;
    GRAB.load_async(&mut redis).await?;
    // Buyers and order ids of this process: new on every request, in every round.
    let next = Arc::new(AtomicI64::new(now_ms * 1_000));
    let listener = tokio::net::TcpListener::bind(listen).await?;
    eprintln!("floor: grabbing through {redis_url} on http://{listen}");
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let (redis, keys, next) = (redis.clone(), keys.clone(), next.clone());
        tokio::spawn(async move {
            let service = service_fn(|req: hyper::Request<hyper::body::Incoming>| {
                let (mut redis, keys, next) = (redis.clone(), keys.clone(), next.clone());
                async move {
                    if req.method() != Method::POST {
                        return Ok::<_, Infallible>(
                            Response::builder()
                                .status(StatusCode::NOT_FOUND)
                                .body(Full::new(Bytes::new()))
                                .expect("a fixed response"),
                        );
                    }
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let body = match grab_once(&mut redis, &keys, n, n).await {
                        Ok(GrabAnswer::Accepted { .. }) => {
                            format!(r#"{{"success":true,"data":{n}}}"#)
                        }
                        Ok(answer) => format!(r#"{{"success":false,"errorMsg":"{answer:?}"}}"#),
                        Err(e) => format!(r#"{{"success":false,"errorMsg":"{e}"}}"#),
                    };
                    Ok(Response::builder()
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from(body)))
                        .expect("a fixed response"))
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// One `EVALSHA` of the grab script with the keys and arguments hmdp sends for an accepted
/// grab on one Redis node (the pending record as the fifth key).
async fn grab_once(
    redis: &mut RedisConn,
    keys: &Keys,
    user: i64,
    order: i64,
) -> redis::RedisResult<GrabAnswer> {
    let record = PendingRecord {
        user_id: UserId::new(user).expect("the bench's users are positive"),
        voucher_id: VoucherId::new(GRAB_VOUCHER).expect("a positive voucher"),
        failed: false,
    };
    let keys_of_grab = [
        keys.seckill_voucher(0, GRAB_VOUCHER),
        keys.seckill_buyers(0, GRAB_VOUCHER),
        keys.seckill_stream(0),
        keys.seckill_deadlines(0),
    ];
    let pending = keys.seckill_pending(order);
    GrabCall {
        keys: keys_of_grab.each_ref().map(String::as_str),
        voucher: GRAB_VOUCHER,
        user,
        order,
        deadline_ms: order / 1_000 + 900_000,
        pending: Some((&pending, record)),
        trace: None,
    }
    .command()
    .query_async(redis)
    .await
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
