//! Unique visitors: a HyperLogLog per shop and day (`uv:shop:{<id>}:<yyyyMMdd>`) and one for
//! the whole site (`uv:{site}:<yyyyMMdd>`: visitors of any shop page).
//!
//! A visitor is the logged-in user, else the client address as the rate limits key it (resolved
//! through `HMDP_TRUSTED_PROXIES` behind a reverse proxy; an IPv6 client by its /64). Recording a visit is on
//! the hottest path, the cached `GET /shop/{id}`, so it does no Redis round trip: the visit
//! goes into an in-memory buffer (sharded mutexes over sets, so a visitor re-reading a shop
//! costs one hash lookup and nothing in Redis), and a background task sends the buffer every
//! `HMDP_UV_FLUSH_MS` as pipelined [`VISIT`] scripts (one pipeline per Redis Cluster slot). The
//! counts are therefore up to one flush interval late, and the visits of a process that dies
//! without [`Activity::shutdown`] are lost (they are statistics, not orders).
//!
//! The buffer is bounded ([`BUFFER_CAP`] distinct visits): while Redis is away, failed
//! batches are put back until the cap, and visits beyond it are dropped and counted
//! (`hmdp_uv_visits_dropped_total`) instead of growing memory without limit.
//!
//! Counts are `PFCOUNT` over the span's keys, which is the size of their union (a visitor of
//! three days counts once). A week that is over inside the span is read from its week key
//! (`…:w:<Monday>`), merged once from its seven days by the first count that needs it
//! ([`MERGE_WEEK`], on any instance: a week key that exists is never merged again), so a 90-day
//! count reads 18 to 24 keys instead of 90. A HyperLogLog union is the maximum of each
//! register, so weeks plus days give exactly the count the days give. A visit that reaches Redis
//! after its week was merged (a flush that was late, or kept while Redis was away) is added to
//! the week too, in the same script as to its day, so no merged week misses one. The keys of
//! one shop share its hash tag and the site's keys the tag `site`, so each merge and count is
//! one command in one slot. Every day key expires [`MAX_UV_DAYS`] + 2 days after its last
//! write and a week key as long after its Sunday, so the oldest day a count can ask for is
//! always still there and nothing older is kept.
//!
//! The count routes are public, and a count is dear where a visit is cheap: `PFCOUNT` over 90
//! busy days merges 90 dense HyperLogLogs, about 2 ms of Redis's one thread. So a count is
//! computed at most once per [`COUNT_TTL`] per (scope, day, span) on an instance and shared by
//! everyone asking meanwhile (single-flight, [`Counts`]), and the counts computed are bounded
//! by a budget of keys read per second ([`COUNT_BUDGET_KEYS_PER_SEC`]): past it a count that is
//! not cached is refused (429) instead of queued. Merging weeks, done once for everyone, has a
//! budget of its own ([`MERGE_BUDGET_DAYS_PER_SEC`]); past it a week is read from its days, at
//! the asking client's expense. Whatever clients send, and however many of them, counting
//! costs Redis at most those budgets per instance.

