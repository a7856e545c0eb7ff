//! 优惠券秒杀: one order per user. A few users, each firing many requests at once, for a voucher
//! with stock for all of them, so only the per-user check can refuse. Counting the user's
//! orders before inserting is a check-then-act race; a per-user lock in the process fixes it
//! for one process and not for two (each has its own lock, and the lab runs the second as a
//! real OS process); a Redis lock fixes it across processes; the service decides in one Lua
//! script with the voucher's buyer set.
//!
//! In the two-process run of the local lock, each process's request that counted no order yet
//! then waits at a Redis barrier (a per-user counter) until the other process's has counted
//! too, so the two checks overlap on every run, not only when both land inside [`WINDOW`].
//!
//! Each step is one statement committed at once, as in `oversell`: the lock versions thus
//! commit their order before the lock is released, which is what the course's "transaction
//! inside the lock" is for. (A transaction around the steps would let SQLite serialize the
//! writers and hide the two-process race that MySQL shows.)

use std::{
    collections::HashMap,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context;
use redis::aio::ConnectionManager;
use sqlx::AnyPool;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{Experiment, Text, version};
use crate::{
    Lab, LabOptions, Outcome, Trace,
    service::Service,
    setnx::SetNx,
    trace::{Actor, Decrement, Event, What},
};

/// Users buying.
const USERS: i64 = 4;
/// Requests each user fires at once (split between the processes where there are two).
const REQUESTS: i64 = 16;
/// Stock for every request, so that only the one-per-user check refuses.
const STOCK: i64 = USERS * REQUESTS;
/// The course's `Thread.sleep`-style window between counting the user's orders and inserting
/// one: it makes the race happen on every run, and is wider than two processes' start apart.
const WINDOW: Duration = Duration::from_millis(100);
/// The Redis lock's TTL: far longer than one purchase.
const LOCK_TTL: Duration = Duration::from_secs(10);
/// How long a second process may take to start and say it is ready.
const START_PATIENCE: Duration = Duration::from_secs(30);
/// The two processes of the versions that run as two instances.
const INSTANCES: i64 = 2;
/// How long a process may take to buy once started.
const RUN_PATIENCE: Duration = Duration::from_secs(60);
/// How long a request waits at the barrier for the other process's, at most.
const BARRIER_PATIENCE: Duration = Duration::from_secs(5);
/// How often a request at the barrier reads the counter.
const BARRIER_POLL: Duration = Duration::from_millis(2);
/// Requests whose steps the trace shows: those of one user that got an order, and one refused.
const TRACED_REQUESTS: usize = 3;

pub static EXPERIMENT: Experiment = Experiment {
    name: "one-per-user",
    chapter: "优惠券秒杀",
    invariant: "every user who asks gets exactly one order of the voucher, never two",
    invariant_zh: "每个下单的用户恰好得到一张订单，绝不会有两张",
    lesson: Text {
        zh: "一人一单的“先查再插”要整段加锁，而且锁要跨实例：进程内的锁到了两个进程就失效。",
        en: "The check-then-insert of one order per user needs one lock around it, shared by every instance: a process's own lock fails with two processes.",
    },
    versions: &[
        version!(
            "v3-check-then-insert",
            false,
            "count the user's orders, refuse if any, else decrement and insert",
            "查该用户的订单数，有就拒绝，没有就扣库存、插入订单",
            check_then_insert
        ),
        version!(
            "v4-local-lock-1-instance",
            true,
            "the same steps under a per-user lock of the process, one process",
            "同样的步骤放进进程内按用户加的锁里，一个进程",
            local_lock_1_instance
        ),
        version!(
            "v4-local-lock-2-instances",
            false,
            "the same per-user lock of the process, in two processes at once",
            "同样的进程内按用户加锁，两个进程同时跑",
            local_lock_2_instances
        ),
        version!(
            "v5-redis-lock",
            true,
            "SET lock:order:<user> NX PX, unlocked by a compare-and-delete script, two processes",
            "SET lock:order:<user> NX PX，用比较并删除的脚本解锁，两个进程",
            redis_lock
        ),
        version!(
            "hmdp",
            true,
            "the service: its grab script checks the voucher's buyer set, its worker writes",
            "本服务：抢购脚本检查该券的已购用户集合，worker 写订单",
            hmdp
        ),
    ],
};

/// What guards one user's purchase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Guard {
    /// Nothing.
    None,
    /// A mutex per user in this process (`synchronized (userId.toString().intern())`).
    Local,
    /// `SET NX PX` per user in Redis, failing at once when taken.
    Redis,
}

