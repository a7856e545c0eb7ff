//! `queues`: the queues the course discusses for the asynchronous order, each with its consumer
//! killed (`kill -9`) in the middle of the sale and restarted: which ones lose orders, which
//! ones write some twice, measured in one table instead of asserted.
//!
//! For each transport the same model sale, orders `1..=N`, goes through the queue the way the
//! course's version does, to a consumer **process**: this binary started again as the hidden
//! `queues-consumer` subcommand, so that it can be killed with SIGKILL (no shutdown hook, no
//! clean-up). The consumer writes every batch it takes (what is ready, up to `--batch`) in one
//! transaction into a table of its own that has **no unique key on the order id**, so an order
//! written twice shows as a second row instead of being absorbed the way the service's
//! idempotent insert absorbs it. Once `--kill-after` of the orders are in the table the bench
//! kills the consumer, starts it again after `--downtime-ms`, and waits until the transport is
//! drained, or, for a transport that lost orders, until nothing new arrives for `--quiet`
//! seconds. Then it counts. `--hold-ms` makes the consumer hold each batch before writing it,
//! a window between taking and committing as wide as wanted (none by default).
//!
//! [`Rig`] and [`run_transport`] are the same run for another binary (`hmdp-lab`'s `queues`
//! experiment), with its own key prefix, database and table names; that binary's hidden
//! `queues-consumer` subcommand calls [`consume`].
//!
//! Reading the table:
//! - accepted: orders handed to the transport (N; for RabbitMQ, those the broker confirmed);
//! - written: distinct order ids in the table; lost = accepted − written;
//! - written twice: rows beyond one per order (what an idempotent insert must absorb);
//! - drain orders/s: written / the time the consumer was writing (from its first start to the
//!   last row, minus the gap from the kill to the first row after the restart). Pub/Sub's is
//!   bounded by `--pubsub-rate`, since it is consumed while it is published.
//!
//! What a kill does to each transport (what the course says and the numbers show):
//! - in-process: the producer and the queue (capacity 1024 × 1024, the course's
//!   `ArrayBlockingQueue`) live in the consumer's process. The whole sale is enqueued before
//!   the first write; whatever is still queued dies with the process, and the restarted process
//!   starts with an empty queue.
//! - Redis List: `LPUSH` by the producer, `BRPOP` (then `RPOP` up to a batch) by the consumer:
//!   orders popped and not yet committed are lost. That is at most one batch, and only when the
//!   kill lands between the pop and the commit reaching the database, so a run may show 0.
//! - Redis Pub/Sub: published at a steady rate while the consumer runs; what is published
//!   while no subscriber is connected, and what the dead subscriber had received but not
//!   written, is gone (`PUBLISH` returning 0 receivers is counted too).
//! - Redis Stream + consumer group: `XREADGROUP`, write, then `XACK`. The restarted consumer
//!   has the same name and reads its pending entries (id `0`) before new ones (`>`): nothing is
//!   lost, and a batch committed but not acknowledged at the kill is written twice.
//! - RabbitMQ: persistent, mandatory messages with publisher confirms into a durable quorum
//!   queue (the options of `hmdp::testing::amqp::topology`, under names of this run on the URL's vhost),
//!   prefetch 200, acknowledged after the commit: nothing lost, and unacknowledged deliveries
//!   come back (written twice if they had been committed).

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::Context;
use clap::ValueEnum;
use futures_util::{FutureExt, StreamExt};
use hmdp::testing::{
    amqp::{CONTENT_TYPE, OrderMessage, topology},
    domain::{OrderId, UserId, VoucherId},
    storage::{Db, orders::NewOrder},
};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ExchangeKind,
    options::{
        BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
        ConfirmSelectOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
        QueueDeclareOptions, QueueDeleteOptions,
    },
    types::{AMQPValue, FieldTable, LongString},
};
use redis::{
    AsyncConnectionConfig,
    aio::MultiplexedConnection,
    streams::{StreamId, StreamInfoGroupsReply, StreamReadReply},
};
use sqlx::{Connection as _, Executor as _};
use tokio::process::{Child, Command};

use crate::{
    Cli,
    check::Check,
    report::{Report, Row},
    server::Database,
};

/// The stream's consumer group and the consumer's stable name.
const GROUP: &str = "orders";
const CONSUMER: &str = "c1";
/// RabbitMQ: unacknowledged deliveries the broker sends ahead.
const PREFETCH: u16 = 200;
/// How often the bench counts the table.
const POLL: Duration = Duration::from_millis(20);
/// The course's `new ArrayBlockingQueue<>(1024 * 1024)`.
const IN_PROCESS_CAPACITY: usize = 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    /// A queue in the consumer's memory (the course's BlockingQueue).
    InProcess,
    /// Redis List: LPUSH, BRPOP.
    List,
    /// Redis Pub/Sub: PUBLISH, SUBSCRIBE.
    PubSub,
    /// Redis Stream with a consumer group: XREADGROUP, XACK after the commit.
    Stream,
    /// RabbitMQ with publisher confirms, manual ack after the commit.
    Rabbitmq,
}

