//! 秒杀优化: one hot voucher on a Redis Cluster. The course keeps a voucher's stock in one key,
//! so every grab of a hot sale runs on the master that owns that key's slot, however many
//! masters the cluster has. Splitting the stock over keys in different slots (库存分桶) spreads
//! the grabs, and brings two ways to get it wrong: a buyer pinned to one bucket is told "sold
//! out" while other buckets still hold units, and one script that scans every bucket works on a
//! single Redis but is refused by a cluster (a script's keys must share one slot). hmdp grabs in
//! the buyer's home bucket and borrows from the others, one slot per script.
//!
//! Every version runs on a private three-master cluster started for it, so each master's
//! command counts are the version's alone. The buyers arrive as a stream, [`IN_FLIGHT`] grabs at
//! a time, and after every refusal the lab holds the crowd and reads every bucket: the stock
//! only goes down during a sale, so units seen then were there when the buyer was refused.

use std::{process::Stdio, sync::Arc};

use anyhow::Context;
use futures_util::future::try_join_all;
use hmdp::testing::domain::StockBuckets;
use hmdp_testkit::RedisCluster;
use redis::{
    aio::{ConnectionLike, MultiplexedConnection},
    cluster_async::ClusterConnection,
};
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock, Semaphore};

use super::{Experiment, Text, version};
use crate::{
    Lab, Outcome, Trace,
    service::Service,
    trace::{Actor, Event, What},
};

/// Units on sale in each version.
const STOCK: i64 = 60;
/// Buckets of the split versions: with 12 the hash tags below fall 3, 4 and 5 on the masters.
const BUCKETS: i64 = 12;
/// Buyers, each a different user asking once.
const BUYERS: i64 = 300;
/// Grabs on their way at any moment: a crowd that keeps arriving rather than one burst, so that
/// a refusal can be compared with the stock of that moment (see [`Crowd`]).
const IN_FLIGHT: usize = 8;
/// The largest share of the scripts one master may run for the grabs to count as spread: half,
/// where three masters sharing evenly run a third each.
const MOST_ON_ONE_MASTER: f64 = 0.5;

pub static EXPERIMENT: Experiment = Experiment {
    name: "hot-voucher",
    chapter: "秒杀优化",
    invariant: "every unit sold, none twice, no buyer refused while a bucket held a unit, and the \
                grab scripts spread over the cluster's masters",
    invariant_zh: "每件都卖出且只卖一次，有分桶还有货时不拒绝买家，抢购脚本分散在集群的各个主节点上",
    lesson: Text {
        zh: "热点券的库存放在一个 key 上，整场秒杀都压在一个主节点；分桶能把它分散开，但本桶空了要去别的桶借，\
             而且一个脚本只能碰一个槽：一个脚本扫所有分桶，集群会以 CROSSSLOT 拒绝。",
        en: "A hot voucher's stock in one key puts the whole sale on one master; buckets spread it, but a \
             buyer whose bucket is empty must borrow from the others, one slot per script: one script \
             over every bucket is refused by a cluster with CROSSSLOT.",
    },
    versions: &[
        version!(
            "one-key",
            false,
            "the course's grab on one stock key: exact, but every grab runs on the one master that \
             owns the key",
            "课程的抢购脚本，库存在一个 key 上：卖得准，但每次抢购都跑在持有这个 key 的那一个主节点上",
            one_key
        ),
        version!(
            "buckets-pinned",
            false,
            "the stock split over 12 keys in different slots, each buyer pinned to one bucket: an \
             empty bucket answers sold out",
            "库存拆到 12 个不同槽的 key 上，每个买家固定在一个分桶，桶空就答复售罄",
            buckets_pinned
        ),
        version!(
            "buckets-scan-single-redis",
            false,
            "one script gets every bucket's key and looks for a unit in turn: sells on one Redis, \
             refused by the cluster",
            "一个脚本拿到所有分桶的 key，逐个找货：单机 Redis 上能卖，集群上被拒绝",
            buckets_scan
        ),
        version!(
            "hmdp",
            true,
            "the service, stockBuckets 12 on 12 shards: the home bucket's script, then loans from \
             the other buckets, one slot per script",
            "本服务，stockBuckets 12、12 个分片：先跑本桶的脚本，本桶空了再逐个向别的桶借，每个脚本只碰一个槽",
            hmdp
        ),
    ],
};