/// One process of a version that runs as two: started by the lab with `hmdp-lab instance
/// one-per-user …`; it says `ready`, waits for a line on stdin, then buys.
#[derive(Debug, clap::Args)]
pub struct InstanceArgs {
    #[arg(long, value_enum)]
    guard: Guard,
    #[arg(long)]
    voucher: i64,
    #[arg(long)]
    users: i64,
    /// Requests per user in this process.
    #[arg(long)]
    requests: i64,
    #[arg(long)]
    database_url: String,
    #[arg(long)]
    redis_url: String,
    /// The Redis lock's key, less the user id (a key of the parent lab's).
    #[arg(long)]
    lock_prefix: String,
    /// The barrier's key, less the user id (a key of the parent lab's), where a request that
    /// counted no order waits for the other process's; none: no barrier.
    #[arg(long)]
    barrier_prefix: Option<String>,
    /// Which of the processes this is (0 = A), as its trace events name it.
    #[arg(long)]
    instance: u8,
    /// The version's start on the wall clock, in µs since the epoch: this process's trace
    /// events are timed from it and printed on stdout as JSON lines when it is done.
    #[arg(long)]
    trace_origin_us: u64,
}

async fn check_then_insert(lab: &Lab) -> anyhow::Result<Outcome> {
    in_process(lab, Guard::None).await
}

async fn local_lock_1_instance(lab: &Lab) -> anyhow::Result<Outcome> {
    in_process(lab, Guard::Local).await
}

async fn local_lock_2_instances(lab: &Lab) -> anyhow::Result<Outcome> {
    two_processes(lab, Guard::Local).await
}

async fn redis_lock(lab: &Lab) -> anyhow::Result<Outcome> {
    two_processes(lab, Guard::Redis).await
}

/// Every request in this process.
async fn in_process(lab: &Lab, guard: Guard) -> anyhow::Result<Outcome> {
    let voucher = lab.new_voucher(STOCK).await?;
    let trace = Trace::start();
    let buying = Buying {
        db: lab.db.clone(),
        redis: lab.redis.clone(),
        lock_prefix: lab.key("lock:order:"),
        barrier_prefix: None,
        guard,
        voucher,
        trace: trace.clone(),
        instance: None,
    };
    buying.fire(USERS, REQUESTS).await?;
    counted(lab, voucher, 1, &trace).await
}

/// Half of each user's requests in each of two processes of this binary, started together.
async fn two_processes(lab: &Lab, guard: Guard) -> anyhow::Result<Outcome> {
    let voucher = lab.new_voucher(STOCK).await?;
    // The local locks let one request per user and process through at a time: the barrier
    // holds each process's first one until the other's has counted too.
    let barrier = (guard == Guard::Local).then(|| lab.key(&format!("barrier:{voucher}:")));
    let trace = Trace::start();
    let mut children = Vec::new();
    for instance in 0..INSTANCES {
        let mut command = tokio::process::Command::new(&lab.exe);
        command
            .arg("instance")
            .arg("one-per-user")
            .args(["--guard", guard_name(guard)])
            .args(["--voucher", &voucher.to_string()])
            .args(["--users", &USERS.to_string()])
            .args(["--requests", &(REQUESTS / INSTANCES).to_string()])
            .args(["--database-url", &lab.database_url])
            .args(["--redis-url", &lab.redis_url])
            .args(["--lock-prefix", &lab.key("lock:order:")])
            .args(["--instance", &instance.to_string()])
            .args(["--trace-origin-us", &trace.origin_unix_us().to_string()]);
        if let Some(barrier) = &barrier {
            command.args(["--barrier-prefix", barrier]);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", lab.exe.display()))?;
        let stdin = child.stdin.take().context("the instance's stdin")?;
        let mut stdout = BufReader::new(child.stdout.take().context("the instance's stdout")?);
        let mut line = String::new();
        tokio::time::timeout(START_PATIENCE, stdout.read_line(&mut line))
            .await
            .context("a second process did not start in time")??;
        anyhow::ensure!(
            line.trim() == "ready",
            "{} said {line:?} instead of ready: is it this lab's binary?",
            lab.exe.display()
        );
        children.push((child, stdin, stdout));
    }
    lab.progress(format_args!("{INSTANCES} processes ready"));
    for (_, stdin, _) in &mut children {
        stdin.write_all(b"go\n").await?;
        stdin.flush().await?;
    }
    let finishing: Vec<_> = children
        .into_iter()
        .map(|(mut child, stdin, mut stdout)| {
            tokio::spawn(async move {
                // What the process prints once it is done buying: its trace events.
                let mut events = Vec::new();
                let mut line = String::new();
                while stdout.read_line(&mut line).await? > 0 {
                    let event: Event = serde_json::from_str(line.trim())
                        .with_context(|| format!("an instance printed {line:?}"))?;
                    events.push(event);
                    line.clear();
                }
                drop(stdin);
                let status = child.wait().await?;
                anyhow::ensure!(status.success(), "an instance failed: {status}");
                anyhow::Ok(events)
            })
        })
        .collect();
    for f in finishing {
        let events = tokio::time::timeout(RUN_PATIENCE, f)
            .await
            .with_context(|| format!("an instance did not finish within {RUN_PATIENCE:?}"))???;
        trace.merge(events);
    }
    counted(lab, voucher, INSTANCES, &trace).await
}

fn guard_name(guard: Guard) -> &'static str {
    match guard {
        Guard::None => "none",
        Guard::Local => "local",
        Guard::Redis => "redis",
    }
}