use std::{
    collections::{HashMap, HashSet, hash_map::RandomState},
    hash::BuildHasher,
    net::IpAddr,
    sync::{
        Arc, LazyLock, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use chrono::{Datelike as _, Days, NaiveDate, Weekday};
use futures_util::{StreamExt, TryStreamExt, stream};
use governor::{
    DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota,
    clock::{Clock as _, DefaultClock},
};
use redis::{ErrorKind, Script, ServerErrorKind};
use tokio::sync::oneshot;

use super::{Activity, ActivityError};
use crate::{
    domain::{ShopId, UserId},
    kv::{Keys, RedisConn, key_slot},
    metrics::{Counter, Gauge, Registry},
};

/// The most days one count may span (`days=1..=90`).
pub(crate) const MAX_UV_DAYS: u32 = 90;

/// Distinct (shop, day, visitor) entries the buffer holds at most; about 10 MB.
pub(crate) const BUFFER_CAP: usize = 100_000;

/// Mutexes the buffer is split over, so concurrent reads rarely wait for each other.
const SHARDS: usize = 32;

/// How long a computed count is shared by everyone asking the same question on this instance.
pub(crate) const COUNT_TTL: Duration = Duration::from_secs(1);

/// Different counts remembered at most (a scanner asking for every shop and span evicts only
/// its own answers).
const COUNT_CAPACITY: u64 = 10_000;

/// Keys (days or weeks) that counts not in the cache may read per second on this instance
/// (bursts of as many). A busy key costs Redis about 25 µs in a multi-key `PFCOUNT`
/// (BENCHMARKS.md), so this holds counting under ~1 % of Redis's thread per instance, whatever
/// is asked.
pub(crate) const COUNT_BUDGET_KEYS_PER_SEC: u32 = 300;

/// Of that budget, what one client (an address, an IPv6 /64) may spend per second: half, so no
/// single client can keep everyone else's counts refused (a 90-day count reads at most 24 keys
/// once its weeks are merged: a page asking for the site's and a shop's last 7, 30 and 90 days
/// spends under 90).
pub(crate) const CLIENT_BUDGET_KEYS_PER_SEC: u32 = COUNT_BUDGET_KEYS_PER_SEC / 2;

/// Day keys that merging weeks may read per second on this instance (bursts of as many), apart
/// from the counts' budget: a merge is done once for every instance and every later count, so
/// it is not the asking client's to pay; past this a week not merged yet is counted from its
/// days. Like the counts' budget, under ~1 % of Redis's thread.
pub(crate) const MERGE_BUDGET_DAYS_PER_SEC: u32 = 300;

/// Members per `PFADD` and commands per pipeline.
const PFADD_CHUNK: usize = 1_000;
const PIPELINE_COMMANDS: usize = 500;

/// Pipelines in flight at once during a flush (a cluster has one per slot).
const CONCURRENT_PIPELINES: usize = 8;

/// Who visited: the logged-in user, else the client address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Visitor {
    User(UserId),
    Addr(IpAddr),
}

impl Visitor {
    /// The HyperLogLog member: `u:<id>` or `ip:<address>`, so a user id never equals an address.
    pub fn member(self) -> String {
        match self {
            Visitor::User(id) => format!("u:{id}"),
            Visitor::Addr(ip) => format!("ip:{ip}"),
        }
    }
}

/// The visit buffer's counters (`hmdp_uv_*`).
#[derive(Debug, Default)]
pub struct UvStats {
    /// Distinct visits waiting for the next flush.
    pub buffered: Gauge,
    /// Visits sent to Redis.
    pub flushed: Counter,
    /// Visits dropped because the buffer was full (Redis away for long).
    pub dropped: Counter,
    /// Flushes that failed (their visits were put back).
    pub flush_failures: Counter,
    /// Counts computed in Redis (not answered from the shared cache).
    pub counts_computed: Counter,
    /// Counts refused because the budget of keys read was spent.
    pub counts_refused: Counter,
}

impl UvStats {
    /// Adds the visitor-counting metrics to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "hmdp_uv_buffered_visits",
            "Distinct shop visits waiting in memory for the next flush to Redis",
            self.buffered.clone(),
        );
        registry.register(
            "hmdp_uv_visits_flushed",
            "Distinct shop visits sent to Redis (PFADD)",
            self.flushed.clone(),
        );
        registry.register(
            "hmdp_uv_visits_dropped",
            "Shop visits not counted because the buffer was full (Redis away for long)",
            self.dropped.clone(),
        );
        registry.register(
            "hmdp_uv_flush_failures",
            "Visit flushes that failed; their visits were kept for the next one",
            self.flush_failures.clone(),
        );
        registry.register(
            "hmdp_uv_counts_computed",
            "Visitor counts computed in Redis (the rest were shared answers from the last second)",
            self.counts_computed.clone(),
        );
        registry.register(
            "hmdp_uv_counts_refused",
            "Visitor counts refused because the per-instance budget of keys read (day and week) was spent",
            self.counts_refused.clone(),
        );
    }
}

/// Whose visitors a count is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Scope {
    Site,
    Shop(i64),
}

impl Scope {
    fn day_key(self, keys: &Keys, day: NaiveDate) -> String {
        match self {
            Scope::Site => keys.uv_site(&day_key(day)),
            Scope::Shop(shop) => keys.uv_shop(shop, &day_key(day)),
        }
    }

    fn week_key(self, keys: &Keys, monday: NaiveDate) -> String {
        match self {
            Scope::Site => keys.uv_site_week(&day_key(monday)),
            Scope::Shop(shop) => keys.uv_shop_week(shop, &day_key(monday)),
        }
    }
}

/// Adds a batch of visitors to a day (`PFADD`, then the day's expiry) and, if its week was
/// merged already, to the week: atomic with [`MERGE_WEEK`], so a visit is either in the day
/// before the merge reads it or added to the week after.
///
/// KEYS: the day, its week. ARGV: the day's lifetime in ms, then the members.
static VISIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
redis.call('PFADD', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PFADD', KEYS[2], unpack(ARGV, 2))
end
return 0
",
    )
});

/// Merges a week that is over into its week key, once: a week key that exists is left as it is
/// (late visits reach it through [`VISIT`]). Answers 1 if it merged, 0 if the week was there.
///
/// KEYS: the week, then its seven days. ARGV: the week's lifetime in ms.
static MERGE_WEEK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('PFMERGE', unpack(KEYS))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
",
    )
});