impl Transport {
    /// Its row in the table.
    pub fn label(self) -> &'static str {
        match self {
            Transport::InProcess => "in-process queue (BlockingQueue)",
            Transport::List => "Redis List (LPUSH / BRPOP)",
            Transport::PubSub => "Redis Pub/Sub",
            Transport::Stream => "Redis Stream + group (XACK after commit)",
            Transport::Rabbitmq => "RabbitMQ (confirms, ack after commit)",
        }
    }

    /// The name on the command line, also used in table and key names.
    pub fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }

    /// What the course says happens at a consumer crash.
    pub fn claim(self) -> &'static str {
        match self {
            Transport::InProcess => "course: the queue dies with the process",
            Transport::List => "course: a popped, unwritten order is lost (no ack)",
            Transport::PubSub => "course: no persistence; nobody listening = lost",
            Transport::Stream | Transport::Rabbitmq => {
                "course: nothing lost; redelivery may write twice"
            }
        }
    }
}

/// The `queues` scenario's knobs.
#[derive(Debug, Clone, clap::Args)]
pub struct QueuesArgs {
    /// Orders in the sale (ids 1..=N).
    #[arg(long, default_value_t = 20_000)]
    pub orders: u64,
    /// Fraction of the orders in the table when the consumer is first killed; each further kill
    /// comes after as many more (0.3 with 3 kills: at 30, 60 and 90 %).
    #[arg(long, default_value_t = 0.3)]
    pub kill_after: f64,
    /// Kills per transport. A List loses an order only when a kill lands between the pop and
    /// the commit, so one kill shows that only sometimes.
    #[arg(long, default_value_t = 3)]
    pub kills: u32,
    /// Transports to compare, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [
        Transport::InProcess, Transport::List, Transport::PubSub, Transport::Stream,
        Transport::Rabbitmq,
    ])]
    pub transports: Vec<Transport>,
    /// Orders the consumer writes in one transaction at most.
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Pub/Sub: messages published per second (the sale goes on while the consumer is dead).
    #[arg(long, default_value_t = 2_000)]
    pub pubsub_rate: u64,
    /// Milliseconds between the kill and the restart.
    #[arg(long, default_value_t = 500)]
    pub downtime_ms: u64,
    /// Milliseconds the consumer holds each batch it took before writing it: a window between
    /// taking and committing as wide as wanted, so that a kill lands inside it (0: none).
    #[arg(long, default_value_t = 0)]
    pub hold_ms: u64,
    /// Seconds without a new row after which a transport counts as done.
    #[arg(long, default_value_t = 3.0)]
    pub quiet: f64,
    /// RabbitMQ; an exchange and a queue named after this run are declared and deleted after.
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    pub amqp_url: String,
}

/// The consumer process (`queues-consumer`, started and killed by `queues`).
#[derive(Debug, Clone, clap::Args)]
pub struct ConsumerArgs {
    #[arg(long, value_enum)]
    pub transport: Transport,
    /// The database, with its name.
    #[arg(long)]
    pub db: String,
    #[arg(long)]
    pub table: String,
    /// The Redis key or channel, or the RabbitMQ queue.
    #[arg(long)]
    pub key: String,
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    pub amqp_url: String,
    /// In-process: orders this process enqueues itself before consuming (its first start).
    #[arg(long, default_value_t = 0)]
    pub produce: u64,
    /// Milliseconds each batch is held between taking it and writing it.
    #[arg(long, default_value_t = 0)]
    pub hold_ms: u64,
}

fn order(id: u64) -> NewOrder {
    NewOrder {
        id: OrderId::new(id as i64).expect("the bench numbers orders from 1"),
        user_id: UserId::new(1_000_000 + id as i64).expect("positive"),
        voucher_id: VoucherId::new(1).expect("positive"),
    }
}

fn parse(body: &[u8]) -> anyhow::Result<NewOrder> {
    OrderMessage::parse(body)
        .ok_or_else(|| anyhow::anyhow!("not an order: {}", String::from_utf8_lossy(body)))
}

