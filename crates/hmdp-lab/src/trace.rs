//! The interleaving behind a verdict. A table says that v1 sold 400 vouchers out of 50; it does
//! not say how. The race experiments therefore record, as their versions run, the steps that
//! decide the race (a stock read, an `UPDATE`'s affected rows, a `SET NX`, a `DEL` and whose
//! value it removed), each with its time since the version started and who did it. After the
//! run a version keeps the events that explain its failure (the buyers of one doubled user, the
//! shop whose entry went stale) and says how many it left out; `run --trace` prints that
//! timeline under the experiment's table, `--json` carries it as `"trace"`.
//!
//! Recording is cheap (a structured event pushed under a mutex, no formatting) and bounded, so
//! the versions always record and the flag only decides what is printed. Events hold numbers
//! and names, never prose: the words are chosen when printing, in Chinese or English. The JSON
//! form is English whatever the language, and its `action` is a fixed token, so scripts can
//! rely on it.
//!
//! A version that runs a second process hands it [`Trace::origin_unix_us`]; that process
//! records against the same origin ([`Trace::joining`]) and prints its events as JSON lines,
//! which the version [`Trace::merge`]s.

use std::{
    fmt::Write as _,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde::{Deserialize, Serialize};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use crate::Lang;

/// Events kept in memory per version at most: far above what any version records, a bound
/// should one record in a loop by mistake. Events beyond it are counted, not kept.
const MAX_RECORDED: usize = 100_000;

/// The terminal width the printed timeline fits in.
pub const WIDTH: usize = 100;

/// Who did something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Actor {
    /// A buyer in a sale, each a user of its own.
    Buyer { user: i64 },
    /// One of a user's concurrent requests, numbered from 1 within its process; `instance`
    /// names the process (0 = A, 1 = B) where the version runs two.
    Request {
        user: i64,
        n: i64,
        instance: Option<u8>,
    },
    /// A holder of a lock, numbered in the order they set out to take it.
    Holder { n: u8 },
    /// A writer of a shop: the first or the second of the shop's two.
    Writer { shop: i64, n: u8 },
    /// A reader of a shop's cache entry, numbered within the shop; `instance` names the cache
    /// client where the readers are spread over several.
    Reader {
        shop: i64,
        n: u32,
        instance: Option<u8>,
    },
    /// The lab itself, counting what the version left behind.
    Lab,
}

impl Actor {
    /// The shop this actor works on, if any.
    pub fn shop(&self) -> Option<i64> {
        match self {
            Actor::Writer { shop, .. } | Actor::Reader { shop, .. } => Some(*shop),
            _ => None,
        }
    }

    /// The user this actor buys for, if any.
    pub fn user(&self) -> Option<i64> {
        match self {
            Actor::Buyer { user } | Actor::Request { user, .. } => Some(*user),
            _ => None,
        }
    }

    pub fn text(&self, lang: Lang) -> String {
        let on = |i: &Option<u8>| i.map(|i| char::from(b'A' + i));
        match (lang, self) {
            (Lang::Zh, Actor::Buyer { user }) => format!("买家 {user}"),
            (Lang::En, Actor::Buyer { user }) => format!("buyer {user}"),
            (Lang::Zh, Actor::Request { user, n, instance }) => match on(instance) {
                Some(i) => format!("实例 {i} 上用户 {user} 的请求 {n}"),
                None => format!("用户 {user} 的请求 {n}"),
            },
            (Lang::En, Actor::Request { user, n, instance }) => match on(instance) {
                Some(i) => format!("user {user} request {n} on {i}"),
                None => format!("user {user} request {n}"),
            },
            (Lang::Zh, Actor::Holder { n }) => format!("持有者 {n}"),
            (Lang::En, Actor::Holder { n }) => format!("holder {n}"),
            (Lang::Zh, Actor::Writer { n, .. }) => format!("写者 {n}"),
            (Lang::En, Actor::Writer { n, .. }) => format!("writer {n}"),
            (Lang::Zh, Actor::Reader { n, instance, .. }) => match on(instance) {
                Some(i) => format!("实例 {i} 的读者 {n}"),
                None => format!("读者 {n}"),
            },
            (Lang::En, Actor::Reader { n, instance, .. }) => match on(instance) {
                Some(i) => format!("reader {n} on {i}"),
                None => format!("reader {n}"),
            },
            (Lang::Zh, Actor::Lab) => "实验室核对".to_owned(),
            (Lang::En, Actor::Lab) => "the lab's count".to_owned(),
        }
    }
}