/// What a count of `days` days up to `today` reads: the weeks (their Mondays) that lie whole
/// inside the span and are over, and the days around them (today's week, the span's first
/// partial week), each day of the span in exactly one of the two.
#[derive(Debug, PartialEq, Eq)]
struct Span {
    weeks: Vec<NaiveDate>,
    days: Vec<NaiveDate>,
}

impl Span {
    fn new(today: NaiveDate, days: u32) -> Self {
        let back = u64::from(days.clamp(1, MAX_UV_DAYS) - 1);
        let mut day = today.checked_sub_days(Days::new(back)).unwrap_or(today);
        let mut span = Span {
            weeks: Vec::new(),
            days: Vec::new(),
        };
        while day <= today {
            let sunday = day.checked_add_days(Days::new(6));
            if day.weekday() == Weekday::Mon && sunday.is_some_and(|s| s < today) {
                span.weeks.push(day);
                day = day + Days::new(7);
            } else {
                span.days.push(day);
                let Some(next) = day.succ_opt() else { break };
                day = next;
            }
        }
        span
    }

    /// Keys a count reads once every week is merged.
    fn keys(&self) -> u32 {
        (self.weeks.len() + self.days.len()) as u32
    }
}

/// What a count finds of a week that is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Week {
    /// Its week key exists.
    Merged,
    /// Not merged, and none of its days has a key: nobody visited, nothing to read.
    Empty,
    /// Not merged; this many of its days have a key.
    Days(u32),
}

/// The seven days of the week starting on `monday`.
fn week_days(monday: NaiveDate) -> impl Iterator<Item = NaiveDate> {
    monday.iter_days().take(7)
}

/// The counts of the last second, shared by all callers, and the budget of new ones.
pub(crate) struct Counts {
    /// (scope, today, days) → visitors. `try_get_with` runs one computation for all concurrent
    /// callers of a key.
    answers: moka::future::Cache<(Scope, NaiveDate, u32), u64>,
    budget: DefaultDirectRateLimiter,
    /// Days that merging weeks may read (see [`MERGE_BUDGET_DAYS_PER_SEC`]).
    merges: DefaultDirectRateLimiter,
    /// Each client's share of `budget`.
    per_client: DefaultKeyedRateLimiter<IpAddr>,
    /// Spends, to forget idle clients now and then.
    spends: AtomicU64,
}

impl Counts {
    pub(crate) fn new() -> Self {
        let per_second =
            std::num::NonZeroU32::new(COUNT_BUDGET_KEYS_PER_SEC).expect("a positive budget");
        Self {
            answers: moka::future::Cache::builder()
                .max_capacity(COUNT_CAPACITY)
                .time_to_live(COUNT_TTL)
                .build(),
            budget: DefaultDirectRateLimiter::direct(Quota::per_second(per_second)),
            merges: DefaultDirectRateLimiter::direct(Quota::per_second(
                std::num::NonZeroU32::new(MERGE_BUDGET_DAYS_PER_SEC).expect("a positive budget"),
            )),
            per_client: DefaultKeyedRateLimiter::keyed(Quota::per_second(
                std::num::NonZeroU32::new(CLIENT_BUDGET_KEYS_PER_SEC).expect("a positive share"),
            )),
            spends: AtomicU64::new(0),
        }
    }

    /// Takes `days` from the merge budget, if it has them now (no days: free).
    fn take_merge(&self, days: u32) -> bool {
        std::num::NonZeroU32::new(days).is_none_or(|n| matches!(self.merges.check_n(n), Ok(Ok(()))))
    }

    /// Takes `keys` keys from `client`'s share and from the instance's budget, or says when
    /// there will be enough.
    fn spend(&self, client: IpAddr, keys: u32) -> Result<(), ActivityError> {
        if self.spends.fetch_add(1, Ordering::Relaxed) % 10_000 == 9_999 {
            self.per_client.retain_recent();
        }
        let n = std::num::NonZeroU32::new(keys.max(1)).expect("at least one");
        let busy = |wait: Duration| ActivityError::Busy { retry_after: wait };
        let one_second = Duration::from_secs(1);
        let now = DefaultClock::default().now();
        match self.per_client.check_key_n(&client, n) {
            Ok(Ok(())) => {}
            Ok(Err(not_until)) => return Err(busy(not_until.wait_time_from(now))),
            Err(_) => return Err(busy(one_second)),
        }
        match self.budget.check_n(n) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => Err(busy(not_until.wait_time_from(now))),
            Err(_) => Err(busy(one_second)),
        }
    }
}