/// A Redis connection whose replies may take longer than a blocking pop.
async fn redis_conn(url: &str) -> anyhow::Result<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
    Ok(redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

/// Writes a batch in one transaction, one row per order.
async fn write(db: &Db, table: &str, orders: &[NewOrder]) -> anyhow::Result<()> {
    let sql = format!(
        "INSERT INTO {table} (order_id, user_id, voucher_id) VALUES {}",
        vec!["(?, ?, ?)"; orders.len()].join(", ")
    );
    hmdp::on_pool!(db, pool => {
        let mut tx = pool.begin().await?;
        let mut q = sqlx::query(sql.as_str());
        for o in orders {
            q = q.bind(o.id).bind(o.user_id).bind(o.voucher_id);
        }
        q.execute(&mut *tx).await?;
        tx.commit().await?;
    });
    Ok(())
}

/// Holds a batch the consumer took for `--hold-ms`, then writes it.
async fn hold_then_write(db: &Db, a: &ConsumerArgs, orders: &[NewOrder]) -> anyhow::Result<()> {
    if a.hold_ms > 0 {
        tokio::time::sleep(Duration::from_millis(a.hold_ms)).await;
    }
    write(db, &a.table, orders).await
}

// ---------------------------------------------------------------------------------------------
// The consumer process.

/// Runs the consumer until it is killed (or fails: the error ends the process). The entry of
/// the hidden `queues-consumer` subcommand, of this binary or of another that re-execs itself.
pub async fn consume(redis_url: &str, a: &ConsumerArgs) -> anyhow::Result<()> {
    let db = Db::connect(&a.db, 1).await?;
    match a.transport {
        Transport::InProcess => consume_in_process(&db, a).await,
        Transport::List => consume_list(&db, a, &mut redis_conn(redis_url).await?).await,
        Transport::PubSub => consume_pubsub(&db, a, &redis::Client::open(redis_url)?).await,
        Transport::Stream => consume_stream(&db, a, &mut redis_conn(redis_url).await?).await,
        Transport::Rabbitmq => consume_rabbitmq(&db, a).await,
    }
}

async fn consume_in_process(db: &Db, a: &ConsumerArgs) -> anyhow::Result<()> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(IN_PROCESS_CAPACITY);
    // The sale is over before the first write: everything is in the queue.
    for id in 1..=a.produce {
        tx.try_send(order(id))
            .map_err(|_| anyhow::anyhow!("the in-process queue is full"))?;
    }
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < a.batch
            && let Ok(o) = rx.try_recv()
        {
            batch.push(o);
        }
        hold_then_write(db, a, &batch).await?;
    }
    Ok(())
}

async fn consume_list(
    db: &Db,
    a: &ConsumerArgs,
    r: &mut MultiplexedConnection,
) -> anyhow::Result<()> {
    loop {
        let popped: Option<(String, Vec<u8>)> = redis::cmd("BRPOP")
            .arg(&a.key)
            .arg(1)
            .query_async(r)
            .await?;
        let Some((_, first)) = popped else { continue };
        let mut bodies = vec![first];
        if a.batch > 1 {
            let more: Option<Vec<Vec<u8>>> = redis::cmd("RPOP")
                .arg(&a.key)
                .arg(a.batch - 1)
                .query_async(r)
                .await?;
            bodies.extend(more.unwrap_or_default());
        }
        // From here until the commit these orders exist only in this process.
        let orders = bodies
            .iter()
            .map(|b| parse(b))
            .collect::<anyhow::Result<Vec<_>>>()?;
        hold_then_write(db, a, &orders).await?;
    }
}

async fn consume_pubsub(db: &Db, a: &ConsumerArgs, client: &redis::Client) -> anyhow::Result<()> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(&a.key).await?;
    let mut messages = pubsub.into_on_message();
    while let Some(first) = messages.next().await {
        let mut batch = vec![parse(first.get_payload_bytes())?];
        while batch.len() < a.batch
            && let Some(Some(m)) = messages.next().now_or_never()
        {
            batch.push(parse(m.get_payload_bytes())?);
        }
        hold_then_write(db, a, &batch).await?;
    }
    anyhow::bail!("the subscription ended")
}

fn stream_order(e: &StreamId) -> anyhow::Result<NewOrder> {
    let field = |name: &str| {
        e.get::<i64>(name)
            .ok_or_else(|| anyhow::anyhow!("stream entry {} has no {name}", e.id))
    };
    Ok(NewOrder {
        id: OrderId::new(field("id")?)?,
        user_id: UserId::new(field("userId")?)?,
        voucher_id: VoucherId::new(field("voucherId")?)?,
    })
}

async fn consume_stream(
    db: &Db,
    a: &ConsumerArgs,
    r: &mut MultiplexedConnection,
) -> anyhow::Result<()> {
    // Entries delivered to this consumer before it died and never acknowledged come first.
    let mut from = "0";
    loop {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(GROUP)
            .arg(CONSUMER)
            .arg("COUNT")
            .arg(a.batch);
        if from == ">" {
            cmd.arg("BLOCK").arg(1000);
        }
        cmd.arg("STREAMS").arg(&a.key).arg(from);
        let reply: Option<StreamReadReply> = cmd.query_async(r).await?;
        let entries: Vec<StreamId> = reply
            .map(|r| r.keys.into_iter().flat_map(|k| k.ids).collect())
            .unwrap_or_default();
        if entries.is_empty() {
            from = ">";
            continue;
        }
        let orders = entries
            .iter()
            .map(stream_order)
            .collect::<anyhow::Result<Vec<_>>>()?;
        hold_then_write(db, a, &orders).await?;
        let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
        let _: i64 = redis::cmd("XACK")
            .arg(&a.key)
            .arg(GROUP)
            .arg(ids)
            .query_async(r)
            .await?;
    }
}