/// The stock decrement a buyer ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decrement {
    /// `SET stock = stock - 1`, no condition on the stock.
    Blind,
    /// `… AND stock = <the stock read>`.
    IfUnchanged { read: i64 },
    /// `… AND stock >= 0`.
    IfNotNegative,
    /// `… AND stock > 0`.
    IfPositive,
}

/// What an actor did or saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum What {
    /// Read the voucher's stock.
    ReadStock { stock: i64 },
    /// Ran the stock `UPDATE`.
    Decrement { how: Decrement, affected: u64 },
    /// Inserted an order for `user`.
    InsertOrder { user: i64 },
    /// Counted the user's orders of the voucher.
    CountOrders { count: i64 },
    /// Took this process's lock of the user (`synchronized`).
    LocalLock,
    /// `SET NX`: whether it took the lock, after how many refused attempts.
    SetNx { ok: bool, refused_before: u32 },
    /// Entered the critical section, with `others` already inside.
    Enter { others: i64 },
    /// Left the critical section.
    Leave,
    /// Stalled (a GC pause) with the lock's TTL running out.
    Stall { ttl_ms: u64 },
    /// `GET` of the lock: whose value it held (`None`: no key).
    GetLock { holder: Option<u8>, own: bool },
    /// `DEL` of the lock: whose value it deleted (`None`: nothing).
    DelLock { holder: Option<u8>, own: bool },
    /// The compare-and-delete script: whether it deleted (only ever its own).
    ScriptUnlock { deleted: bool },
    /// `GET` of the cache found nothing.
    CacheMiss,
    /// `SET` of the cache.
    CacheSet { value: String },
    /// `DEL` of the cache.
    CacheDel,
    /// Read the shop's row.
    DbRead { value: String },
    /// Updated the shop's row.
    DbUpdate { value: String },
    /// Paused between a write's two steps.
    Pause,
    /// Went on after the pause.
    Resume,
    /// Queried the database to rebuild an expired entry (a rebuild of `ms`).
    Rebuild { ms: u64 },
    /// The lab's count after a sale.
    Sold { stock: i64, orders: i64, left: i64 },
    /// The lab's count of one user's orders.
    UserOrders { user: i64, orders: i64 },
    /// The lab's count of overlaps in the critical section.
    Overlaps { count: i64 },
    /// The lab's comparison of a shop's cache entry with its row.
    CacheVsDb {
        shop: i64,
        cached: Option<String>,
        stored: String,
    },
    /// The lab's count of rebuild queries.
    Rebuilds { count: u64, readers: u64 },
    /// `ZSCORE` of the note's liked set: whether the user was in it.
    CheckLiked { liked: bool },
    /// `UPDATE tb_blog SET liked = liked + delta`.
    UpdateLiked { delta: i64 },
    /// `ZADD` (`added`) or `ZREM` of the user in the liked set.
    SetLiked { added: bool },
    /// The toggle script: which way it went (`1` liked, `-1` unliked).
    ToggleScript { delta: i64 },
    /// The lab's comparison of the note's count with its set.
    LikesVsSet { liked: i64, likers: i64 },
    /// The grab script took a unit from stock bucket `bucket`, which has `left` after it.
    BucketGrab { bucket: u32, left: i64 },
    /// The grab script found stock bucket `bucket` empty and answered "sold out".
    BucketEmpty { bucket: u32 },
    /// The lab's read of every bucket right after `user` was refused: `total` units left in
    /// `buckets` buckets, the most (`most`) in bucket `fullest`.
    UnitsLeft {
        user: i64,
        total: i64,
        buckets: u32,
        fullest: u32,
        most: i64,
    },
    /// The lab's count after a sale split over buckets.
    BucketSale {
        stock: i64,
        accepted: i64,
        refused: i64,
        false_refusals: i64,
    },
}