/// A shop and a day.
type Day = (i64, NaiveDate);

/// One shard of the buffer: the visitors per shop and day.
type Shard = HashMap<Day, HashSet<Visitor>>;

/// The visits not yet in Redis: per (shop, day), the set of visitors.
pub(crate) struct VisitBuffer {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    cap: usize,
    stats: UvStats,
}

impl VisitBuffer {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            cap,
            stats: UvStats::default(),
        }
    }

    pub(crate) fn stats(&self) -> &UvStats {
        &self.stats
    }

    /// The shard of a (shop, visitor): spread by both, so one hot shop uses every shard, and one
    /// visitor of one shop always lands in the same shard (no duplicates across shards).
    fn shard(&self, shop: i64, visitor: Visitor) -> MutexGuard<'_, Shard> {
        let i = self.hasher.hash_one((shop, visitor)) as usize % self.shards.len();
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a visit; a repeat visit is free, a new one beyond the cap is dropped and counted.
    pub(crate) fn record(&self, shop: i64, day: NaiveDate, visitor: Visitor) {
        let mut map = self.shard(shop, visitor);
        if map.get(&(shop, day)).is_some_and(|s| s.contains(&visitor)) {
            return;
        }
        if self.stats.buffered.get() >= self.cap as i64 {
            self.stats.dropped.inc();
            return;
        }
        map.entry((shop, day)).or_default().insert(visitor);
        self.stats.buffered.inc();
    }

    /// Empties the buffer: the visits per (shop, day).
    fn take(&self) -> HashMap<Day, Vec<Visitor>> {
        let mut out: HashMap<Day, Vec<Visitor>> = HashMap::new();
        let mut taken = 0;
        for shard in &*self.shards {
            let map = std::mem::take(&mut *shard.lock().unwrap_or_else(|e| e.into_inner()));
            for (day, visitors) in map {
                taken += visitors.len();
                out.entry(day).or_default().extend(visitors);
            }
        }
        self.stats.buffered.dec_by(taken as i64);
        out
    }

    /// Puts a batch that could not be sent back, up to the cap.
    fn put_back(&self, batch: HashMap<Day, Vec<Visitor>>) {
        for ((shop, day), visitors) in batch {
            for v in visitors {
                self.record(shop, day, v);
            }
        }
    }

    /// Sends everything buffered to Redis; on failure the visits stay for the next flush.
    pub(crate) async fn flush(&self, redis: &RedisConn, keys: &Keys) {
        let batch = self.take();
        if batch.is_empty() {
            return;
        }
        let visits: usize = batch.values().map(Vec::len).sum();
        match send(&batch, redis, keys).await {
            Ok(()) => {
                self.stats.flushed.inc_by(visits as u64);
            }
            Err(e) => {
                tracing::warn!(error = %e, visits, "could not send shop visits to Redis; keeping them for the next flush");
                self.stats.flush_failures.inc();
                self.put_back(batch);
            }
        }
    }
}

/// How long a day's key lives after its last write: every day a count can span, plus a margin
/// for time zones and late flushes.
fn retention() -> Duration {
    Duration::from_secs(u64::from(MAX_UV_DAYS + 2) * 24 * 3600)
}

/// `yyyyMMdd`, the day part of the UV keys.
fn day_key(day: NaiveDate) -> String {
    day.format("%Y%m%d").to_string()
}

/// The Monday of `day`'s week.
fn monday(day: NaiveDate) -> NaiveDate {
    day.week(Weekday::Mon).first_day()
}

/// How long a week merged `today` lives: as long as its Sunday's key written on that Sunday,
/// so it is there for every count that spans it whole, and gone with its days.
fn week_retention(monday: NaiveDate, today: NaiveDate) -> Duration {
    let since_sunday = (today - monday).num_days().saturating_sub(6).max(0) as u64;
    retention().saturating_sub(Duration::from_secs(since_sunday * 24 * 3600))
}

/// Pipelines being built, one list per cluster slot (one list on a single node).
#[derive(Default)]
struct Pipelines {
    by_slot: HashMap<u16, Vec<redis::Pipeline>>,
}

impl Pipelines {
    fn add(&mut self, slot: u16, cmd: &redis::Cmd) {
        let list = self.by_slot.entry(slot).or_default();
        if list.last().is_none_or(|p| p.len() >= PIPELINE_COMMANDS) {
            list.push(redis::pipe());
        }
        let pipe = list.last_mut().expect("just pushed");
        pipe.add_command(cmd.clone()).ignore();
    }