/// The lab's grab on one bucket (the course's script, on the bucket's keys): `{0, units left in
/// the bucket}` when it took one, `{1, 0}` when the bucket is empty, `{2, left}` for a buyer
/// who bought before; then the server's `TIME` (seconds, microseconds), when it decided.
/// `KEYS`: the bucket's stock and buyers; `ARGV[1]`: the user.
const BUCKET_GRAB: &str = r"
local now = redis.call('time')
local left = tonumber(redis.call('get', KEYS[1]) or '0')
if left <= 0 then
  return {1, 0, tonumber(now[1]), tonumber(now[2])}
end
if redis.call('sismember', KEYS[2], ARGV[1]) == 1 then
  return {2, left, tonumber(now[1]), tonumber(now[2])}
end
redis.call('sadd', KEYS[2], ARGV[1])
return {0, redis.call('decr', KEYS[1]), tonumber(now[1]), tonumber(now[2])}
";

/// The lab's scan over every bucket in one script: `0` when it took a unit from the first
/// bucket that had one, `1` when all were empty, `2` for a buyer who bought before. `KEYS`:
/// every bucket's stock, then the sale's buyers; `ARGV[1]`: the user.
const SCAN_GRAB: &str = r"
local buyers = KEYS[#KEYS]
if redis.call('sismember', buyers, ARGV[1]) == 1 then
  return 2
end
for i = 1, #KEYS - 1 do
  if tonumber(redis.call('get', KEYS[i]) or '0') > 0 then
    redis.call('decr', KEYS[i])
    redis.call('sadd', buyers, ARGV[1])
    return 0
  end
end
return 1
";

fn buckets() -> StockBuckets {
    StockBuckets::new(BUCKETS).expect("BUCKETS is between 1 and 64")
}

/// The lab's own keys of a sale: bucket `b` under the hash tag `{b<b>}`, a slot of its own.
#[derive(Clone)]
struct Layout {
    prefix: String,
    buckets: StockBuckets,
}

impl Layout {
    fn stock(&self, b: u32) -> String {
        format!("{}hot:{{b{b}}}:stock", self.prefix)
    }

    fn buyers(&self, b: u32) -> String {
        format!("{}hot:{{b{b}}}:buyers", self.prefix)
    }

    /// The scan's one buyer set for the whole sale.
    fn all_buyers(&self) -> String {
        format!("{}hot:buyers", self.prefix)
    }

    /// Puts each bucket's share of [`STOCK`] in its key.
    async fn load(&self, conn: &mut impl ConnectionLike) -> anyhow::Result<()> {
        for b in 0..self.buckets.get() {
            redis::cmd("SET")
                .arg(self.stock(b))
                .arg(self.buckets.share(STOCK, b))
                .query_async::<()>(conn)
                .await?;
        }
        Ok(())
    }

    /// The units each bucket holds now, read at once.
    async fn left<C: ConnectionLike + Clone + Send + 'static>(
        &self,
        conn: &C,
    ) -> anyhow::Result<Vec<i64>> {
        let reads: Vec<_> = (0..self.buckets.get())
            .map(|b| {
                let (mut conn, key) = (conn.clone(), self.stock(b));
                async move {
                    let n: Option<i64> = redis::cmd("GET").arg(key).query_async(&mut conn).await?;
                    anyhow::Ok(n.unwrap_or(0))
                }
            })
            .collect();
        try_join_all(reads).await
    }
}

/// A private cluster of three masters for one version, and a connection to each master for
/// counting the scripts it ran.
struct Cluster {
    servers: RedisCluster,
    conn: ClusterConnection,
    masters: Vec<MultiplexedConnection>,
}

impl Cluster {
    async fn start(lab: &Lab) -> anyhow::Result<Self> {
        for tool in ["redis-server", "redis-cli"] {
            let found = std::process::Command::new(tool)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            anyhow::ensure!(
                found,
                "hot-voucher starts a Redis Cluster of its own: {tool} must be on PATH \
                 (apt-get install redis-server)"
            );
        }
        lab.progress("a private Redis Cluster of three masters …");
        // Started on a thread of its own: the testkit's future (written for tests) is not
        // `Send`, which a version's boxed future must be.
        let runtime = tokio::runtime::Handle::current();
        let servers = tokio::task::spawn_blocking(move || runtime.block_on(RedisCluster::start()))
            .await
            .context("starting the private cluster failed")?;
        let conn = redis::cluster::ClusterClient::new(servers.urls())?
            .get_async_connection()
            .await
            .context("cannot connect to the private cluster")?;
        let mut masters = Vec::new();
        for url in servers.urls() {
            masters.push(
                redis::Client::open(url)?
                    .get_multiplexed_async_connection()
                    .await?,
            );
        }
        Ok(Self {
            servers,
            conn,
            masters,
        })
    }