async fn consume_rabbitmq(db: &Db, a: &ConsumerArgs) -> anyhow::Result<()> {
    let conn = hmdp::testing::amqp::connect(&a.amqp_url, "hmdp-bench queues consumer").await?;
    let channel = conn.create_channel().await?;
    channel
        .basic_qos(PREFETCH, BasicQosOptions::default())
        .await?;
    let mut consumer = channel
        .basic_consume(
            a.key.as_str().into(),
            "hmdp-bench-queues".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    while let Some(first) = consumer.next().await {
        let mut batch = vec![first?];
        while batch.len() < a.batch
            && let Some(Some(d)) = consumer.next().now_or_never()
        {
            batch.push(d?);
        }
        let orders = batch
            .iter()
            .map(|d| parse(&d.data))
            .collect::<anyhow::Result<Vec<_>>>()?;
        hold_then_write(db, a, &orders).await?;
        if let Some(last) = batch.last() {
            last.acker.ack(BasicAckOptions { multiple: true }).await?;
        }
    }
    anyhow::bail!("the broker cancelled the consumer")
}

// ---------------------------------------------------------------------------------------------
// The bench: producer, killer, counter.

/// Where the transports run: the knobs, the Redis, the database the consumer writes to, the
/// names of this run, and the binary whose hidden `queues-consumer` subcommand is the consumer
/// process (`hmdp-bench`'s own, or another binary's that delegates to [`consume`]).
pub struct Rig<'a> {
    pub args: &'a QueuesArgs,
    pub redis_url: String,
    pub db_url: String,
    pub db: Db,
    /// Every Redis key, channel and RabbitMQ name of the run starts with it; the transport's
    /// name follows.
    pub key_prefix: String,
    /// The consumer's table is this and the transport's name; the table must not exist yet.
    pub table_prefix: String,
    pub exe: PathBuf,
    /// Progress lines on stderr.
    pub progress: bool,
    /// The consumers' stderr logs.
    dir: tempfile::TempDir,
}

impl<'a> Rig<'a> {
    /// Connects to the database of `db_url` (created when missing).
    pub async fn new(
        args: &'a QueuesArgs,
        redis_url: &str,
        db_url: &str,
        key_prefix: &str,
        table_prefix: &str,
        exe: PathBuf,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            args,
            redis_url: redis_url.to_owned(),
            db_url: db_url.to_owned(),
            db: Db::connect(db_url, 2).await?,
            key_prefix: key_prefix.to_owned(),
            table_prefix: table_prefix.to_owned(),
            exe,
            progress: true,
            dir: tempfile::tempdir()?,
        })
    }

    /// The consumer's table for transport `t`.
    pub fn table(&self, t: Transport) -> String {
        format!("{}{}", self.table_prefix, t.name().replace('-', "_"))
    }

    fn progress(&self, line: std::fmt::Arguments<'_>) {
        if self.progress {
            eprintln!("queues: {line}");
        }
    }
}

/// What one transport did.
pub struct TransportOutcome {
    pub transport: Transport,
    /// Orders handed to the transport (for RabbitMQ, those the broker confirmed).
    pub accepted: u64,
    /// Rows in the consumer's table.
    pub rows: u64,
    /// Distinct order ids in it.
    pub distinct: u64,
    /// Times the consumer was killed.
    pub kills: u32,
    /// Seconds the consumer was writing (restart gap excluded).
    pub active: f64,
    pub notes: Vec<String>,
    pub error: Option<String>,
}

impl TransportOutcome {
    pub fn lost(&self) -> u64 {
        self.accepted.saturating_sub(self.distinct)
    }
    pub fn twice(&self) -> u64 {
        self.rows - self.distinct
    }
    /// Drain orders/s.
    pub fn rate(&self) -> f64 {
        self.distinct as f64 / self.active.max(1e-9)
    }
}