    /// [`VISIT`] of `members` to `day` (and its `week` if merged), in chunks.
    fn visit(&mut self, cluster: bool, day: &str, week: &str, members: &[String]) {
        let slot = if cluster { key_slot(day) } else { 0 };
        for chunk in members.chunks(PFADD_CHUNK) {
            self.add(
                slot,
                redis::cmd("EVALSHA")
                    .arg(VISIT.get_hash())
                    .arg(2)
                    .arg(day)
                    .arg(week)
                    .arg(retention().as_millis() as u64)
                    .arg(chunk),
            );
        }
    }
}

/// Sends a pipeline of `script`'s `EVALSHA`s; on `NOSCRIPT` (Redis restarted, failed over, or
/// its scripts were flushed) loads the script and sends the pipeline again (both scripts of this
/// module can run twice: a visit added twice counts once, a merged week is not merged again).
async fn exec_scripts(
    script: &Script,
    pipe: &redis::Pipeline,
    redis: &mut RedisConn,
) -> redis::RedisResult<()> {
    match pipe.exec_async(redis).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.load_async(redis).await?;
            pipe.exec_async(redis).await
        }
        done => done,
    }
}

/// Writes a batch: `PFADD` to each shop's day and to the site's day, pipelined.
async fn send(
    batch: &HashMap<Day, Vec<Visitor>>,
    redis: &RedisConn,
    keys: &Keys,
) -> Result<(), redis::RedisError> {
    let cluster = matches!(redis, RedisConn::Cluster(_));
    let mut pipes = Pipelines::default();
    let mut site: HashMap<NaiveDate, HashSet<Visitor>> = HashMap::new();
    for (&(shop, day), visitors) in batch {
        let members: Vec<String> = visitors.iter().map(|v| v.member()).collect();
        let scope = Scope::Shop(shop);
        pipes.visit(
            cluster,
            &scope.day_key(keys, day),
            &scope.week_key(keys, monday(day)),
            &members,
        );
        site.entry(day)
            .or_default()
            .extend(visitors.iter().copied());
    }
    for (day, visitors) in site {
        let members: Vec<String> = visitors.into_iter().map(Visitor::member).collect();
        pipes.visit(
            cluster,
            &Scope::Site.day_key(keys, day),
            &Scope::Site.week_key(keys, monday(day)),
            &members,
        );
    }
    stream::iter(pipes.by_slot.into_values().flatten())
        .map(|pipe| {
            let mut redis = redis.clone();
            async move { exec_scripts(&VISIT, &pipe, &mut redis).await }
        })
        .buffer_unordered(CONCURRENT_PIPELINES)
        .try_collect::<()>()
        .await
}

/// The flush task: every `every` until `stop` fires (or its sender is dropped), then once more.
pub(crate) async fn flush_every(
    buffer: Arc<VisitBuffer>,
    redis: RedisConn,
    keys: Keys,
    every: Duration,
    mut stop: oneshot::Receiver<()>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => buffer.flush(&redis, &keys).await,
            _ = &mut stop => break,
        }
    }
    buffer.flush(&redis, &keys).await;
}

/// How shop reads record visits: the benchmark compares buffering with a `PFADD` per read and
/// with no recording at all (feature `test-util`; the service always buffers).
#[cfg(feature = "test-util")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum VisitMode {
    /// In memory, flushed in batches (the service's way).
    Buffered = 0,
    /// `PFADD` to the shop's and the site's day before the read answers.
    WriteThrough = 1,
    /// Not recorded.
    Off = 2,
}

impl Activity {
    /// Counts a visit of `shop` today. No I/O: the visit is sent with the next flush.
    pub fn record_visit(&self, shop: ShopId, visitor: Visitor) {
        self.0.visits.record(shop.get(), self.today(), visitor);
    }

    /// What a shop read calls: [`Activity::record_visit`] (no I/O, ready at once), unless a
    /// benchmark chose another [`VisitMode`].
    pub async fn visit(&self, shop: ShopId, visitor: Visitor) {
        #[cfg(feature = "test-util")]
        match self.0.visit_mode.load(std::sync::atomic::Ordering::Relaxed) {
            m if m == VisitMode::Off as u8 => return,
            m if m == VisitMode::WriteThrough as u8 => {
                let day = day_key(self.today());
                let member = visitor.member();
                let (mut a, mut b) = (self.0.redis.clone(), self.0.redis.clone());
                let mut shop_cmd = redis::cmd("PFADD");
                shop_cmd
                    .arg(self.0.keys.uv_shop(shop.get(), &day))
                    .arg(&member);
                let mut site_cmd = redis::cmd("PFADD");
                site_cmd.arg(self.0.keys.uv_site(&day)).arg(&member);
                let (x, y) = tokio::join!(shop_cmd.exec_async(&mut a), site_cmd.exec_async(&mut b));
                if let Err(e) = x.and(y) {
                    tracing::warn!(error = %e, "PFADD of a visit failed");
                }
                return;
            }
            _ => {}
        }
        self.record_visit(shop, visitor);
    }