    /// The cluster as the service's `HMDP_REDIS_URL` names it: every node, comma-separated.
    fn url(&self) -> String {
        self.servers.urls().join(",")
    }

    /// Loads `scripts` on every master (so that no grab starts with a NOSCRIPT miss), then
    /// zeroes every master's command counts.
    async fn ready(&self, scripts: &[&str]) -> anyhow::Result<()> {
        for mut master in self.masters.clone() {
            for script in scripts {
                redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(*script)
                    .query_async::<String>(&mut master)
                    .await?;
            }
            redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async::<()>(&mut master)
                .await?;
        }
        Ok(())
    }

    /// Scripts (`EVALSHA` and `EVAL`) each master ran since [`Cluster::ready`].
    async fn scripts_per_master(&self) -> anyhow::Result<Vec<i64>> {
        let mut ran = Vec::new();
        for mut master in self.masters.clone() {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut master)
                .await?;
            ran.push(scripts_in(&info));
        }
        Ok(ran)
    }
}

/// The script calls an `INFO commandstats` answer counts.
fn scripts_in(info: &str) -> i64 {
    info.lines()
        .filter_map(|l| {
            l.strip_prefix("cmdstat_evalsha:calls=")
                .or_else(|| l.strip_prefix("cmdstat_eval:calls="))
        })
        .filter_map(|rest| rest.split(',').next()?.parse::<i64>().ok())
        .sum()
}

/// How one buyer's grab ended.
enum Answer {
    Got,
    /// Refused; `left`: the units the buckets held right after.
    Refused {
        left: i64,
    },
    /// The script failed: the error as Redis wrote it.
    Failed(String),
}

/// What a crowd of buyers came to.
#[derive(Default)]
struct Tally {
    accepted: i64,
    refused: i64,
    /// Refusals after which a bucket still held a unit.
    false_refusals: i64,
    errors: i64,
    first_error: Option<String>,
}

/// The lab's hold on a crowd: each grab runs under [`Crowd::grab`], the lab's look at the
/// buckets after a refusal under [`Crowd::halt`], which lets the grabs already sent finish and
/// keeps new ones waiting until the look is done. What the look sees is thus the stock right
/// after the refusal, less at most [`IN_FLIGHT`] - 1 grabs, however slow the machine.
#[derive(Clone, Default)]
struct Crowd(Arc<RwLock<()>>);

impl Crowd {
    async fn grab(&self) -> OwnedRwLockReadGuard<()> {
        self.0.clone().read_owned().await
    }

    async fn halt(&self) -> OwnedRwLockWriteGuard<()> {
        self.0.clone().write_owned().await
    }
}

/// [`BUYERS`] buyers, users 1 to [`BUYERS`] in turn, each grabbing once through `buy`,
/// [`IN_FLIGHT`] at a time.
async fn crowd<F, Fut>(buy: F) -> anyhow::Result<Tally>
where
    F: Fn(i64, Crowd) -> Fut,
    Fut: Future<Output = anyhow::Result<Answer>> + Send + 'static,
{
    let gate = Arc::new(Semaphore::new(IN_FLIGHT));
    let hold = Crowd::default();
    let mut buyers = Vec::new();
    for user in 1..=BUYERS {
        let admitted = gate.clone().acquire_owned().await?;
        let grab = buy(user, hold.clone());
        buyers.push(tokio::spawn(async move {
            let answer = grab.await;
            drop(admitted);
            answer
        }));
    }
    let mut tally = Tally::default();
    for b in buyers {
        match b.await?? {
            Answer::Got => tally.accepted += 1,
            Answer::Refused { left } => {
                tally.refused += 1;
                tally.false_refusals += i64::from(left > 0);
            }
            Answer::Failed(e) => {
                tally.refused += 1;
                tally.errors += 1;
                tally.first_error.get_or_insert(e);
            }
        }
    }
    Ok(tally)
}