/// `hmdp-lab instance one-per-user …`: one of the two processes; its exit code.
pub async fn instance(args: InstanceArgs) -> i32 {
    match run_instance(args).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hmdp-lab instance: {e:#}");
            2
        }
    }
}

async fn run_instance(args: InstanceArgs) -> anyhow::Result<()> {
    let lab = Lab::open(LabOptions {
        redis_url: args.redis_url,
        // The instances buy through the database and Redis only.
        amqp_url: String::new(),
        database_url: Some(args.database_url),
        exe: std::env::current_exe()?,
        progress: false,
    })
    .await?;
    // Connections opened before the start, so that both processes start buying at once.
    sqlx::query("SELECT 1").execute(&lab.db).await?;
    println!("ready");
    let mut go = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut go)
        .await?;
    let buying = Buying {
        db: lab.db.clone(),
        redis: lab.redis.clone(),
        lock_prefix: args.lock_prefix,
        barrier_prefix: args.barrier_prefix,
        guard: args.guard,
        voucher: args.voucher,
        trace: Trace::joining(args.trace_origin_us),
        instance: Some(args.instance),
    };
    buying.fire(args.users, args.requests).await?;
    for event in buying.trace.events() {
        println!("{}", serde_json::to_string(&event)?);
    }
    Ok(())
}

/// The service: every request through its grab, then the orders its worker wrote.
async fn hmdp(lab: &Lab) -> anyhow::Result<Outcome> {
    let service = Service::start(lab).await?;
    let voucher = service.new_sale(STOCK).await?;
    let mut requests = Vec::new();
    for user in 1..=USERS {
        for _ in 0..REQUESTS {
            let buyer = service.buyer();
            requests.push(tokio::spawn(async move { buyer.buy(user, voucher).await }));
        }
    }
    let mut accepted = 0;
    for r in requests {
        accepted += i64::from(r.await??);
    }
    let (orders, doubled) = service.written(voucher, accepted).await?;
    let left = service.stock(voucher).await?;
    let database = service.database_url.clone();
    service.stop().await?;
    Ok(outcome(voucher, 1, orders, doubled, left).metric("database", database))
}

/// What the lab's database holds for the voucher, and whether each user got exactly one; the
/// trace shows the requests of one user, the first to get two orders if one did.
async fn counted(
    lab: &Lab,
    voucher: i64,
    instances: i64,
    trace: &Trace,
) -> anyhow::Result<Outcome> {
    let (orders, doubled) = lab.orders(voucher).await?;
    let left = lab.stock(voucher).await?;
    let events = trace.events();
    let user = doubled_first(&events).unwrap_or(1);
    let theirs: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM tb_voucher_order WHERE user_id = ? AND voucher_id = ?",
    )
    .bind(user)
    .bind(voucher)
    .fetch_one(&lab.db)
    .await?;
    trace.record(
        Actor::Lab,
        What::UserOrders {
            user,
            orders: theirs,
        },
    );
    let shown = requests_of(&events, user);
    let timeline = trace.timeline(|e| e.actor == Actor::Lab || shown.contains(&e.actor), 64);
    Ok(outcome(voucher, instances, orders, doubled, left).traced(timeline))
}

/// The first user whose second order was inserted, by the events' times.
fn doubled_first(events: &[Event]) -> Option<i64> {
    let mut inserted: std::collections::HashMap<i64, u32> = Default::default();
    events.iter().find_map(|e| match e.what {
        What::InsertOrder { user } => {
            let n = inserted.entry(user).or_default();
            *n += 1;
            (*n == 2).then_some(user)
        }
        _ => None,
    })
}

/// `user`'s requests worth showing: the first few that inserted an order, and the first that
/// found an order already there.
fn requests_of(events: &[Event], user: i64) -> Vec<Actor> {
    let mut shown: Vec<Actor> = events
        .iter()
        .filter(|e| e.actor.user() == Some(user) && matches!(e.what, What::InsertOrder { .. }))
        .map(|e| e.actor)
        .take(TRACED_REQUESTS)
        .collect();
    shown.extend(
        events
            .iter()
            .find(|e| {
                e.actor.user() == Some(user)
                    && matches!(e.what, What::CountOrders { count } if count > 0)
            })
            .map(|e| e.actor),
    );
    shown
}

