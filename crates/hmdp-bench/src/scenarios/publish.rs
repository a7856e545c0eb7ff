//! `publish-cost`: what handing an order to RabbitMQ costs **inside the request** (the course's
//! design: decide in Lua, publish, answer) against hmdp's relay (the grab script appends to the
//! stream, the relay publishes batches later), measured on the same broker in one run:
//!
//! - `XADD` per request: the outbox append, as a round trip of its own. In the service it is
//!   part of the grab script's one round trip, so this is an upper bound of what the relay
//!   design adds to a request.
//! - publish + wait for the confirm per request, every request sharing one confirm channel
//!   (hmdp's own [`Publisher`] with one order): the course's design made safe. The answer waits
//!   for the quorum queue's commit.
//! - publish per request without a confirm: the course's code. As fast as a socket write, and
//!   an accepted order is gone if the broker or the connection fails before it stored it.
//! - the relay: one task publishing batches of `--batch` and waiting for all their confirms
//!   (messages/s; its latency column is per batch).
//!
//! Each phase runs `--seconds` with `--connections` concurrent requests (the relay: one task),
//! into `direct.seckill.queue` on `--amqp-url`, purged before and after every phase: give the
//! bench a vhost of its own.

use std::{
    sync::{Arc, atomic::AtomicU64},
    time::Duration,
};

use hmdp::testing::{
    amqp::{AmqpStats, CONTENT_TYPE, OrderMessage, Outgoing, Publisher, topology},
    domain::{OrderId, UserId, VoucherId},
    storage::orders::NewOrder,
};
use lapin::{
    BasicProperties,
    options::{BasicPublishOptions, QueuePurgeOptions},
};

use crate::{
    Cli,
    load::{Op, Outcome, op_phase, redis_phase},
    report::{Report, Row},
};

/// The scenario's knobs.
#[derive(Debug, Clone, clap::Args)]
pub struct PublishArgs {
    /// RabbitMQ whose `direct.seckill.queue` the phases fill (purged before and after each).
    #[arg(long, default_value = hmdp::config::DEFAULT_AMQP_URL)]
    pub amqp_url: String,
    /// Messages per relay batch (the worker's default batch).
    #[arg(long, default_value_t = 200)]
    pub batch: usize,
    /// How long a request waits for its confirm before it counts as failed.
    #[arg(long, default_value_t = 5000)]
    pub confirm_timeout_ms: u64,
}

fn order(i: u64) -> NewOrder {
    let id = i as i64 + 1;
    NewOrder {
        id: OrderId::new(id).expect("positive"),
        user_id: UserId::new(id).expect("positive"),
        voucher_id: VoucherId::new(1).expect("positive"),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

async fn purge(url: &str) -> anyhow::Result<u32> {
    let connection = hmdp::testing::amqp::connect(url, "hmdp-bench publish-cost").await?;
    let channel = connection.create_channel().await?;
    topology::declare(&channel).await?;
    let purged = channel
        .queue_purge(topology::QUEUE.into(), QueuePurgeOptions::default())
        .await?;
    let _ = connection.close(200, "purged".into()).await;
    Ok(purged)
}

/// A publisher with confirms, as the relay has, shared by the phase's tasks.
fn publisher(args: &PublishArgs) -> Arc<Publisher> {
    Arc::new(Publisher::new(
        &args.amqp_url,
        "hmdp-bench publish-cost",
        Duration::from_millis(args.confirm_timeout_ms),
        Arc::new(AmqpStats::default()),
    ))
}

/// `connections` tasks, each publishing one order per request and waiting for its confirm.
async fn confirm_per_request(cli: &Cli, args: &PublishArgs) -> anyhow::Result<Outcome> {
    let publisher = publisher(args);
    // Connect (and declare) before the clock starts.
    publisher
        .publish(&[(order(u64::MAX / 2), now_ms()).into()])
        .await?;
    let ops: Vec<Op> = (0..cli.connections)
        .map(|_| {
            let p = publisher.clone();
            Arc::new(
                move |i: u64| -> futures_util::future::BoxFuture<'static, Result<u64, String>> {
                    let p = p.clone();
                    Box::pin(async move {
                        p.publish(&[(order(i), now_ms()).into()])
                            .await
                            .map(|()| 1)
                            .map_err(|e| format!("{e}"))
                    })
                },
            ) as Op
        })
        .collect();
    let out = op_phase(
        "publish + confirm per request",
        Duration::from_secs(cli.seconds),
        ops,
    )
    .await;
    publisher.close().await;
    out
}

/// `connections` tasks, each publishing one persistent order per request on a channel without
/// confirms (the course's code): the request is answered once the frame is written.
async fn fire_and_forget(cli: &Cli, args: &PublishArgs) -> anyhow::Result<Outcome> {
    let connection =
        hmdp::testing::amqp::connect(&args.amqp_url, "hmdp-bench publish-cost").await?;
    let channel = connection.create_channel().await?;
    topology::declare(&channel).await?;
    let ops: Vec<Op> = (0..cli.connections)
        .map(|_| {
            let ch = channel.clone();
            Arc::new(
                move |i: u64| -> futures_util::future::BoxFuture<'static, Result<u64, String>> {
                    let ch = ch.clone();
                    Box::pin(async move {
                        let props = BasicProperties::default()
                            .with_delivery_mode(2)
                            .with_content_type(CONTENT_TYPE.into())
                            .with_message_id(order(i).id.to_string().into());
                        ch.basic_publish(
                            topology::EXCHANGE.into(),
                            topology::ROUTING_KEY.into(),
                            BasicPublishOptions::default(),
                            &OrderMessage::body(&order(i)),
                            props,
                        )
                        .await
                        .map(|_| 1)
                        .map_err(|e| format!("{e}"))
                    })
                },
            ) as Op
        })
        .collect();
    let out = op_phase(
        "publish per request, no confirm",
        Duration::from_secs(cli.seconds),
        ops,
    )
    .await;
    let _ = connection.close(200, "done".into()).await;
    out
}