/// A Redis error as `redis-cli` shows it: the server's code, then its message.
fn server_text(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.to_string(),
    }
}

async fn one_key(lab: &Lab) -> anyhow::Result<Outcome> {
    pinned(lab, StockBuckets::ONE).await
}

async fn buckets_pinned(lab: &Lab) -> anyhow::Result<Outcome> {
    pinned(lab, buckets()).await
}

/// The lab's grab in each buyer's home bucket and nowhere else, on a private cluster; with one
/// bucket, the course's sale.
async fn pinned(lab: &Lab, buckets: StockBuckets) -> anyhow::Result<Outcome> {
    let mut cluster = Cluster::start(lab).await?;
    let layout = Layout {
        prefix: String::new(),
        buckets,
    };
    layout.load(&mut cluster.conn).await?;
    cluster.ready(&[BUCKET_GRAB]).await?;
    let script = redis::Script::new(BUCKET_GRAB);
    let trace = Trace::start();
    let (conn, shared, recorder) = (cluster.conn.clone(), layout.clone(), trace.clone());
    let tally = crowd(move |user, crowd| {
        let (mut conn, layout, script, trace) = (
            conn.clone(),
            shared.clone(),
            script.clone(),
            recorder.clone(),
        );
        async move {
            let me = Actor::Buyer { user };
            let bucket = layout.buckets.home(user);
            let grabbing = crowd.grab().await;
            let (code, left, sec, usec): (i64, i64, u64, u64) = script
                .key(layout.stock(bucket))
                .key(layout.buyers(bucket))
                .arg(user)
                .invoke_async(&mut conn)
                .await?;
            drop(grabbing);
            // The decision at the time Redis took it: the buyers' tasks see their answers in
            // whatever order they are polled. Every master runs on this machine's clock.
            let decided = sec * 1_000_000 + usec;
            match code {
                0 => {
                    record_at(&trace, decided, me, What::BucketGrab { bucket, left });
                    Ok(Answer::Got)
                }
                1 => {
                    record_at(&trace, decided, me, What::BucketEmpty { bucket });
                    let _halted = crowd.halt().await;
                    // Every read below runs after this instant.
                    let asked = unix_us();
                    let per_bucket = layout.left(&conn).await?;
                    record_at(&trace, asked, Actor::Lab, units_left(user, &per_bucket));
                    Ok(Answer::Refused {
                        left: per_bucket.iter().sum(),
                    })
                }
                _ => anyhow::bail!("user {user} was found among the buyers before grabbing"),
            }
        }
    })
    .await?;
    let left: i64 = layout.left(&cluster.conn).await?.iter().sum();
    let ran = cluster.scripts_per_master().await?;
    trace.record(
        Actor::Lab,
        What::BucketSale {
            stock: STOCK,
            accepted: tally.accepted,
            refused: tally.refused,
            false_refusals: tally.false_refusals,
        },
    );
    let outcome = outcome(buckets, &tally, left, None, &ran);
    Ok(if buckets.split() {
        let shown = refused_with_units_left(&trace.events());
        outcome.traced(trace.timeline(|e| shown.contains(e), 16))
    } else {
        outcome
    })
}

/// Records `what` at `unix_us` on the wall clock (the trace's times start at its origin there).
fn record_at(trace: &Trace, unix_us: u64, actor: Actor, what: What) {
    let t_us = unix_us.saturating_sub(trace.origin_unix_us());
    trace.merge([Event { t_us, actor, what }]);
}

fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The lab's read after `user`'s refusal, as a trace event.
fn units_left(user: i64, per_bucket: &[i64]) -> What {
    let (fullest, most) = per_bucket
        .iter()
        .enumerate()
        .max_by_key(|(b, n)| (**n, std::cmp::Reverse(*b)))
        .map_or((0, 0), |(b, n)| (b as u32, *n));
    What::UnitsLeft {
        user,
        total: per_bucket.iter().sum(),
        buckets: per_bucket.iter().filter(|n| **n > 0).count() as u32,
        fullest,
        most,
    }
}