impl What {
    /// A fixed token for scripts, the same in every language.
    pub fn action(&self) -> &'static str {
        match self {
            What::ReadStock { .. } => "read_stock",
            What::Decrement { .. } => "update_stock",
            What::InsertOrder { .. } => "insert_order",
            What::CountOrders { .. } => "count_orders",
            What::LocalLock => "local_lock",
            What::SetNx { .. } => "set_nx",
            What::Enter { .. } => "enter",
            What::Leave => "leave",
            What::Stall { .. } => "stall",
            What::GetLock { .. } => "get_lock",
            What::DelLock { .. } => "del_lock",
            What::ScriptUnlock { .. } => "unlock_script",
            What::CacheMiss => "cache_miss",
            What::CacheSet { .. } => "cache_set",
            What::CacheDel => "cache_del",
            What::DbRead { .. } => "db_read",
            What::DbUpdate { .. } => "db_update",
            What::Pause => "pause",
            What::Resume => "resume",
            What::Rebuild { .. } => "rebuild",
            What::CheckLiked { .. } => "check_liked",
            What::UpdateLiked { .. } => "update_liked",
            What::SetLiked { .. } => "set_liked",
            What::ToggleScript { .. } => "toggle_script",
            What::BucketGrab { .. } => "bucket_grab",
            What::BucketEmpty { .. } => "sold_out",
            What::Sold { .. }
            | What::UnitsLeft { .. }
            | What::BucketSale { .. }
            | What::LikesVsSet { .. }
            | What::UserOrders { .. }
            | What::Overlaps { .. }
            | What::CacheVsDb { .. }
            | What::Rebuilds { .. } => "count",
        }
    }

    /// The action in a few words.
    pub fn label(&self, lang: Lang) -> &'static str {
        let (zh, en) = match self {
            What::ReadStock { .. } => ("读库存", "read stock"),
            What::Decrement { .. } => ("扣库存", "UPDATE stock"),
            What::InsertOrder { .. } => ("写订单", "INSERT order"),
            What::CountOrders { .. } => ("查已有订单", "count orders"),
            What::LocalLock => ("拿进程内锁", "local lock"),
            What::SetNx { .. } => ("SET NX", "SET NX"),
            What::Enter { .. } => ("进入临界区", "enter"),
            What::Leave => ("离开临界区", "leave"),
            What::Stall { .. } => ("卡住", "stall"),
            What::GetLock { .. } => ("GET 锁", "GET lock"),
            What::DelLock { .. } => ("DEL 锁", "DEL lock"),
            What::ScriptUnlock { .. } => ("Lua 解锁", "Lua unlock"),
            What::CacheMiss => ("缓存未命中", "cache miss"),
            What::CacheSet { .. } => ("写缓存", "SET cache"),
            What::CacheDel => ("删缓存", "DEL cache"),
            What::DbRead { .. } => ("查数据库", "SELECT row"),
            What::DbUpdate { .. } => ("写数据库", "UPDATE row"),
            What::Pause => ("暂停", "pause"),
            What::Resume => ("继续", "resume"),
            What::Rebuild { .. } => ("查库重建", "rebuild"),
            What::CheckLiked { .. } => ("ZSCORE", "ZSCORE"),
            What::UpdateLiked { .. } => ("改点赞数", "UPDATE liked"),
            What::SetLiked { added: true } => ("ZADD", "ZADD"),
            What::SetLiked { added: false } => ("ZREM", "ZREM"),
            What::ToggleScript { .. } => ("Lua 切换", "Lua toggle"),
            What::BucketGrab { .. } => ("Lua 扣分桶", "Lua grab"),
            What::BucketEmpty { .. } => ("答复售罄", "sold out"),
            What::Sold { .. }
            | What::UnitsLeft { .. }
            | What::BucketSale { .. }
            | What::LikesVsSet { .. }
            | What::UserOrders { .. }
            | What::Overlaps { .. }
            | What::CacheVsDb { .. }
            | What::Rebuilds { .. } => ("结果", "result"),
        };
        match lang {
            Lang::Zh => zh,
            Lang::En => en,
        }
    }

    /// What it did or saw, with the figures.
    pub fn detail(&self, lang: Lang) -> String {
        let zh = lang == Lang::Zh;
        let whose = |holder: &Option<u8>, own: bool| match (holder, own, zh) {
            (None, _, true) => "键已不存在".to_owned(),
            (None, _, false) => "no key".to_owned(),
            (Some(_), true, true) => "值是自己的".to_owned(),
            (Some(_), true, false) => "the value is its own".to_owned(),
            (Some(n), false, true) => format!("值是持有者 {n} 的"),
            (Some(n), false, false) => format!("the value is holder {n}'s"),
        };
        match self {
            What::ReadStock { stock } => {
                if zh {
                    format!("库存 = {stock}")
                } else {
                    format!("stock = {stock}")
                }
            }
            What::Decrement { how, affected } => {
                let sql = match how {
                    Decrement::Blind => "SET stock = stock - 1".to_owned(),
                    Decrement::IfUnchanged { read } => format!("… WHERE stock = {read}"),
                    Decrement::IfNotNegative => "… WHERE stock >= 0".to_owned(),
                    Decrement::IfPositive => "… WHERE stock > 0".to_owned(),
                };
                if zh {
                    format!("{sql}：影响 {affected} 行")
                } else {
                    format!("{sql}: {affected} row(s) affected")
                }
            }
            What::InsertOrder { user } => {
                if zh {
                    format!("用户 {user} 的一行订单")
                } else {
                    format!("an order row of user {user}")
                }
            }
            What::CountOrders { count } => {
                if zh {
                    format!("该用户已有 {count} 单")
                } else {
                    format!("{count} order(s) of this user")
                }
            }
            What::LocalLock => {
                if zh {
                    "拿到本进程中该用户的锁".to_owned()
                } else {
                    "this process's lock of the user".to_owned()
                }
            }
            What::SetNx { ok, refused_before } => match (ok, refused_before, zh) {
                (true, 0, true) => "成功".to_owned(),
                (true, 0, false) => "ok".to_owned(),
                (true, n, true) => format!("成功（之前 {n} 次被拒）"),
                (true, n, false) => format!("ok (after {n} refusals)"),
                (false, _, true) => "被拒：锁已被占".to_owned(),
                (false, _, false) => "refused: the lock is taken".to_owned(),
            },
            What::Enter { others } => match (others, zh) {
                (0, true) => "里面没有别人".to_owned(),
                (0, false) => "nobody else inside".to_owned(),
                (n, true) => format!("里面已有 {n} 人：重叠"),
                (n, false) => format!("{n} already inside: an overlap"),
            },
            What::Leave => String::new(),
            What::Stall { ttl_ms } => {
                if zh {
                    format!("比锁的 TTL（{ttl_ms} ms）还久，比如一次 GC")
                } else {
                    format!("longer than the lock's {ttl_ms} ms TTL, a GC pause say")
                }
            }
            What::GetLock { holder, own } => whose(holder, *own),
            What::DelLock { holder, own } => {
                let w = whose(holder, *own);
                if zh {
                    format!("删掉的锁：{w}")
                } else {
                    format!("deleted: {w}")
                }
            }
            What::ScriptUnlock { deleted } => match (deleted, zh) {
                (true, true) => "比较后删除了自己的锁".to_owned(),
                (true, false) => "compared, deleted its own lock".to_owned(),
                (false, true) => "值不是自己的，没有删".to_owned(),
                (false, false) => "not its value: deleted nothing".to_owned(),
            },
            What::CacheMiss => {
                if zh {
                    "GET 为空".to_owned()
                } else {
                    "GET found nothing".to_owned()
                }
            }
            What::CacheSet { value } | What::DbRead { value } | What::DbUpdate { value } => {
                format!("name = {value}")
            }
            What::CacheDel => String::new(),
            What::Pause => {
                if zh {
                    "两步之间停住（慢写、GC）".to_owned()
                } else {
                    "between its two steps (a slow write, a GC)".to_owned()
                }
            }
            What::Resume => {
                if zh {
                    "另一写者已写完，缓存又有值".to_owned()
                } else {
                    "the other writer is done, the entry cached again".to_owned()
                }
            }
            What::Rebuild { ms } => {
                if zh {
                    format!("查询耗时 {ms} ms")
                } else {
                    format!("a {ms} ms query")
                }
            }
            What::Sold {
                stock,
                orders,
                left,
            } => {
                if zh {
                    format!("库存 {stock}，写下 {orders} 单，剩余库存 {left}")
                } else {
                    format!("stock {stock}, {orders} orders written, {left} left")
                }
            }
            What::UserOrders { user, orders } => {
                if zh {
                    format!("用户 {user} 在库里有 {orders} 单")
                } else {
                    format!("user {user} holds {orders} orders")
                }
            }
            What::Overlaps { count } => {
                if zh {
                    format!("临界区里 {count} 次有人进入时别人还在")
                } else {
                    format!("{count} entries while another was inside")
                }
            }
            What::CacheVsDb {
                shop,
                cached,
                stored,
            } => {
                let cached = cached.as_deref().unwrap_or("-");
                if zh {
                    format!("店铺 {shop}：缓存 name = {cached}，数据库 name = {stored}")
                } else {
                    format!("shop {shop}: cached name = {cached}, database name = {stored}")
                }
            }
            What::Rebuilds { count, readers } => {
                if zh {
                    format!("{readers} 个读者，查库重建 {count} 次")
                } else {
                    format!("{readers} readers, {count} rebuild queries")
                }
            }
            What::CheckLiked { liked } => match (liked, zh) {
                (true, true) => "已点过赞".to_owned(),
                (true, false) => "liked already".to_owned(),
                (false, true) => "没点过赞".to_owned(),
                (false, false) => "not liked yet".to_owned(),
            },
            What::UpdateLiked { delta } | What::ToggleScript { delta } => {
                format!("liked {delta:+}")
            }
            What::SetLiked { .. } => String::new(),
            What::LikesVsSet { liked, likers } => {
                if zh {
                    format!("数据库点赞数 {liked}，集合里 {likers} 人")
                } else {
                    format!("{liked} likes in the database, {likers} users in the set")
                }
            }
            What::BucketGrab { bucket, left } => {
                if zh {
                    format!("从分桶 {bucket} 抢到一件，该桶还剩 {left}")
                } else {
                    format!("a unit from bucket {bucket}, {left} left in it")
                }
            }
            What::BucketEmpty { bucket } => {
                if zh {
                    format!("分桶 {bucket} 已空；脚本只看这一个桶")
                } else {
                    format!("bucket {bucket} is empty; the script sees no other bucket")
                }
            }
            What::UnitsLeft {
                user,
                total,
                buckets,
                fullest,
                most,
            } => {
                if zh {
                    format!(
                        "买家 {user} 被拒之后，{buckets} 个分桶仍有 {total} 件（分桶 {fullest} 有 {most} 件）"
                    )
                } else {
                    format!(
                        "after buyer {user}'s refusal, {total} units still in {buckets} buckets \
                         ({most} in bucket {fullest})"
                    )
                }
            }
            What::BucketSale {
                stock,
                accepted,
                refused,
                false_refusals,
            } => {
                if zh {
                    format!(
                        "库存 {stock}，抢到 {accepted} 人，被拒 {refused} 人，其中 {false_refusals} 人被拒时别的分桶还有货"
                    )
                } else {
                    format!(
                        "stock {stock}, {accepted} got one, {refused} refused, {false_refusals} \
                         of them while other buckets held units"
                    )
                }
            }
        }
    }
}

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Microseconds since the version started, on a monotonic clock.
    pub t_us: u64,
    pub actor: Actor,
    pub what: What,
}