pub async fn run(cli: &Cli, args: &QueuesArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(args.orders > 0, "--orders must be positive");
    anyhow::ensure!(args.batch > 0, "--batch must be positive");
    anyhow::ensure!(
        args.kill_after > 0.0 && args.kill_after < 1.0,
        "--kill-after is a fraction between 0 and 1"
    );
    let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
    let dir = tempfile::tempdir()?;
    let (db_url, mysql, backend) = match Database::from_flag(cli.database_url.as_deref()) {
        Database::Sqlite => (
            format!("sqlite://{}/queues.db", dir.path().display()),
            None,
            "SQLite",
        ),
        Database::MySql(server) => {
            let name = format!("hmdp_bench_queues_{tag}");
            (format!("{server}/{name}"), Some((server, name)), "MariaDB")
        }
    };
    let rig = Rig::new(
        args,
        &cli.redis_url,
        &db_url,
        &format!("bench:queues:{tag}:"),
        "q_",
        std::env::current_exe()?,
    )
    .await?;
    let mut outcomes = Vec::new();
    for &t in &args.transports {
        eprintln!("queues: {} ({} orders)", t.label(), args.orders);
        outcomes.push(run_transport(&rig, t).await.unwrap_or_else(|e| {
            eprintln!("queues: {}: {e:#}", t.name());
            TransportOutcome {
                transport: t,
                accepted: 0,
                rows: 0,
                distinct: 0,
                kills: 0,
                active: 0.0,
                notes: Vec::new(),
                error: Some(format!("{e:#}")),
            }
        }));
    }
    rig.db.close().await;
    drop(dir);
    if let Some((server, name)) = mysql {
        let dropped = async {
            let mut c = sqlx::MySqlConnection::connect(&server).await?;
            c.execute(format!("DROP DATABASE IF EXISTS `{name}`").as_str())
                .await?;
            anyhow::Ok(())
        };
        if let Err(e) = dropped.await {
            eprintln!("queues: could not drop the database {name}: {e:#}");
        }
    }
    Ok(report(args, backend, &outcomes))
}

/// One transport's sale, kills and count, then its Redis key or RabbitMQ queue deleted (the
/// consumer's table stays).
pub async fn run_transport(rig: &Rig<'_>, t: Transport) -> anyhow::Result<TransportOutcome> {
    let key = format!("{}{}", rig.key_prefix, t.name());
    let result = measure(rig, t, &key).await;
    if let Err(e) = clean_up(rig, t, &key).await {
        eprintln!("queues: {}: clean-up failed: {e:#}", t.name());
    }
    result
}

/// The RabbitMQ exchange and queue of a run: `key` + `.direct` / `.queue`.
fn amqp_names(key: &str) -> (String, String) {
    (format!("{key}.direct"), format!("{key}.queue"))
}