/// The events that show the first buyer refused while units were left: the grab that emptied
/// the buyer's bucket, the refusal, the lab's read right after it, the grab that later took the
/// next unit of the fullest bucket, and the lab's count.
fn refused_with_units_left(events: &[Event]) -> Vec<Event> {
    let Some((at, read)) = events.iter().enumerate().find(|(_, e)| {
        matches!(e.what, What::UnitsLeft { total, .. } if total > 0) && e.actor == Actor::Lab
    }) else {
        return Vec::new();
    };
    let What::UnitsLeft {
        user,
        fullest,
        most,
        ..
    } = read.what
    else {
        return Vec::new();
    };
    let refusal = events[..at]
        .iter()
        .rev()
        .find(|e| e.actor == Actor::Buyer { user } && matches!(e.what, What::BucketEmpty { .. }));
    let Some(refusal) = refusal else {
        return Vec::new();
    };
    let What::BucketEmpty { bucket } = refusal.what else {
        return Vec::new();
    };
    let emptied = events
        .iter()
        .find(|e| e.what == What::BucketGrab { bucket, left: 0 });
    let next_unit = events.iter().find(|e| {
        e.what
            == What::BucketGrab {
                bucket: fullest,
                left: most - 1,
            }
    });
    let count = events
        .iter()
        .find(|e| matches!(e.what, What::BucketSale { .. }));
    [emptied, Some(refusal), Some(read), next_unit, count]
        .into_iter()
        .flatten()
        .cloned()
        .collect()
}

/// The scan in one script: first on the lab's own Redis, one server holding every bucket, then
/// on a private cluster, where the buckets' keys sit in different slots.
async fn buckets_scan(lab: &Lab) -> anyhow::Result<Outcome> {
    let on_one = Layout {
        prefix: lab.key(""),
        buckets: buckets(),
    };
    let mut single = lab.redis.clone();
    on_one.load(&mut single).await?;
    let single_redis = scan_sale(single, on_one).await?;

    let mut cluster = Cluster::start(lab).await?;
    let layout = Layout {
        prefix: String::new(),
        buckets: buckets(),
    };
    layout.load(&mut cluster.conn).await?;
    cluster.ready(&[SCAN_GRAB]).await?;
    let tally = scan_sale(cluster.conn.clone(), layout.clone()).await?;
    let left: i64 = layout.left(&cluster.conn).await?.iter().sum();
    let ran = cluster.scripts_per_master().await?;
    let mut outcome = outcome(buckets(), &tally, left, None, &ran)
        .metric("sold_on_one_redis", single_redis.accepted)
        .metric("script_errors", tally.errors);
    if let Some(e) = &tally.first_error {
        outcome = outcome.metric("script_error", e.as_str());
    }
    Ok(outcome)
}

/// [`SCAN_GRAB`] for every buyer on `conn`.
async fn scan_sale<C>(conn: C, layout: Layout) -> anyhow::Result<Tally>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let script = redis::Script::new(SCAN_GRAB);
    let keys: Vec<String> = (0..layout.buckets.get())
        .map(|b| layout.stock(b))
        .chain([layout.all_buyers()])
        .collect();
    crowd(move |user, crowd| {
        let (mut conn, script, keys) = (conn.clone(), script.clone(), keys.clone());
        let layout = layout.clone();
        async move {
            let mut call = script.prepare_invoke();
            for k in &keys {
                call.key(k);
            }
            let grabbing = crowd.grab().await;
            let answer: redis::RedisResult<i64> = call.arg(user).invoke_async(&mut conn).await;
            drop(grabbing);
            match answer {
                Ok(0) => Ok(Answer::Got),
                Ok(1) => {
                    let _halted = crowd.halt().await;
                    Ok(Answer::Refused {
                        left: layout.left(&conn).await?.iter().sum(),
                    })
                }
                Ok(_) => anyhow::bail!("user {user} was found among the buyers before grabbing"),
                Err(e) => Ok(Answer::Failed(server_text(&e))),
            }
        }
    })
    .await
}