/// An event as `--json` prints it: English, `action` a fixed token.
#[derive(Debug, Serialize)]
pub struct JsonEvent {
    pub t_us: u64,
    pub actor: String,
    pub action: &'static str,
    pub detail: String,
}

impl Event {
    pub fn json(&self) -> JsonEvent {
        JsonEvent {
            t_us: self.t_us,
            actor: self.actor.text(Lang::En),
            action: self.what.action(),
            detail: self.what.detail(Lang::En),
        }
    }
}

/// A version's recorder, shared by its tasks (cloning shares it).
#[derive(Clone)]
pub struct Trace {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    origin: Instant,
    origin_unix_us: u64,
    events: Mutex<Recorded>,
}

#[derive(Default)]
struct Recorded {
    events: Vec<Event>,
    dropped: usize,
}

impl Trace {
    /// A recorder whose time starts now.
    pub fn start() -> Self {
        Self::from(Instant::now(), unix_us(SystemTime::now()))
    }

    /// A recorder that records nothing, for code shared with versions that are not traced.
    pub fn off() -> Self {
        Self { inner: None }
    }

    /// A recorder in another process of the same version, whose time starts at the version's
    /// start (`origin_unix_us`, from [`Trace::origin_unix_us`]). The wall clock is read once,
    /// to place that origin on this process's monotonic clock.
    pub fn joining(origin_unix_us: u64) -> Self {
        let (now, wall) = (Instant::now(), unix_us(SystemTime::now()));
        let since = Duration::from_micros(wall.saturating_sub(origin_unix_us));
        Self::from(now.checked_sub(since).unwrap_or(now), origin_unix_us)
    }