async fn measure(ctx: &Rig<'_>, t: Transport, key: &str) -> anyhow::Result<TransportOutcome> {
    let (args, n) = (ctx.args, ctx.args.orders);
    let table = ctx.table(t);
    hmdp::on_pool!(&ctx.db, pool => {
        sqlx::query(&format!("CREATE TABLE {table} (order_id BIGINT NOT NULL, user_id BIGINT NOT NULL, voucher_id BIGINT NOT NULL)")).execute(pool).await?;
        sqlx::query(&format!("CREATE INDEX {table}_order_id ON {table} (order_id)")).execute(pool).await?;
    });
    let mut redis = redis_conn(&ctx.redis_url).await?;
    let mut rabbit = None;
    let mut notes = Vec::new();
    let mut accepted = n;
    // The sale, for the transports that keep a backlog: every order is enqueued first.
    match t {
        Transport::InProcess | Transport::PubSub => {}
        Transport::List => push_list(&mut redis, key, n).await?,
        Transport::Stream => add_stream(&mut redis, key, n).await?,
        Transport::Rabbitmq => {
            let (conn, channel, confirmed) = publish_rabbitmq(&args.amqp_url, key, n).await?;
            accepted = confirmed;
            if confirmed < n {
                notes.push(format!("{} not confirmed by the broker", n - confirmed));
            }
            rabbit = Some((conn, channel));
        }
    }
    if rabbit.is_some() || matches!(t, Transport::List | Transport::Stream) {
        ctx.progress(format_args!("{}: {accepted} orders enqueued", t.name()));
    }
    let queue = match t {
        Transport::Rabbitmq => amqp_names(key).1,
        _ => key.to_owned(),
    };

    let started = Instant::now();
    let (mut consumer, mut log) = spawn_consumer(ctx, t, &queue, &table, 1)?;
    let publisher = match t {
        Transport::PubSub => {
            wait_for_subscriber(&mut redis, key, &mut consumer, &log).await?;
            let (r, k) = (redis.clone(), key.to_owned());
            Some(tokio::spawn(publish_steadily(r, k, n, args.pubsub_rate)))
        }
        _ => None,
    };

    let threshold =
        |k: u32| ((accepted as f64 * args.kill_after * f64::from(k + 1)).ceil() as u64).max(1);
    let quiet = Duration::from_secs_f64(args.quiet.max(0.5));
    let (mut rows, mut last_row, mut idle_since) = (0u64, started, started);
    // Kills done, the last one (until the first row after its restart), and the dead time.
    let mut kills = 0u32;
    let mut killed: Option<Instant> = None;
    let mut gap = Duration::ZERO;
    loop {
        tokio::time::sleep(POLL).await;
        if let Some(status) = consumer.try_wait()? {
            anyhow::bail!(
                "the consumer exited by itself ({status}): {}",
                last_line(&log)
            );
        }
        let now = count_rows(&ctx.db, &table).await?;
        if now != rows {
            rows = now;
            (last_row, idle_since) = (Instant::now(), Instant::now());
            if let Some(k) = killed.take() {
                gap += last_row - k;
                notes.push(format!(
                    "first row after restart {kills}: {:.2} s after the kill",
                    (last_row - k).as_secs_f64()
                ));
            }
        }
        if kills < args.kills.max(1) && threshold(kills) < accepted {
            if rows >= threshold(kills) {
                consumer.start_kill()?;
                consumer.wait().await?;
                let at = Instant::now();
                ctx.progress(format_args!(
                    "{}: kill -9 of the consumer at {rows} rows ({:.2} s)",
                    t.name(),
                    (at - started).as_secs_f64()
                ));
                tokio::time::sleep(Duration::from_millis(args.downtime_ms)).await;
                // What the database committed for the dead consumer (a statement it had sent
                // before the kill) belongs before the restart.
                let after = count_rows(&ctx.db, &table).await?;
                let committed_after = match after - rows {
                    0 => String::new(),
                    late => format!(" (+{late} committed after it)"),
                };
                notes.push(format!(
                    "killed at {rows} rows{committed_after}, {:.2} s in; restarted {} ms later",
                    (at - started).as_secs_f64(),
                    args.downtime_ms
                ));
                if after != rows {
                    (rows, last_row) = (after, at);
                }
                kills += 1;
                (consumer, log) = spawn_consumer(ctx, t, &queue, &table, kills + 1)?;
                (killed, idle_since) = (Some(at), Instant::now());
                continue;
            } else if kills == 0 {
                if idle_since.elapsed() > quiet {
                    anyhow::bail!("the consumer stalled at {rows} rows before the kill");
                }
                continue;
            }
            // After a kill that lost the rest (nothing more comes), the quiet period ends it.
        }
        if publisher.as_ref().is_some_and(|p| !p.is_finished()) {
            // The sale is still on: the quiet period starts when it ends.
            idle_since = Instant::now();
            continue;
        }
        let idle = idle_since.elapsed();
        if idle >= quiet {
            break;
        }
        // Done early: every order is in, and the transport holds nothing more to deliver.
        if idle >= Duration::from_secs(1) && rows >= accepted {
            let (_, distinct) = counts(&ctx.db, &table).await?;
            let backlog = backlog(t, &mut redis, key, rabbit.as_ref().map(|(_, ch)| ch)).await?;
            if distinct >= accepted && backlog == Some(0) {
                break;
            }
        }
    }
    let _ = consumer.start_kill();
    let _ = consumer.wait().await;

    let (rows, distinct) = counts(&ctx.db, &table).await?;
    if let Some(left) = backlog(t, &mut redis, key, rabbit.as_ref().map(|(_, ch)| ch)).await?
        && left > 0
    {
        notes.push(format!("{left} still queued at the end"));
    }
    if let Some((conn, _)) = rabbit {
        let _ = conn.close(200, "done".into()).await;
    }
    if let Some(p) = publisher {
        let (published, nobody) = p.await??;
        accepted = published;
        notes.push(format!(
            "{nobody} of {published} published while no subscriber was connected; \
             drain bounded by the publish rate"
        ));
    }
    let active = (last_row - started).saturating_sub(gap).as_secs_f64();
    notes.push(t.claim().to_owned());
    ctx.progress(format_args!(
        "{}: {distinct} written, {rows} rows, {} lost",
        t.name(),
        accepted.saturating_sub(distinct)
    ));
    Ok(TransportOutcome {
        transport: t,
        kills,
        accepted,
        rows,
        distinct,
        active,
        notes,
        error: None,
    })
}

