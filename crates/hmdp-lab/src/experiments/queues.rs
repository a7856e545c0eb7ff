//! Redis消息队列: the queues the course weighs for the asynchronous order, each with its consumer
//! process killed (`kill -9`) mid-drain and restarted. An in-process queue dies with the
//! process, Pub/Sub keeps nothing for a subscriber that is gone, a List forgets what was popped
//! and not yet written; a Stream with a consumer group and RabbitMQ with acknowledgements after
//! the commit deliver it again. The run is the bench's `queues` scenario (`hmdp-bench queues`),
//! called as a library with the lab's key prefix and database; this binary's hidden
//! `queues-consumer` subcommand is the consumer process it starts and kills.
//!
//! Every consumer holds each batch it took for [`WINDOW`] before committing it, the course's
//! window between taking a message and writing the order: the kill comes within a poll of a
//! commit, so it lands inside a window: the List has lost orders on every run so far, though a
//! kill landing in the pop itself would show none.

use std::time::Duration;

use hmdp_bench::scenarios::queues::{self as bench, QueuesArgs, Rig, Transport};

use super::{Experiment, Text, version};
use crate::{Lab, Outcome};

/// Orders in each version's sale.
const ORDERS: u64 = 3000;
/// Orders the consumer writes in one transaction at most.
const BATCH: usize = 100;
/// Kills per version, the first when 30 % of the orders are written, then every 30 % more.
const KILLS: u32 = 3;
const KILL_AFTER: f64 = 0.3;
/// How long the consumer holds a batch between taking it and committing it.
const WINDOW: Duration = Duration::from_millis(50);
/// Between the kill and the restart.
const DOWNTIME: Duration = Duration::from_millis(300);
/// Without a new row for this long, a version that lost orders is done.
const QUIET: Duration = Duration::from_millis(1500);
/// Pub/Sub: orders published a second, while the consumer runs and while it is dead.
const PUBSUB_RATE: u64 = 3000;

pub static EXPERIMENT: Experiment = Experiment {
    name: "queues",
    chapter: "Redis消息队列",
    invariant: "no acknowledged order is lost across a kill -9 of the consumer",
    invariant_zh: "consumer 被 kill -9 之后，已经接受的订单一条都不丢",
    lesson: Text {
        zh: "消息要持久化，并且在写库提交之后才确认：Stream 消费者组，或开了确认的 RabbitMQ。",
        en: "Keep messages durable and acknowledge them only after the commit: a Stream consumer group, or RabbitMQ with confirms.",
    },
    versions: &[
        version!(
            "in-process",
            false,
            "the course's BlockingQueue in the consumer's memory: what is queued dies with it",
            "课程的 BlockingQueue，在消费者的内存里：排队中的订单随进程一起消失",
            in_process
        ),
        version!(
            "list",
            false,
            "LPUSH / BRPOP: a batch popped and held, not yet committed, is gone with the process",
            "LPUSH / BRPOP：已弹出、尚未提交的一批随进程一起丢失",
            list
        ),
        version!(
            "pub-sub",
            false,
            "PUBLISH / SUBSCRIBE: nothing kept for a dead subscriber, nor what it had received",
            "PUBLISH / SUBSCRIBE：不给已死的订阅者保留任何消息，它已收到的也一起没了",
            pub_sub
        ),
        version!(
            "stream",
            true,
            "consumer group, XACK after the commit, pending entries read first on restart; a \
             redelivered batch may be written twice, which the service's idempotent insert absorbs",
            "消费者组，提交后才 XACK，重启后先读 pending 条目；重投的一批可能写两次，由服务的幂等插入吸收",
            stream
        ),
        version!(
            "rabbitmq",
            true,
            "confirmed persistent messages, ack after the commit; unacknowledged ones come back \
             (written twice at most, absorbed by the service's idempotent insert)",
            "持久化消息加发布确认，提交后才 ack；未确认的会重投（最多写两次，由服务的幂等插入吸收）",
            rabbitmq
        ),
    ],
};

/// `hmdp-lab queues-consumer …`: the bench's consumer, in this binary.
#[derive(Debug, clap::Args)]
pub struct QueuesConsumerArgs {
    #[arg(long)]
    redis_url: String,
    #[command(flatten)]
    consumer: bench::ConsumerArgs,
}

/// Runs the consumer until it is killed; its exit code when it ends by itself.
pub async fn consumer(args: QueuesConsumerArgs) -> i32 {
    match bench::consume(&args.redis_url, &args.consumer).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hmdp-lab queues-consumer: {e:#}");
            2
        }
    }
}

async fn in_process(lab: &Lab) -> anyhow::Result<Outcome> {
    transport(lab, Transport::InProcess).await
}

async fn list(lab: &Lab) -> anyhow::Result<Outcome> {
    transport(lab, Transport::List).await
}

async fn pub_sub(lab: &Lab) -> anyhow::Result<Outcome> {
    transport(lab, Transport::PubSub).await
}

async fn stream(lab: &Lab) -> anyhow::Result<Outcome> {
    transport(lab, Transport::Stream).await
}

async fn rabbitmq(lab: &Lab) -> anyhow::Result<Outcome> {
    transport(lab, Transport::Rabbitmq).await
}

/// The bench's run of one transport, with keys under the lab's prefix and the consumer's table
/// (named after this run, without a unique key) in the lab's database.
async fn transport(lab: &Lab, t: Transport) -> anyhow::Result<Outcome> {
    let args = QueuesArgs {
        orders: ORDERS,
        kill_after: KILL_AFTER,
        kills: KILLS,
        transports: vec![t],
        batch: BATCH,
        pubsub_rate: PUBSUB_RATE,
        downtime_ms: DOWNTIME.as_millis() as u64,
        hold_ms: WINDOW.as_millis() as u64,
        quiet: QUIET.as_secs_f64(),
        amqp_url: lab.amqp_url.clone(),
    };
    let run = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
    let mut rig = Rig::new(
        &args,
        &lab.redis_url,
        &lab.database_url,
        &lab.key(&format!("queues:{run}:")),
        &format!("lab_queues_{run}_"),
        lab.exe.clone(),
    )
    .await?;
    rig.progress = lab.shows_progress();
    let measured = bench::run_transport(&rig, t).await;
    rig.db.close().await;
    let o = measured?;
    Ok(Outcome::new(o.lost() == 0)
        .metric("accepted", o.accepted)
        .metric("written", o.distinct)
        .metric("lost", o.lost())
        .metric("written_twice", o.twice())
        .metric("kills", o.kills)
        .metric("drain_orders_per_s", o.rate().round() as u64)
        .metric("table", rig.table(t)))
}