    fn from(origin: Instant, origin_unix_us: u64) -> Self {
        Self {
            inner: Some(Arc::new(Inner {
                origin,
                origin_unix_us,
                events: Mutex::default(),
            })),
        }
    }

    /// The version's start on the wall clock, for a second process to [`Trace::joining`].
    pub fn origin_unix_us(&self) -> u64 {
        self.inner.as_ref().map_or(0, |i| i.origin_unix_us)
    }

    /// Records that `actor` did `what`, now.
    pub fn record(&self, actor: Actor, what: What) {
        let Some(inner) = &self.inner else { return };
        let t_us = inner.origin.elapsed().as_micros() as u64;
        if let Ok(mut r) = inner.events.lock() {
            if r.events.len() < MAX_RECORDED {
                r.events.push(Event { t_us, actor, what });
            } else {
                r.dropped += 1;
            }
        }
    }

    /// Adds events recorded elsewhere (another process of the version).
    pub fn merge(&self, events: impl IntoIterator<Item = Event>) {
        for e in events {
            let Some(inner) = &self.inner else { return };
            if let Ok(mut r) = inner.events.lock() {
                if r.events.len() < MAX_RECORDED {
                    r.events.push(e);
                } else {
                    r.dropped += 1;
                }
            }
        }
    }