fn spawn_consumer(
    ctx: &Rig<'_>,
    t: Transport,
    queue: &str,
    table: &str,
    start: u32,
) -> anyhow::Result<(Child, PathBuf)> {
    let log = ctx.dir.path().join(format!("{}-{start}.log", t.name()));
    let mut cmd = Command::new(&ctx.exe);
    cmd.arg("queues-consumer")
        .args([
            "--transport",
            &t.name(),
            "--db",
            &ctx.db_url,
            "--table",
            table,
        ])
        .args(["--key", queue, "--redis-url", &ctx.redis_url])
        .args(["--amqp-url", &ctx.args.amqp_url])
        .args(["--batch", &ctx.args.batch.to_string()])
        .args(["--hold-ms", &ctx.args.hold_ms.to_string()]);
    if t == Transport::InProcess && start == 1 {
        cmd.args(["--produce", &ctx.args.orders.to_string()]);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .kill_on_drop(true);
    let child = cmd.spawn().context("starting the consumer process")?;
    Ok((child, log))
}

fn last_line(log: &Path) -> String {
    std::fs::read_to_string(log)
        .ok()
        .and_then(|s| {
            s.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "no output".into())
}

async fn count_rows(db: &Db, table: &str) -> anyhow::Result<u64> {
    let sql = format!("SELECT COUNT(*) FROM {table}");
    let n: i64 =
        hmdp::on_pool!(db, pool => sqlx::query_scalar(sql.as_str()).fetch_one(pool).await?);
    Ok(n as u64)
}

/// `(rows, distinct order ids)`.
async fn counts(db: &Db, table: &str) -> anyhow::Result<(u64, u64)> {
    let sql = format!("SELECT COUNT(*), COUNT(DISTINCT order_id) FROM {table}");
    let (rows, distinct): (i64, i64) =
        hmdp::on_pool!(db, pool => sqlx::query_as(sql.as_str()).fetch_one(pool).await?);
    Ok((rows as u64, distinct as u64))
}

/// Orders the transport still holds for the consumer, where it can tell.
async fn backlog(
    t: Transport,
    r: &mut MultiplexedConnection,
    key: &str,
    rabbit: Option<&Channel>,
) -> anyhow::Result<Option<u64>> {
    Ok(match t {
        Transport::List => Some(redis::cmd("LLEN").arg(key).query_async(r).await?),
        Transport::Stream => {
            let info: StreamInfoGroupsReply = redis::cmd("XINFO")
                .arg("GROUPS")
                .arg(key)
                .query_async(r)
                .await?;
            info.groups
                .first()
                .and_then(|g| g.lag.map(|lag| (g.pending + lag) as u64))
        }
        Transport::Rabbitmq => match rabbit {
            Some(ch) => Some(u64::from(topology::depth(ch, &amqp_names(key).1).await?)),
            None => None,
        },
        Transport::InProcess | Transport::PubSub => None,
    })
}

async fn push_list(r: &mut MultiplexedConnection, key: &str, n: u64) -> anyhow::Result<()> {
    for start in (1..=n).step_by(1000) {
        let bodies: Vec<Vec<u8>> = (start..=n.min(start + 999))
            .map(|id| OrderMessage::body(&order(id)))
            .collect();
        let _: i64 = redis::cmd("LPUSH")
            .arg(key)
            .arg(bodies)
            .query_async(r)
            .await?;
    }
    Ok(())
}

/// The stream entries of the course's Lua script: `userId`, `voucherId`, `id`.
async fn add_stream(r: &mut MultiplexedConnection, key: &str, n: u64) -> anyhow::Result<()> {
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(key)
        .arg(GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(r)
        .await?;
    for start in (1..=n).step_by(1000) {
        let mut pipe = redis::pipe();
        for id in start..=n.min(start + 999) {
            let o = order(id);
            pipe.cmd("XADD")
                .arg(key)
                .arg("*")
                .arg("userId")
                .arg(o.user_id)
                .arg("voucherId")
                .arg(o.voucher_id)
                .arg("id")
                .arg(o.id)
                .ignore();
        }
        let _: () = pipe.query_async(r).await?;
    }
    Ok(())
}

/// Publishes N orders at `rate` a second; `(published, received by no subscriber)`.
async fn publish_steadily(
    mut r: MultiplexedConnection,
    channel: String,
    n: u64,
    rate: u64,
) -> anyhow::Result<(u64, u64)> {
    let start = Instant::now();
    let (mut next, mut nobody) = (1u64, 0u64);
    while next <= n {
        let due = ((start.elapsed().as_secs_f64() * rate.max(1) as f64) as u64 + 1).min(n);
        if due >= next {
            let mut pipe = redis::pipe();
            for id in next..=due {
                pipe.cmd("PUBLISH")
                    .arg(&channel)
                    .arg(OrderMessage::body(&order(id)));
            }
            let receivers: Vec<u64> = pipe.query_async(&mut r).await?;
            nobody += receivers.iter().filter(|&&c| c == 0).count() as u64;
            next = due + 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok((n, nobody))
}

async fn wait_for_subscriber(
    r: &mut MultiplexedConnection,
    channel: &str,
    consumer: &mut Child,
    log: &Path,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let subs: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query_async(r)
            .await?;
        if subs.iter().any(|(_, n)| *n > 0) {
            return Ok(());
        }
        if let Some(status) = consumer.try_wait()? {
            anyhow::bail!(
                "the consumer exited by itself ({status}): {}",
                last_line(log)
            );
        }
        anyhow::ensure!(Instant::now() < deadline, "the consumer never subscribed");
        tokio::time::sleep(POLL).await;
    }
}

/// Declares a durable direct exchange and a durable quorum queue of this run (the options of
/// `hmdp::testing::amqp::topology`), publishes N persistent, mandatory messages with confirms; the
/// connection, its channel and how many orders the broker confirmed.
async fn publish_rabbitmq(
    url: &str,
    key: &str,
    n: u64,
) -> anyhow::Result<(Connection, Channel, u64)> {
    let (exchange, queue) = amqp_names(key);
    let conn = hmdp::testing::amqp::connect(url, "hmdp-bench queues producer").await?;
    let ch = conn.create_channel().await?;
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare(
        exchange.as_str().into(),
        ExchangeKind::Direct,
        durable,
        FieldTable::default(),
    )
    .await?;
    let mut quorum = FieldTable::default();
    quorum.insert(
        "x-queue-type".into(),
        AMQPValue::LongString(LongString::from(b"quorum".to_vec())),
    );
    ch.queue_declare(
        queue.as_str().into(),
        QueueDeclareOptions::durable(),
        quorum,
    )
    .await?;
    ch.queue_bind(
        queue.as_str().into(),
        exchange.as_str().into(),
        topology::ROUTING_KEY.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    ch.confirm_select(ConfirmSelectOptions::default()).await?;
    let mandatory = BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    };
    let mut confirmed = 0;
    for start in (1..=n).step_by(1000) {
        let mut confirms = Vec::new();
        for id in start..=n.min(start + 999) {
            let o = order(id);
            let props = BasicProperties::default()
                .with_delivery_mode(2)
                .with_content_type(CONTENT_TYPE.into())
                .with_message_id(o.id.to_string().into());
            let body = OrderMessage::body(&o);
            confirms.push(
                ch.basic_publish(
                    exchange.as_str().into(),
                    topology::ROUTING_KEY.into(),
                    mandatory,
                    &body,
                    props,
                )
                .await?,
            );
        }
        for c in confirms {
            if matches!(c.await?, Confirmation::Ack(None)) {
                confirmed += 1;
            }
        }
    }
    Ok((conn, ch, confirmed))
}

/// Deletes the run's Redis key, or its RabbitMQ queue and exchange.
async fn clean_up(ctx: &Rig<'_>, t: Transport, key: &str) -> anyhow::Result<()> {
    match t {
        Transport::List | Transport::Stream => {
            let _: i64 = redis::cmd("DEL")
                .arg(key)
                .query_async(&mut redis_conn(&ctx.redis_url).await?)
                .await?;
        }
        Transport::Rabbitmq => {
            let (exchange, queue) = amqp_names(key);
            let conn =
                hmdp::testing::amqp::connect(&ctx.args.amqp_url, "hmdp-bench queues clean-up")
                    .await?;
            let ch = conn.create_channel().await?;
            ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                .await?;
            ch.exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
                .await?;
            let _ = conn.close(200, "done".into()).await;
        }
        Transport::InProcess | Transport::PubSub => {}
    }
    Ok(())
}

fn report(args: &QueuesArgs, backend: &str, outcomes: &[TransportOutcome]) -> Report {
    let mut report = Report::new("queues", 1);
    report.summary.push(format!(
        "{} orders per transport into {backend}, batches of up to {}; consumer killed (SIGKILL) up to {} times, \
         every {:.0} % written, restarted {} ms later; Pub/Sub published at {}/s",
        args.orders,
        args.batch,
        args.kills,
        args.kill_after * 100.0,
        args.downtime_ms,
        args.pubsub_rate
    ));
    report.summary.push(String::new());
    report.summary.push(format!(
        "| {:<40} | {:>8} | {:>8} | {:>8} | {:>13} | {:>14} |",
        "transport", "accepted", "written", "lost", "written twice", "drain orders/s"
    ));
    report.summary.push(format!(
        "|{:-<42}|{:->10}|{:->10}|{:->10}|{:->15}|{:->16}|",
        "", "", "", "", "", ""
    ));
    for o in outcomes {
        let label = o.transport.label();
        if let Some(e) = &o.error {
            report.summary.push(format!("| {label:<40} | error: {e}"));
            let mut row = Row::figure(label, 0, 0.0).note(format!("error: {e}"));
            row.errors.insert("error".into(), 1);
            report.rows.push(row);
            continue;
        }
        report.summary.push(format!(
            "| {label:<40} | {:>8} | {:>8} | {:>8} | {:>13} | {:>14.0} |",
            o.accepted,
            o.distinct,
            o.lost(),
            o.twice(),
            o.rate()
        ));
        let mut row = Row::figure(label, o.distinct, o.active).note(format!(
            "accepted {}, written {} ({} rows), lost {}, written twice {}",
            o.accepted,
            o.distinct,
            o.rows,
            o.lost(),
            o.twice()
        ));
        for n in &o.notes {
            row = row.note(n.clone());
        }
        row.errors.insert("lost".into(), o.lost());
        row.errors.insert("written_twice".into(), o.twice());
        report.rows.push(row);
        if matches!(o.transport, Transport::Stream | Transport::Rabbitmq) {
            report.checks.push(Check {
                name: format!("{label}: no order lost across kill -9"),
                ok: o.lost() == 0,
                detail: format!("{} accepted, {} written", o.accepted, o.distinct),
            });
        }
    }
    report
}