/// One task publishing batches of `batch` and waiting for every confirm of a batch (the
/// relay's loop without the stream reads and acks around it).
async fn relay(cli: &Cli, args: &PublishArgs) -> anyhow::Result<Outcome> {
    let publisher = publisher(args);
    publisher
        .publish(&[(order(u64::MAX / 2), now_ms()).into()])
        .await?;
    let batch = args.batch as u64;
    let next = Arc::new(AtomicU64::new(0));
    let p = publisher.clone();
    let op: Op = Arc::new(move |_| {
        let (p, next) = (p.clone(), next.clone());
        Box::pin(async move {
            let first = next.fetch_add(batch, std::sync::atomic::Ordering::Relaxed);
            let at = now_ms();
            let orders: Vec<Outgoing> = (first..first + batch)
                .map(|i| (order(i), at).into())
                .collect();
            p.publish(&orders)
                .await
                .map(|()| batch)
                .map_err(|e| format!("{e}"))
        })
    });
    let out = op_phase(
        &format!("relay: batches of {batch}, confirmed"),
        Duration::from_secs(cli.seconds),
        vec![op],
    )
    .await;
    publisher.close().await;
    out
}

pub async fn run(cli: &Cli, args: &PublishArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(args.batch > 0, "--batch must be positive");
    let mut report = Report::new("publish-cost", cli.connections);
    let stream = format!("hmdp-bench:publish-cost:{}", std::process::id());
    let xadd = {
        let stream = stream.clone();
        redis_phase(
            "XADD per request (the outbox append)",
            &cli.redis_url,
            cli.connections,
            Duration::from_secs(cli.seconds),
            Arc::new(move |i| {
                let o = order(i);
                let mut cmd = redis::cmd("XADD");
                cmd.arg(&stream)
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(100_000)
                    .arg("*")
                    .arg("id")
                    .arg(o.id)
                    .arg("userId")
                    .arg(o.user_id)
                    .arg("voucherId")
                    .arg(o.voucher_id);
                cmd
            }),
        )
        .await?
    };
    let _: i64 = redis::cmd("DEL")
        .arg(&stream)
        .query_async(
            &mut redis::Client::open(cli.redis_url.as_str())?
                .get_multiplexed_async_connection()
                .await?,
        )
        .await?;

    let mut phases = Vec::new();
    for phase in [Phase::Confirm, Phase::NoConfirm, Phase::Relay] {
        let purged = purge(&args.amqp_url).await?;
        if purged > 0 {
            eprintln!("publish-cost: purged {purged} messages before a phase");
        }
        phases.push(match phase {
            Phase::Confirm => confirm_per_request(cli, args).await?,
            Phase::NoConfirm => fire_and_forget(cli, args).await?,
            Phase::Relay => relay(cli, args).await?,
        });
    }
    purge(&args.amqp_url).await?;
    let [confirm, none, relay] = <[Outcome; 3]>::try_from(phases).expect("three phases");

    for (name, o) in [
        ("XADD per request (the outbox append)", &xadd),
        ("publish + confirm per request (safe)", &confirm),
        ("publish per request, no confirm (course)", &none),
        ("relay: batches, confirmed (messages/s)", &relay),
    ] {
        report.rows.push(Row::from_outcome(name, o));
    }
    let ms = |o: &Outcome, q: f64| o.latency.value_at_quantile(q) as f64 / 1000.0;
    report.summary.push(format!(
        "a confirm inside the request: p50 {:.2} ms, p99 {:.2} ms per request (an XADD: {:.2} / \
         {:.2} ms, and it rides in the grab script's own round trip); at most {:.0} requests/s on \
         one channel ({:.2}x the XADD's {:.0}/s)",
        ms(&confirm, 0.5),
        ms(&confirm, 0.99),
        ms(&xadd, 0.5),
        ms(&xadd, 0.99),
        confirm.rate(),
        confirm.rate() / xadd.rate().max(1e-9),
        xadd.rate()
    ));
    report.summary.push(format!(
        "without the confirm (the course's code): p50 {:.2} ms, {:.0} requests/s, and an order \
         is lost if the broker fails before storing it; the relay publishes {:.0} messages/s off \
         the request path ({:.2}x the per-request confirms)",
        ms(&none, 0.5),
        none.rate(),
        relay.rate(),
        relay.rate() / confirm.rate().max(1e-9)
    ));
    Ok(report)
}

#[derive(Clone, Copy)]
enum Phase {
    Confirm,
    NoConfirm,
    Relay,
}