    /// Every event so far, in time order.
    pub fn events(&self) -> Vec<Event> {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        let mut events = inner
            .events
            .lock()
            .map(|r| r.events.clone())
            .unwrap_or_default();
        events.sort_by_key(|e| e.t_us);
        events
    }

    /// The timeline of the events `keep` selects, in time order, at most `cap` of them; the
    /// others are counted as left out.
    pub fn timeline(&self, keep: impl Fn(&Event) -> bool, cap: usize) -> Timeline {
        let dropped = self.inner.as_ref().map_or(0, |i| {
            i.events.lock().map(|r| r.dropped).unwrap_or_default()
        });
        let all = self.events();
        let recorded = all.len() + dropped;
        let mut events: Vec<Event> = all.into_iter().filter(|e| keep(e)).collect();
        events.truncate(cap);
        Timeline {
            left_out: recorded - events.len(),
            events,
        }
    }
}

fn unix_us(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The events that explain a version's outcome, in time order, and how many recorded events
/// they leave out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timeline {
    pub events: Vec<Event>,
    pub left_out: usize,
}

impl Timeline {
    pub fn json(&self) -> Vec<JsonEvent> {
        self.events.iter().map(Event::json).collect()
    }

    /// The timeline for a terminal of [`WIDTH`] columns: a heading naming `version`, then a
    /// line per event (time, who, what, detail), details wrapped under themselves.
    pub fn render(&self, version: &str, lang: Lang) -> String {
        let mut out = String::new();
        let shown = self.events.len();
        let total = shown + self.left_out;
        let heading = match lang {
            Lang::Zh => format!(
                "{version} 的交错（记录 {total} 条事件，列出与违规有关的 {shown} 条，略去 {} 条）：",
                self.left_out
            ),
            Lang::En => format!(
                "{version}: the interleaving ({total} events recorded, the {shown} that \
                 explain the failure shown, {} left out):",
                self.left_out
            ),
        };
        for piece in wrap(&heading, WIDTH - 2) {
            let _ = writeln!(out, "  {piece}");
        }
        let rows: Vec<(String, String, &str, String)> = self
            .events
            .iter()
            .map(|e| {
                (
                    format!("{:.3} ms", e.t_us as f64 / 1000.0),
                    e.actor.text(lang),
                    e.what.label(lang),
                    e.what.detail(lang),
                )
            })
            .collect();
        let width =
            |f: fn(&(String, String, &str, String)) -> usize| rows.iter().map(f).max().unwrap_or(0);
        let time_w = width(|r| r.0.width());
        let actor_w = width(|r| r.1.width()).min(30);
        let action_w = width(|r| r.2.width());
        let indent = 4;
        let detail_at = indent + time_w + 2 + actor_w + 2 + action_w + 2;
        // A detail column narrower than this goes on lines of its own, under the actor.
        let detail_w = WIDTH.saturating_sub(detail_at);
        let (detail_at, detail_w) = if detail_w >= 24 {
            (detail_at, detail_w)
        } else {
            (indent + time_w + 2, WIDTH - (indent + time_w + 2))
        };
        for (time, actor, action, detail) in &rows {
            let mut line = format!("{}{}{time}  ", " ".repeat(indent), pad(time, time_w));
            line.push_str(actor);
            line.push_str(&pad(actor, actor_w));
            line.push_str("  ");
            line.push_str(action);
            line.push_str(&pad(action, action_w));
            line.push_str("  ");
            let mut pieces = wrap(detail, detail_w).into_iter();
            if line.width() > detail_at {
                // A long actor pushed the detail: start it on the next line.
                out.push_str(line.trim_end());
                out.push('\n');
                line = " ".repeat(detail_at);
            }
            line.push_str(&pieces.next().unwrap_or_default());
            out.push_str(line.trim_end());
            out.push('\n');
            for piece in pieces {
                out.push_str(&" ".repeat(detail_at));
                out.push_str(&piece);
                out.push('\n');
            }
        }
        out
    }
}