    /// Chooses how shop reads record visits (benchmarks).
    #[cfg(feature = "test-util")]
    pub fn set_visit_mode(&self, mode: VisitMode) {
        self.0
            .visit_mode
            .store(mode as u8, std::sync::atomic::Ordering::Relaxed);
    }

    /// Distinct visitors of `shop` over the last `days` days (1 = today), `1..=MAX_UV_DAYS`.
    /// At most [`COUNT_TTL`] old; [`ActivityError::Busy`] when it is not cached and the budget
    /// of counts is spent.
    /// `client` (a client key) is who asks: its share of the budget is spent if the count is
    /// computed.
    pub async fn shop_uv(
        &self,
        shop: ShopId,
        days: u32,
        client: IpAddr,
    ) -> Result<u64, ActivityError> {
        self.count(Scope::Shop(shop.get()), days, client).await
    }

    /// Distinct visitors of any shop page over the last `days` days (1 = today), as
    /// [`Activity::shop_uv`].
    pub async fn site_uv(&self, days: u32, client: IpAddr) -> Result<u64, ActivityError> {
        self.count(Scope::Site, days, client).await
    }

    /// A count from the shared answers of the last second, else computed once for every caller.
    async fn count(&self, scope: Scope, days: u32, client: IpAddr) -> Result<u64, ActivityError> {
        let days = days.clamp(1, MAX_UV_DAYS);
        let today = self.today();
        #[cfg(feature = "test-util")]
        if self
            .0
            .counts_unshared
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return self.pfcount(self.count_keys(scope, today, days)).await;
        }
        self.0
            .counts
            .answers
            .try_get_with(
                (scope, today, days),
                self.compute_count(scope, today, days, client),
            )
            .await
            .map_err(|shared| (*shared).clone())
    }

    async fn compute_count(
        &self,
        scope: Scope,
        today: NaiveDate,
        days: u32,
        client: IpAddr,
    ) -> Result<u64, ActivityError> {
        let stats = self.0.visits.stats();
        let span = Span::new(today, days);
        // What the count reads once its weeks are merged, taken before any Redis work: a
        // refused count costs Redis nothing.
        if let Err(busy) = self.0.counts.spend(client, span.keys()) {
            stats.counts_refused.inc();
            return Err(busy);
        }
        let keys = &self.0.keys;
        let mut read: Vec<String> = span.days.iter().map(|&d| scope.day_key(keys, d)).collect();
        let mut merge = Vec::new();
        let mut unmerged = 0;
        for (&monday, week) in span.weeks.iter().zip(self.weeks(scope, &span.weeks).await?) {
            match week {
                Week::Merged => read.push(scope.week_key(keys, monday)),
                Week::Empty => {}
                Week::Days(n) if self.0.counts.take_merge(n) => {
                    merge.push(monday);
                    read.push(scope.week_key(keys, monday));
                }
                Week::Days(_) => {
                    unmerged += 1;
                    read.extend(week_days(monday).map(|d| scope.day_key(keys, d)));
                }
            }
        }
        // The merges are paid for and serve every later count, whether or not this one is.
        self.merge_weeks(scope, today, &merge).await?;
        if unmerged > 0
            && let Err(busy) = self.0.counts.spend(client, unmerged * 6)
        {
            stats.counts_refused.inc();
            return Err(busy);
        }
        stats.counts_computed.inc();
        self.pfcount(read).await
    }

    /// Whether each week (by its Monday) is merged, and if not how many of its days exist.
    async fn weeks(&self, scope: Scope, mondays: &[NaiveDate]) -> Result<Vec<Week>, ActivityError> {
        if mondays.is_empty() {
            return Ok(Vec::new());
        }
        let keys = &self.0.keys;
        let mut pipe = redis::pipe();
        for &monday in mondays {
            pipe.exists(scope.week_key(keys, monday));
            pipe.exists(
                week_days(monday)
                    .map(|d| scope.day_key(keys, d))
                    .collect::<Vec<_>>(),
            );
        }
        let found: Vec<u32> = pipe.query_async(&mut self.0.redis.clone()).await?;
        Ok(found
            .chunks(2)
            .map(|c| match (c[0], c[1]) {
                (0, 0) => Week::Empty,
                (0, days) => Week::Days(days),
                _ => Week::Merged,
            })
            .collect())
    }

    /// Runs [`MERGE_WEEK`] for each week (by its Monday), in one pipeline.
    async fn merge_weeks(
        &self,
        scope: Scope,
        today: NaiveDate,
        mondays: &[NaiveDate],
    ) -> Result<(), ActivityError> {
        if mondays.is_empty() {
            return Ok(());
        }
        let keys = &self.0.keys;
        let mut pipe = redis::pipe();
        for &monday in mondays {
            pipe.cmd("EVALSHA")
                .arg(MERGE_WEEK.get_hash())
                .arg(8)
                .arg(scope.week_key(keys, monday))
                .arg(
                    week_days(monday)
                        .map(|d| scope.day_key(keys, d))
                        .collect::<Vec<_>>(),
                )
                .arg(week_retention(monday, today).as_millis() as u64)
                .ignore();
        }
        Ok(exec_scripts(&MERGE_WEEK, &pipe, &mut self.0.redis.clone()).await?)
    }

    /// The day keys of a count, without weeks (benchmarks: counts as they were computed
    /// before they were shared).
    #[cfg(feature = "test-util")]
    fn count_keys(&self, scope: Scope, today: NaiveDate, days: u32) -> Vec<String> {
        let keys = &self.0.keys;
        last_days(today, days)
            .map(|d| match scope {
                Scope::Site => keys.uv_site(&d),
                Scope::Shop(shop) => keys.uv_shop(shop, &d),
            })
            .collect()
    }

    /// Computes every count in Redis for its caller, with no sharing and no budget, as the
    /// service did before counts were shared (benchmarks).
    #[cfg(feature = "test-util")]
    pub fn set_count_sharing(&self, shared: bool) {
        self.0
            .counts_unshared
            .store(!shared, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sends the buffered visits now (tests and benchmarks; the flush task does it anyway).
    #[cfg(feature = "test-util")]
    pub async fn flush_visits(&self) {
        self.0.visits.flush(&self.0.redis, &self.0.keys).await;
    }

    async fn pfcount(&self, keys: Vec<String>) -> Result<u64, ActivityError> {
        let mut redis = self.0.redis.clone();
        Ok(redis::cmd("PFCOUNT")
            .arg(keys)
            .query_async(&mut redis)
            .await?)
    }
}

/// `yyyyMMdd` of `today` and the `days - 1` days before it.
#[cfg(any(test, feature = "test-util"))]
fn last_days(today: NaiveDate, days: u32) -> impl Iterator<Item = String> {
    (0..days.clamp(1, MAX_UV_DAYS)).filter_map(move |back| {
        today
            .checked_sub_days(Days::new(u64::from(back)))
            .map(day_key)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    fn user(id: i64) -> Visitor {
        Visitor::User(UserId::new(id).unwrap())
    }

    #[test]
    fn repeat_visits_are_buffered_once() {
        let b = VisitBuffer::new(100);
        let d = day("2024-05-01");
        for _ in 0..3 {
            b.record(1, d, user(7));
        }
        b.record(1, d, Visitor::Addr("192.0.2.1".parse().unwrap()));
        b.record(2, d, user(7));
        b.record(1, day("2024-05-02"), user(7));
        assert_eq!(b.stats().buffered.get(), 4);
        let batch = b.take();
        assert_eq!(batch[&(1, d)].len(), 2);
        assert_eq!(batch[&(2, d)], vec![user(7)]);
        assert_eq!(b.stats().buffered.get(), 0, "taking empties the buffer");
        assert!(b.take().is_empty());
    }

    #[test]
    fn a_full_buffer_drops_new_visits_and_counts_them() {
        let b = VisitBuffer::new(10);
        let d = day("2024-05-01");
        for id in 1..=15 {
            b.record(1, d, user(id));
        }
        assert_eq!(b.stats().buffered.get(), 10);
        assert_eq!(b.stats().dropped.get(), 5);
        // A visitor already buffered is not a drop.
        b.record(1, d, user(1));
        assert_eq!(b.stats().dropped.get(), 5);
        // A failed batch goes back, but never beyond the cap.
        let batch = b.take();
        b.record(9, d, user(99));
        b.put_back(batch);
        assert_eq!(b.stats().buffered.get(), 10);
        assert_eq!(b.stats().dropped.get(), 6);
    }

    #[test]
    fn members_keep_users_and_addresses_apart() {
        assert_eq!(user(42).member(), "u:42");
        assert_eq!(Visitor::Addr("::1".parse().unwrap()).member(), "ip:::1");
        assert_eq!(day_key(day("2024-01-09")), "20240109");
    }

    #[test]
    fn the_count_budget_refuses_past_its_keys_and_says_when() {
        let counts = Counts::new();
        let client = |i: u8| IpAddr::from([192, 0, 2, i]);
        // One client spends its share, and then nothing more; others go on.
        counts.spend(client(0), CLIENT_BUDGET_KEYS_PER_SEC).unwrap();
        assert!(matches!(
            counts.spend(client(0), 1),
            Err(ActivityError::Busy { .. })
        ));
        let mut spent = CLIENT_BUDGET_KEYS_PER_SEC;
        let mut i = 1;
        while spent + MAX_UV_DAYS <= COUNT_BUDGET_KEYS_PER_SEC {
            counts.spend(client(i), MAX_UV_DAYS).unwrap();
            spent += MAX_UV_DAYS;
            i += 1;
        }
        // The instance's budget is spent, for a client that has spent nothing too.
        match counts.spend(client(200), MAX_UV_DAYS) {
            Err(ActivityError::Busy { retry_after }) => {
                assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(1));
            }
            other => panic!("expected Busy, got {other:?}"),
        }
        assert_eq!(
            last_days(day("2024-03-01"), 2).collect::<Vec<_>>(),
            ["20240301", "20240229"]
        );
    }

    #[test]
    fn one_cluster_slot_per_pipeline() {
        let keys = Keys::new("p:");
        let mut pipes = Pipelines::default();
        let members: Vec<String> = (0..2_500).map(|i| format!("u:{i}")).collect();
        let week = keys.uv_shop_week(1, "20240429");
        pipes.visit(true, &keys.uv_shop(1, "20240501"), &week, &members);
        pipes.visit(true, &keys.uv_shop(1, "20240502"), &week, &members[..1]);
        let site_week = keys.uv_site_week("20240429");
        pipes.visit(true, &keys.uv_site("20240501"), &site_week, &members[..1]);
        assert_eq!(pipes.by_slot.len(), 2, "one shop's days share a slot");
        let shop = &pipes.by_slot[&key_slot(&keys.uv_shop(1, "x"))];
        // 3 chunks for the first day, 1 for the second.
        assert_eq!(shop.iter().map(redis::Pipeline::len).sum::<usize>(), 4);
        for (day, week) in [
            (keys.uv_shop(1, "20240501"), week),
            (keys.uv_site("20240501"), site_week),
        ] {
            assert_eq!(
                key_slot(&day),
                key_slot(&week),
                "a day and its week share a slot"
            );
        }
    }

    #[test]
    fn a_span_reads_the_weeks_that_are_over_and_the_days_around_them() {
        // Wednesday 1 May 2024; its Monday is 29 April.
        let wed = day("2024-05-01");
        assert_eq!(monday(wed), day("2024-04-29"));
        assert_eq!(
            monday(day("2024-04-28")),
            day("2024-04-22"),
            "Sunday ends a week"
        );
        let span = Span::new(wed, 90);
        assert_eq!(span.weeks.len(), 12);
        assert_eq!(span.weeks[0], day("2024-02-05"));
        assert_eq!(*span.weeks.last().unwrap(), day("2024-04-22"));
        // 2 Feb (Fri) … 4 Feb, then today's week so far (Mon … Wed).
        assert_eq!(span.days.len(), 3 + 3);
        assert_eq!(span.keys(), 18);
        // Every day of the span once, in weeks or days.
        let mut all: Vec<NaiveDate> = span
            .weeks
            .iter()
            .flat_map(|&m| week_days(m))
            .chain(span.days.iter().copied())
            .collect();
        all.sort();
        let expected: Vec<NaiveDate> = (0..90).rev().map(|b| wed - Days::new(b)).collect();
        assert_eq!(all, expected);
        // A week ending today is not over: its days are read.
        let sunday = day("2024-05-05");
        let span = Span::new(sunday, 14);
        assert_eq!(span.weeks, [day("2024-04-22")]);
        assert_eq!(span.days.len(), 7);
        // The next day it is.
        assert_eq!(Span::new(day("2024-05-06"), 15).weeks.len(), 2);
        // The most keys any 90-day count reads, whatever the weekday.
        let most = (0..7)
            .map(|d| Span::new(wed + Days::new(d), 90).keys())
            .max()
            .unwrap();
        assert_eq!(most, 24, "on a Sunday, today's week is 7 days");
        assert_eq!(
            Span::new(wed, 1),
            Span {
                weeks: vec![],
                days: vec![wed]
            }
        );
    }

    #[test]
    fn a_week_lives_as_long_as_its_sunday() {
        let monday = day("2024-04-22");
        assert_eq!(
            week_retention(monday, day("2024-04-29")),
            retention() - Duration::from_secs(24 * 3600)
        );
        assert_eq!(
            week_retention(monday, day("2024-07-20")),
            retention() - Duration::from_secs(83 * 24 * 3600)
        );
    }
}