fn outcome(voucher: i64, instances: i64, orders: i64, doubled: i64, left: i64) -> Outcome {
    Outcome::new(doubled == 0 && orders == USERS)
        .metric("users", USERS)
        .metric("requests", USERS * REQUESTS)
        .metric("instances", instances)
        .metric("stock", STOCK)
        .metric("orders", orders)
        .metric("users_with_two_or_more", doubled)
        .metric("stock_left", left)
        .voucher(voucher)
}

/// One process's purchases of one voucher, each through the course's steps under `guard`.
#[derive(Clone)]
struct Buying {
    db: AnyPool,
    redis: ConnectionManager,
    lock_prefix: String,
    barrier_prefix: Option<String>,
    guard: Guard,
    voucher: i64,
    trace: Trace,
    /// This process, where the version runs two.
    instance: Option<u8>,
}

impl Buying {
    /// `requests` purchases per user for `users` users, all at once.
    async fn fire(&self, users: i64, requests: i64) -> anyhow::Result<()> {
        let locks: Arc<Mutex<HashMap<i64, Arc<tokio::sync::Mutex<()>>>>> = Arc::default();
        let mut tasks = Vec::new();
        for user in 1..=users {
            for n in 1..=requests {
                let (buying, locks) = (self.clone(), locks.clone());
                let me = Actor::Request {
                    user,
                    n,
                    instance: self.instance,
                };
                tasks.push(tokio::spawn(async move {
                    match buying.guard {
                        Guard::Local => {
                            let mutex = locks
                                .lock()
                                .expect("the lock map")
                                .entry(user)
                                .or_default()
                                .clone();
                            let _held = mutex.lock().await;
                            buying.trace.record(me, What::LocalLock);
                            buying.buy(user, me).await?;
                        }
                        Guard::Redis => {
                            let key = format!("{}{user}", buying.lock_prefix);
                            let lock = SetNx::new(buying.redis.clone(), key, LOCK_TTL);
                            let ok = lock.try_acquire().await?;
                            let refused_before = 0;
                            buying.trace.record(me, What::SetNx { ok, refused_before });
                            if ok {
                                let bought = buying.buy(user, me).await;
                                let deleted = lock.unlock().await?;
                                buying.trace.record(me, What::ScriptUnlock { deleted });
                                bought?;
                            }
                        }
                        Guard::None => {
                            buying.buy(user, me).await?;
                        }
                    }
                    anyhow::Ok(())
                }));
            }
        }
        for t in tasks {
            t.await??;
        }
        Ok(())
    }

    /// The course's steps: count the user's orders, refuse if any, (window), decrement the
    /// stock if positive, insert the order. Whether it bought.
    async fn buy(&self, user: i64, me: Actor) -> anyhow::Result<bool> {
        let mine: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM tb_voucher_order WHERE user_id = ? AND voucher_id = ?",
        )
        .bind(user)
        .bind(self.voucher)
        .fetch_one(&self.db)
        .await?;
        self.trace.record(me, What::CountOrders { count: mine });
        if mine > 0 {
            return Ok(false);
        }
        if let Some(prefix) = &self.barrier_prefix {
            self.meet(&format!("{prefix}{user}")).await?;
        }
        tokio::time::sleep(WINDOW).await;
        let taken = sqlx::query(
            "UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = ? AND stock > 0",
        )
        .bind(self.voucher)
        .execute(&self.db)
        .await?
        .rows_affected();
        self.trace.record(
            me,
            What::Decrement {
                how: Decrement::IfPositive,
                affected: taken,
            },
        );
        if taken == 0 {
            return Ok(false);
        }
        // A random id: two processes insert for the same user, and order ids are another
        // chapter's subject.
        let id = (rand::random::<u64>() >> 1) as i64;
        sqlx::query("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (?, ?, ?)")
            .bind(id)
            .bind(user)
            .bind(self.voucher)
            .execute(&self.db)
            .await?;
        self.trace.record(me, What::InsertOrder { user });
        Ok(true)
    }

    /// Counts this request in at `key` and waits, for at most [`BARRIER_PATIENCE`], until
    /// every process's has.
    async fn meet(&self, key: &str) -> anyhow::Result<()> {
        let mut conn = self.redis.clone();
        let mut here: i64 = redis::cmd("INCR").arg(key).query_async(&mut conn).await?;
        let deadline = tokio::time::Instant::now() + BARRIER_PATIENCE;
        while here < INSTANCES && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(BARRIER_POLL).await;
            here = redis::cmd("GET").arg(key).query_async(&mut conn).await?;
        }
        Ok(())
    }
}