/// The timelines of an experiment's broken versions (those the course teaches to fail) that
/// recorded one, each after a blank line; `rows` as the table takes them.
pub(crate) fn timelines(rows: &[(&crate::Version, &crate::Outcome)], lang: Lang) -> String {
    let mut out = String::new();
    for (version, outcome) in rows {
        if let (false, Some(timeline)) = (version.holds, &outcome.trace) {
            out.push('\n');
            out.push_str(&timeline.render(version.name, lang));
        }
    }
    out
}

/// The spaces that bring `s` to `w` display columns.
fn pad(s: &str, w: usize) -> String {
    " ".repeat(w.saturating_sub(s.width()))
}

/// `s` cut into lines of at most `w` display columns, at a space where there is one (Chinese
/// text may break anywhere).
fn wrap(s: &str, w: usize) -> Vec<String> {
    let w = w.max(8);
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut line_w = 0;
    for word in s.split_inclusive(' ') {
        let word_w = word.trim_end().width();
        if line_w + word_w <= w {
            line.push_str(word);
            line_w += word.width();
            continue;
        }
        if !line.trim_end().is_empty() && word_w <= w {
            lines.push(line.trim_end().to_owned());
            line = word.to_owned();
            line_w = word.width();
            continue;
        }
        for c in word.chars() {
            let cw = c.width().unwrap_or(0);
            if line_w + cw > w {
                lines.push(line.trim_end().to_owned());
                line.clear();
                line_w = 0;
            }
            line.push(c);
            line_w += cw;
        }
    }
    if !line.trim_end().is_empty() || lines.is_empty() {
        lines.push(line.trim_end().to_owned());
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Timeline {
        let trace = Trace::start();
        trace.record(Actor::Buyer { user: 3 }, What::ReadStock { stock: 1 });
        trace.record(
            Actor::Request {
                user: 2,
                n: 14,
                instance: Some(1),
            },
            What::DelLock {
                holder: Some(2),
                own: false,
            },
        );
        trace.record(
            Actor::Lab,
            What::CacheVsDb {
                shop: 12,
                cached: Some("second-12 ".repeat(12)),
                stored: "first-12".to_owned(),
            },
        );
        trace.timeline(|_| true, 10)
    }

    #[test]
    fn every_line_fits_the_terminal_in_both_languages() {
        for lang in [Lang::Zh, Lang::En] {
            let text = sample().render("v1-no-check", lang);
            for line in text.lines() {
                assert!(line.width() <= WIDTH, "{} columns: {line}", line.width());
            }
            assert!(text.lines().count() > 4, "the long detail wraps:\n{text}");
        }
    }

    #[test]
    fn a_timeline_is_in_time_order_and_counts_what_it_leaves_out() {
        let trace = Trace::start();
        let joined = Trace::joining(trace.origin_unix_us());
        joined.record(Actor::Holder { n: 2 }, What::Leave);
        trace.record(Actor::Holder { n: 1 }, What::Leave);
        trace.merge(joined.events());
        trace.record(Actor::Holder { n: 3 }, What::Leave);
        let t = trace.timeline(|e| e.actor != Actor::Holder { n: 3 }, 10);
        assert_eq!(t.events.len(), 2);
        assert_eq!(t.left_out, 1);
        assert!(t.events.windows(2).all(|w| w[0].t_us <= w[1].t_us));
    }

    #[test]
    fn wrapping_breaks_chinese_anywhere_and_english_at_spaces() {
        assert_eq!(wrap("aaa bbb ccc", 8), vec!["aaa bbb", "ccc"]);
        assert!(wrap(&"库存".repeat(10), 8).iter().all(|l| l.width() <= 8));
    }
}