/// The service with its stock in [`BUCKETS`] buckets on as many shards, on a private cluster;
/// its worker writes the orders into its own database.
async fn hmdp(lab: &Lab) -> anyhow::Result<Outcome> {
    let cluster = Cluster::start(lab).await?;
    let buckets = buckets();
    let service = Arc::new(Service::start_on(lab, &cluster.url(), buckets.get()).await?);
    let voucher = service.new_split_sale(STOCK, buckets).await?;
    cluster.ready(&[]).await?;
    let shared = service.clone();
    let tally = crowd(move |user, crowd| {
        let service = shared.clone();
        async move {
            let buyer = service.buyer();
            let grabbing = crowd.grab().await;
            let got = buyer.buy(user, voucher).await?;
            drop(grabbing);
            if got {
                return Ok(Answer::Got);
            }
            let _halted = crowd.halt().await;
            let left = service.bucket_stock(voucher, buckets).await?;
            Ok(Answer::Refused {
                left: left.iter().sum(),
            })
        }
    })
    .await?;
    let ran = cluster.scripts_per_master().await?;
    let left: i64 = service.bucket_stock(voucher, buckets).await?.iter().sum();
    let (orders, doubled) = service.written(voucher, tally.accepted).await?;
    let database = service.database_url.clone();
    Arc::into_inner(service)
        .context("the buyers are done with the service")?
        .stop()
        .await?;
    let mut outcome = outcome(buckets, &tally, left, Some(doubled), &ran)
        .metric("orders", orders)
        .metric("database", database)
        .voucher(voucher);
    outcome.held &= orders == STOCK;
    Ok(outcome)
}

/// What a sale came to, and whether it kept the invariant: exactly the stock accepted with
/// nothing left, nobody twice (`doubled`, where the orders were written and counted; the lab's
/// own scripts keep one buyer set per bucket and ask for each user once), no refusal while a
/// unit was left, no master running more than [`MOST_ON_ONE_MASTER`] of the scripts.
fn outcome(
    buckets: StockBuckets,
    tally: &Tally,
    left: i64,
    doubled: Option<i64>,
    scripts_per_master: &[i64],
) -> Outcome {
    let mut ran = scripts_per_master.to_vec();
    ran.sort_unstable_by(|a, b| b.cmp(a));
    let total: i64 = ran.iter().sum();
    let busiest = if total > 0 {
        ran[0] as f64 / total as f64
    } else {
        0.0
    };
    let spread = total > 0 && busiest <= MOST_ON_ONE_MASTER;
    let exact = tally.accepted == STOCK && left == 0 && doubled.unwrap_or(0) == 0;
    let per_master: Vec<String> = ran.iter().map(i64::to_string).collect();
    let mut outcome = Outcome::new(exact && tally.false_refusals == 0 && spread)
        .metric("stock", STOCK)
        .metric("buckets", buckets.get())
        .metric("buyers", BUYERS)
        .metric("accepted", tally.accepted)
        .metric("refused", tally.refused)
        .metric("false_refusals", tally.false_refusals)
        .metric("stock_left", left);
    if let Some(doubled) = doubled {
        outcome = outcome.metric("users_with_two_or_more", doubled);
    }
    outcome = outcome.metric("scripts_per_master", per_master.join("/"));
    if total > 0 {
        outcome = outcome.metric("busiest_master", format!("{:.0}%", busiest * 100.0));
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_are_counted_from_commandstats() {
        let info = "# Commandstats\r\n\
            cmdstat_get:calls=9,usec=1,usec_per_call=0.1,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_evalsha:calls=120,usec=9,usec_per_call=0.1,rejected_calls=3,failed_calls=0\r\n\
            cmdstat_eval:calls=2,usec=1,usec_per_call=0.5,rejected_calls=0,failed_calls=0\r\n";
        assert_eq!(scripts_in(info), 122);
        assert_eq!(scripts_in("# Commandstats\r\n"), 0);
    }

    #[test]
    fn the_split_versions_buckets_fall_on_every_master() {
        // The three masters of `redis-cli --cluster create` own slots 0-5460, 5461-10922 and
        // 10923-16383.
        let layout = Layout {
            prefix: String::new(),
            buckets: buckets(),
        };
        let mut per_master = [0; 3];
        for b in 0..layout.buckets.get() {
            let slot = hmdp::testing::kv::key_slot(&layout.stock(b));
            assert_eq!(slot, hmdp::testing::kv::key_slot(&layout.buyers(b)));
            per_master[usize::from(slot > 5460) + usize::from(slot > 10922)] += 1;
        }
        assert!(per_master.iter().all(|&n| n >= 3), "{per_master:?}");
    }
}
