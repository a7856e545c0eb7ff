//! The flash sale's Lua scripts. Each gets every key it touches in `KEYS` (one shard's hash
//! tag), is created once and invoked with `EVALSHA` (reloaded by redis-rs on `NOSCRIPT`).
//!
//! The voucher hash's field names come from [`super::voucher_hash`], the order stream's entry fields
//! from [`order_stream`], both formatted into the scripts' text once; the grab script's answer
//! codes are declared on [`GrabAnswer`], which decodes that answer for every caller.
//!
//! A script's arguments are a contract between the Lua and the Rust that sends them. Each
//! script that takes arguments has one `…Call` type: its constants name the place of each
//! argument in `ARGV` (formatted into the script's text), and its `command` is the one
//! function that puts the values there.

use std::sync::LazyLock;

use redis::{
    Cmd, ErrorKind, FromRedisValue, ParsingError, RedisResult, Script, ServerErrorKind, Value,
    aio::ConnectionLike,
};

use super::voucher_hash::{
    FIELD_BEGIN, FIELD_END, FIELD_GENERATION, FIELD_MISSING, FIELD_SOLD, FIELD_STOCK, Sale,
};
use crate::order_stream::{self, PendingRecord};

/// Decides one order.
///
/// KEYS: voucher hash, buyers hash (user id → order id), order stream, the shard's pay
/// deadlines (sorted set), and optionally the order's pending record
/// (`seckill:pending:<order id>`; never on a cluster, where it is in another slot).
/// ARGV: see [`GrabCall`], which builds the command.
/// Answers `{code, …}`, decoded by [`GrabAnswer`]: accepted (stock taken, buyer recorded with
/// the order, order appended to the stream with the [`order_stream`] fields and its deadline
/// to the deadlines, in the one atomic step: no accepted order lacks a deadline), sold out,
/// already bought (with the buyer's order), not started, ended, not loaded, no such voucher.
/// The pending record is written (`NX`) only when the order is accepted, so a refusal leaves
/// none behind; an id that already had one (another order's, kept) is answered `{0, gen, 1}`.
///
/// "Not loaded" (the caller warms the voucher and retries) also covers a hash missing any of
/// stock, begin and end (no `tonumber(nil)`), and a buyer set that vanished while the hash
/// stayed (sold above 0, buyers hash gone: evicted or deleted) — without the guard a buyer
/// whose record was lost could buy a second time.
pub static GRAB: LazyLock<Script> = LazyLock::new(|| Script::new(&grab_lua()));

/// The text of [`GRAB`]: the [`grab_head`], the one-key decision, the [`take_lua`] and
/// [`append_lua`], then the pending record.
fn grab_lua() -> String {
    format!(
        r"{head}if prior then return {{{already_bought}, prior, gen}} end
if tonumber(v[1]) <= 0 then return {{{sold_out}, gen}} end
if v[5] and tonumber(v[5]) > 0 and redis.call('EXISTS', KEYS[2]) == 0 then return {{{not_loaded}}} end
{take}{append}if KEYS[5] and not redis.call('SET', KEYS[5], ARGV[{a_record}], 'PX', ARGV[{a_record_ttl}], 'NX') then
  return {{{accepted}, gen, 1}}
end
return {{{accepted}, gen}}
",
        head = grab_head(),
        take = take_lua(),
        append = append_lua(),
        accepted = GrabAnswer::ACCEPTED,
        sold_out = GrabAnswer::SOLD_OUT,
        already_bought = GrabAnswer::ALREADY_BOUGHT,
        not_loaded = GrabAnswer::NOT_LOADED,
        a_record = GrabCall::PENDING_RECORD,
        a_record_ttl = GrabCall::PENDING_TTL,
    )
}

/// What every grab checks first, on the bucket that holds the buyer's record (`KEYS[1]` its
/// hash, `KEYS[2]` its buyers): loaded, a voucher at all, the sale's window. Leaves the
/// bucket's fields in `v`, Redis's clock in `now`, the generation in `gen` and the buyer's
/// order, if any, in `prior`.
fn grab_head() -> String {
    format!(
        r"
local v = redis.call('HMGET', KEYS[1], '{FIELD_STOCK}', '{FIELD_BEGIN}', '{FIELD_END}', '{FIELD_MISSING}', '{FIELD_SOLD}', '{FIELD_GENERATION}')
if not (v[1] and v[2] and v[3]) then
  if v[4] and not v[1] then return {{{no_such_voucher}}} end
  return {{{not_loaded}}}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now < tonumber(v[2]) then return {{{not_started}}} end
if now > tonumber(v[3]) then return {{{ended}}} end
local gen = tonumber(v[6]) or 0
local prior = redis.call('HGET', KEYS[2], ARGV[{a_user}])
",
        not_started = GrabAnswer::NOT_STARTED,
        ended = GrabAnswer::ENDED,
        not_loaded = GrabAnswer::NOT_LOADED,
        no_such_voucher = GrabAnswer::NO_SUCH_VOUCHER,
        a_user = GrabCall::USER,
    )
}

/// A unit of the bucket's own stock taken, its buyer recorded with the order.
fn take_lua() -> String {
    format!(
        r"redis.call('HINCRBY', KEYS[1], '{FIELD_STOCK}', -1)
redis.call('HINCRBY', KEYS[1], '{FIELD_SOLD}', 1)
redis.call('HSET', KEYS[2], ARGV[{a_user}], ARGV[{a_order}])
",
        a_user = GrabCall::USER,
        a_order = GrabCall::ORDER,
    )
}

/// The order appended to the stream (`KEYS[3]`) and its pay deadline to the deadlines
/// (`KEYS[4]`), in the step that took its unit.
fn append_lua() -> String {
    format!(
        r"-- The trace, when sent, is the one argument after an even count (4 alone, 6 with the record).
local trace = #ARGV % 2 == 1 and ARGV[#ARGV]
if trace then
  redis.call('XADD', KEYS[3], '*', '{order}', ARGV[{a_order}], '{user}', ARGV[{a_user}], '{voucher}', ARGV[{a_voucher}], '{trace_field}', trace)
else
  redis.call('XADD', KEYS[3], '*', '{order}', ARGV[{a_order}], '{user}', ARGV[{a_user}], '{voucher}', ARGV[{a_voucher}])
end
redis.call('ZADD', KEYS[4], ARGV[{a_deadline}], ARGV[{a_order}])
",
        order = order_stream::FIELD_ORDER_ID,
        user = order_stream::FIELD_USER_ID,
        voucher = order_stream::FIELD_VOUCHER_ID,
        trace_field = order_stream::FIELD_TRACE,
        a_voucher = GrabCall::VOUCHER,
        a_user = GrabCall::USER,
        a_order = GrabCall::ORDER,
        a_deadline = GrabCall::DEADLINE,
    )
}

/// Everything one grab sends with [`GRAB`].
#[derive(Debug, Clone, Copy)]
pub struct GrabCall<'a> {
    /// `KEYS[1]` to `KEYS[4]`: the voucher hash, the buyers hash, the shard's order stream and
    /// its pay deadlines.
    pub keys: [&'a str; 4],
    pub voucher: i64,
    pub user: i64,
    pub order: i64,
    /// The order's pay deadline, in ms since the epoch.
    pub deadline_ms: i64,
    /// The order's pending record: its key (`KEYS[5]`) and its value, written for
    /// [`order_stream::PENDING_TTL`] if the grab is accepted.
    pub pending: Option<(&'a str, PendingRecord)>,
    /// The grab's `traceparent` while traces are exported: the last argument, added to the
    /// order's stream entry as [`order_stream::FIELD_TRACE`].
    pub trace: Option<&'a str>,
}

impl GrabCall<'_> {
    /// Places in `ARGV`, counted from 1 as Lua counts.
    pub const VOUCHER: usize = 1;
    pub const USER: usize = 2;
    pub const ORDER: usize = 3;
    pub const DEADLINE: usize = 4;
    /// With the pending record only, after the others.
    pub const PENDING_RECORD: usize = 5;
    pub const PENDING_TTL: usize = 6;
    // The trace, when sent, comes last: at 5 without the pending record, at 7 with it (the
    // script tells it by the odd count).

    /// The `EVALSHA` of [`GRAB`], for [`eval`].
    pub fn command(&self) -> Cmd {
        let mut cmd = evalsha(&GRAB, self.keys.len() + usize::from(self.pending.is_some()));
        cmd.arg(&self.keys[..]);
        if let Some((key, _)) = self.pending {
            cmd.arg(key);
        }
        cmd.arg(self.voucher)
            .arg(self.user)
            .arg(self.order)
            .arg(self.deadline_ms);
        if let Some((_, record)) = self.pending {
            cmd.arg(record.to_string())
                .arg(order_stream::PENDING_TTL.as_millis() as u64);
        }
        if let Some(trace) = self.trace {
            cmd.arg(trace);
        }
        cmd
    }
}

/// An `EVALSHA` of `script` with `keys` keys, to which the keys and then the arguments are
/// added, run with [`eval`]. Built straight into one command: redis-rs's `ScriptInvocation`
/// copies every key and argument into a buffer of its own first, and the grab, with up to nine
/// of them, runs on every request that reaches Redis.
pub(crate) fn evalsha(script: &Script, keys: usize) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys);
    cmd
}

/// Runs an [`evalsha`] command; on `NOSCRIPT` (Redis restarted, or its scripts were flushed)
/// loads `script` and runs the command again, as `ScriptInvocation::invoke_async` does.
pub(crate) async fn eval<T: FromRedisValue>(
    script: &Script,
    cmd: &Cmd,
    conn: &mut impl ConnectionLike,
) -> RedisResult<T> {
    match cmd.query_async(conn).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.load_async(conn).await?;
            cmd.query_async(conn).await
        }
        answer => answer,
    }
}

/// The answer of [`GRAB`], decoded once for every caller (the service, the tests).
///
/// `generation` is the voucher hash's load generation (0 for a hash loaded before generations
/// existed): an answer is remembered only under it (`super::memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrabAnswer {
    /// Stock taken, buyer recorded, order appended to the stream.
    Accepted {
        generation: u64,
        /// The order id already had a pending record (another order's, which was kept): the
        /// id counter was reset, and the worker will refuse this order as a conflict.
        id_in_use: bool,
    },
    SoldOut {
        generation: u64,
    },
    /// The buyer has an order already: its id (Redis hands back the id as it stored it, a
    /// string, since a Lua number would round it).
    AlreadyBought {
        order: Option<i64>,
        generation: u64,
    },
    NotStarted,
    Ended,
    /// The voucher hash is missing or unusable: warm the voucher, then ask again.
    NotLoaded,
    /// The voucher id is marked as no flash-sale voucher.
    NoSuchVoucher,
}

impl GrabAnswer {
    /// `{0, gen}`, or `{0, gen, 1}` when the order id had a pending record already.
    pub const ACCEPTED: i64 = 0;
    /// `{1, gen}`.
    pub const SOLD_OUT: i64 = 1;
    /// `{2, order id, gen}`.
    pub const ALREADY_BOUGHT: i64 = 2;
    /// `{3}`.
    pub const NOT_STARTED: i64 = 3;
    /// `{4}`.
    pub const ENDED: i64 = 4;
    /// `{-1}`.
    pub const NOT_LOADED: i64 = -1;
    /// `{-2}`.
    pub const NO_SUCH_VOUCHER: i64 = -2;

    /// Decodes the script's reply. A code this version does not know reads as "not loaded",
    /// whose answer (warm the voucher and ask again) is always safe.
    pub fn from_reply(reply: &[i64]) -> Self {
        let generation = |i: usize| reply.get(i).map_or(0, |g| (*g).max(0) as u64);
        match reply.first().copied() {
            Some(Self::ACCEPTED) => Self::Accepted {
                generation: generation(1),
                id_in_use: reply.get(2) == Some(&1),
            },
            Some(Self::SOLD_OUT) => Self::SoldOut {
                generation: generation(1),
            },
            Some(Self::ALREADY_BOUGHT) => Self::AlreadyBought {
                order: reply.get(1).copied(),
                generation: generation(2),
            },
            Some(Self::NOT_STARTED) => Self::NotStarted,
            Some(Self::ENDED) => Self::Ended,
            Some(Self::NO_SUCH_VOUCHER) => Self::NoSuchVoucher,
            _ => Self::NotLoaded,
        }
    }

    /// The grab took stock (and so wrote: an accepted grab waits for the replicas).
    pub fn is_accepted(&self) -> bool {
        matches!(self, Self::Accepted { .. })
    }
}

impl FromRedisValue for GrabAnswer {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let reply: Vec<i64> = FromRedisValue::from_redis_value(v)?;
        Ok(Self::from_reply(&reply))
    }
}

/// Loads a voucher's sale fields unless it is already (completely) loaded; a missing marker
/// or a partial hash is replaced. Called through [`super::voucher_hash::Sale::load`].
///
/// KEYS and ARGV: see [`LoadCall`]. Returns 1 if written, 0 if it was there.
///
/// With the released set: an order in it but not among the closed orders given was closed
/// after the database snapshot the stock comes from (its [`RELEASE`] found no hash to give the
/// unit to), so the stock written is one higher for each; the closed orders given join the set,
/// so a [`RELEASE`] of one of them, late, gives nothing twice.
pub(crate) static LOAD: LazyLock<Script> = LazyLock::new(|| Script::new(&load_lua()));

/// The text of [`LOAD`].
fn load_lua() -> String {
    format!(
        r"
local v = redis.call('HMGET', KEYS[1], '{FIELD_STOCK}', '{FIELD_BEGIN}', '{FIELD_END}')
if v[1] and v[2] and v[3] then return 0 end
local stock = tonumber(ARGV[{stock}])
if KEYS[2] then
  local counted = {{}}
  for i = {closed}, #ARGV do counted[ARGV[i]] = true end
  for _, o in ipairs(redis.call('SMEMBERS', KEYS[2])) do
    if not counted[o] then stock = stock + 1 end
  end
  for i = {closed}, #ARGV, 500 do
    redis.call('SADD', KEYS[2], unpack(ARGV, i, math.min(i + 499, #ARGV)))
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], '{FIELD_STOCK}', stock, '{FIELD_BEGIN}', ARGV[{begin}], '{FIELD_END}', ARGV[{end}], '{FIELD_SOLD}', ARGV[{sold}],
  '{FIELD_GENERATION}', ARGV[{generation}])
return 1
",
        stock = LoadCall::STOCK,
        begin = LoadCall::BEGIN,
        end = LoadCall::END,
        sold = LoadCall::SOLD,
        generation = LoadCall::GENERATION,
        closed = LoadCall::CLOSED_FROM,
    )
}

/// Everything one load sends with [`LOAD`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoadCall<'a> {
    /// `KEYS[1]`: the voucher hash.
    pub key: &'a str,
    /// Its `sold` is the buyers recorded in the buyers hash, its generation the one announced
    /// to every instance before (`Seckill::announce_load`).
    pub sale: &'a Sale,
    /// `KEYS[2]`, the voucher's released set, and the closed orders the stock counts as
    /// returned.
    pub released: Option<(&'a str, &'a [i64])>,
}

impl LoadCall<'_> {
    /// Places in `ARGV`, counted from 1 as Lua counts.
    pub(crate) const STOCK: usize = 1;
    pub(crate) const BEGIN: usize = 2;
    pub(crate) const END: usize = 3;
    pub(crate) const SOLD: usize = 4;
    pub(crate) const GENERATION: usize = 5;
    /// The closed orders, from here to the end (with the released set only).
    pub(crate) const CLOSED_FROM: usize = 6;

    /// The `EVALSHA` of [`LOAD`], for [`eval`].
    pub(crate) fn command(&self) -> Cmd {
        let mut cmd = evalsha(&LOAD, 1 + usize::from(self.released.is_some()));
        cmd.arg(self.key);
        if let Some((set, _)) = self.released {
            cmd.arg(set);
        }
        cmd.arg(self.sale.stock)
            .arg(self.sale.begin_ms)
            .arg(self.sale.end_ms)
            .arg(self.sale.sold)
            .arg(self.sale.generation);
        if let Some((_, closed)) = self.released {
            cmd.arg(closed);
        }
        cmd
    }
}

/// Gives the units of closed orders back to a sale, once each: an order already in the
/// released set (given back before, or counted by the load that wrote the hash) gives nothing.
/// Without a loaded hash the orders only join the set; the next [`LOAD`] counts them.
///
/// KEYS and ARGV: see [`ReleaseCall`].
/// Returns `{units given back now, the stock before (-1: not loaded)}`.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(&release_lua()));

/// The text of [`RELEASE`].
fn release_lua() -> String {
    format!(
        r"
local added = 0
for i = {orders}, #ARGV do added = added + redis.call('SADD', KEYS[2], ARGV[i]) end
local stock = redis.call('HGET', KEYS[1], '{FIELD_STOCK}')
if not stock then return {{added, -1}} end
if added > 0 then redis.call('HINCRBY', KEYS[1], '{FIELD_STOCK}', added) end
return {{added, tonumber(stock)}}
",
        orders = ReleaseCall::ORDERS_FROM,
    )
}

/// Everything one release sends with [`RELEASE`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseCall<'a> {
    /// `KEYS[1]`: the voucher hash.
    pub hash: &'a str,
    /// `KEYS[2]`: the voucher's released set.
    pub released: &'a str,
    /// The closed orders.
    pub orders: &'a [i64],
}

impl ReleaseCall<'_> {
    /// The place in `ARGV` of the first order; the others follow to the end.
    pub(crate) const ORDERS_FROM: usize = 1;

    /// The `EVALSHA` of [`RELEASE`], for [`eval`].
    pub(crate) fn command(&self) -> Cmd {
        let mut cmd = evalsha(&RELEASE, 2);
        cmd.arg(self.hash).arg(self.released).arg(self.orders);
        cmd
    }
}

/// Raises a loaded sale's generation to the one given (never lowers it): after units came back
/// to a sale that was sold out, answers remembered from before are ignored and new ones
/// honoured.
///
/// KEYS and ARGV: see [`RaiseGenerationCall`].
pub(crate) static RAISE_GENERATION: LazyLock<Script> =
    LazyLock::new(|| Script::new(&raise_generation_lua()));

/// The text of [`RAISE_GENERATION`].
fn raise_generation_lua() -> String {
    format!(
        r"
if redis.call('HEXISTS', KEYS[1], '{FIELD_STOCK}') == 0 then return 0 end
local g = tonumber(redis.call('HGET', KEYS[1], '{FIELD_GENERATION}')) or 0
if tonumber(ARGV[{generation}]) > g then redis.call('HSET', KEYS[1], '{FIELD_GENERATION}', ARGV[{generation}]) end
return 1
",
        generation = RaiseGenerationCall::GENERATION,
    )
}

/// Everything one raise sends with [`RAISE_GENERATION`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct RaiseGenerationCall<'a> {
    /// `KEYS[1]`: the voucher hash.
    pub hash: &'a str,
    pub generation: u64,
}

impl RaiseGenerationCall<'_> {
    /// The place in `ARGV`.
    pub(crate) const GENERATION: usize = 1;

    /// The `EVALSHA` of [`RAISE_GENERATION`], for [`eval`].
    pub(crate) fn command(&self) -> Cmd {
        let mut cmd = evalsha(&RAISE_GENERATION, 1);
        cmd.arg(self.hash).arg(self.generation);
        cmd
    }
}

/// The next load generation of a voucher: above every earlier one, and at least Redis's clock
/// in ms, so that a lost counter key starts above the generations instances still remember.
///
/// KEYS: the voucher's generation key. Returns the new generation.
pub(crate) static NEXT_GENERATION: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local g = redis.call('INCR', KEYS[1])
if g < now then
  redis.call('SET', KEYS[1], now)
  g = now
end
return g
",
    )
});

/// The warm-up's check, under the warm-up lock: is the voucher loaded and usable?
///
/// KEYS: voucher hash, buyers hash. Returns 1 loaded; 0 not loaded (nothing, or a missing
/// marker); -1 it was unusable and has been dropped, so it must be loaded again: a partial
/// hash (a field missing), or sold above 0 with the buyers hash gone. Dropping it makes the
/// voucher "not loaded" for [`GRAB`], so no order is accepted until the warm-up has rebuilt
/// stock and buyers from the database and the stream.
pub(crate) static CHECK_LOADED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"
local v = redis.call('HMGET', KEYS[1], '{FIELD_STOCK}', '{FIELD_BEGIN}', '{FIELD_END}', '{FIELD_SOLD}')
if v[1] and v[2] and v[3] then
  if v[4] and tonumber(v[4]) > 0 and redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('DEL', KEYS[1])
    return -1
  end
  return 1
end
if v[1] or v[2] or v[3] then
  redis.call('DEL', KEYS[1])
  return -1
end
return 0
",
    ))
});

/// Remembers for a while that a voucher id is not a flash-sale voucher, unless it got loaded.
///
/// KEYS and ARGV: see [`MarkMissingCall`]. Returns 1 if marked.
pub(crate) static MARK_MISSING: LazyLock<Script> =
    LazyLock::new(|| Script::new(&mark_missing_lua()));

/// The text of [`MARK_MISSING`].
fn mark_missing_lua() -> String {
    format!(
        r"
if redis.call('HEXISTS', KEYS[1], '{FIELD_STOCK}') == 1 then return 0 end
redis.call('HSET', KEYS[1], '{FIELD_MISSING}', '1')
redis.call('PEXPIRE', KEYS[1], ARGV[{ttl}])
return 1
",
        ttl = MarkMissingCall::TTL,
    )
}

/// Everything one mark sends with [`MARK_MISSING`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct MarkMissingCall<'a> {
    /// `KEYS[1]`: the voucher hash.
    pub hash: &'a str,
    /// How long the mark lasts, in ms.
    pub ttl_ms: u64,
}

impl MarkMissingCall<'_> {
    /// The place in `ARGV`.
    pub(crate) const TTL: usize = 1;

    /// The `EVALSHA` of [`MARK_MISSING`], for [`eval`].
    pub(crate) fn command(&self) -> Cmd {
        let mut cmd = evalsha(&MARK_MISSING, 1);
        cmd.arg(self.hash).arg(self.ttl_ms);
        cmd
    }
}

/// `hmdp reconcile`'s view of a sale in Redis: both hashes read at one instant.
///
/// KEYS: voucher hash, buyers hash. Returns `{voucher fields, buyers}` (`HGETALL` each).
pub(crate) static READ_SALE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(r"return {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}")
});

/// Drops a sale from Redis so that the next warm-up rebuilds it from the database and the
/// streams (`hmdp reconcile --repair`, under the warm-up lock). Grabs meanwhile see "not
/// loaded" and wait for that warm-up.
///
/// KEYS: voucher hash, buyers hash.
pub(crate) static UNLOAD: LazyLock<Script> =
    LazyLock::new(|| Script::new(r"return redis.call('DEL', KEYS[1], KEYS[2])"));

/// The grab of a sale split over buckets, on the buyer's home bucket
/// ([`crate::domain::StockBuckets::home`]): as [`GRAB`] while the bucket has stock; once it
/// has none, the buyer's record is *claimed* for the order (recorded, counted in `sold`, and
/// listed among the bucket's claims with Redis's clock), and the caller borrows a unit from
/// the other buckets with [`BORROW`]. The record in the home bucket is what makes one order
/// per user hold across buckets: a second grab meets it whatever bucket the first one's unit
/// came from.
///
/// KEYS and ARGV: see [`BucketOrder::home`]. Answers as [`GRAB`] (without the pending record), plus
/// `{claimed, gen}`; a buyer whose record is still a claim is answered
/// `{already bought, order, gen, age of the claim in ms}`. Decoded by [`HomeAnswer`].
pub(crate) static GRAB_HOME: LazyLock<Script> = LazyLock::new(|| Script::new(&grab_home_lua()));

/// The text of [`GRAB_HOME`].
fn grab_home_lua() -> String {
    format!(
        r"{head}if prior then
  local claimed = redis.call('ZSCORE', KEYS[5], prior .. ':' .. ARGV[{a_user}])
  if claimed then return {{{already_bought}, prior, gen, now - tonumber(claimed)}} end
  return {{{already_bought}, prior, gen}}
end
if v[5] and tonumber(v[5]) > 0 and redis.call('EXISTS', KEYS[2]) == 0 then return {{{not_loaded}}} end
if tonumber(v[1]) <= 0 then
  redis.call('HINCRBY', KEYS[1], '{FIELD_SOLD}', 1)
  redis.call('HSET', KEYS[2], ARGV[{a_user}], ARGV[{a_order}])
  redis.call('ZADD', KEYS[5], now, ARGV[{a_order}] .. ':' .. ARGV[{a_user}])
  return {{{claimed}, gen}}
end
{take}{append}return {{{accepted}, gen}}
",
        head = grab_head(),
        take = take_lua(),
        append = append_lua(),
        accepted = GrabAnswer::ACCEPTED,
        already_bought = GrabAnswer::ALREADY_BOUGHT,
        not_loaded = GrabAnswer::NOT_LOADED,
        claimed = HomeAnswer::CLAIMED,
        a_user = GrabCall::USER,
        a_order = GrabCall::ORDER,
    )
}

/// The order a split sale's scripts decide on: [`GrabCall`]'s arguments at its places, without
/// the pending record (a split sale writes it ahead of the script).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BucketOrder<'a> {
    pub voucher: i64,
    pub user: i64,
    pub order: i64,
    pub deadline_ms: i64,
    pub trace: Option<&'a str>,
}

impl BucketOrder<'_> {
    /// The `EVALSHA` of [`GRAB_HOME`] on the home bucket's hash, buyers, its shard's order
    /// stream and pay deadlines, and its claims.
    pub(crate) fn home(&self, keys: [&str; 5]) -> Cmd {
        self.command(&GRAB_HOME, &keys)
    }

    /// The `EVALSHA` of [`BORROW`] on the lending bucket's hash, its loans, its shard's order
    /// stream and pay deadlines.
    pub(crate) fn borrow(&self, keys: [&str; 4]) -> Cmd {
        self.command(&BORROW, &keys)
    }

    fn command(&self, script: &Script, keys: &[&str]) -> Cmd {
        let mut cmd = evalsha(script, keys.len());
        cmd.arg(keys)
            .arg(self.voucher)
            .arg(self.user)
            .arg(self.order)
            .arg(self.deadline_ms);
        if let Some(trace) = self.trace {
            cmd.arg(trace);
        }
        cmd
    }
}

/// The answer of [`GRAB_HOME`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HomeAnswer {
    /// Decided in the home bucket, as [`GRAB`] decides (its answer is never "sold out": an empty
    /// home bucket claims instead).
    Decided(GrabAnswer),
    /// The home bucket is empty and the buyer's record is claimed for this order: borrow.
    Claimed { generation: u64 },
    /// The buyer's record is another grab's claim, `age_ms` old: that grab is borrowing, or its
    /// instance died while it was.
    ClaimedBefore {
        order: i64,
        generation: u64,
        age_ms: i64,
    },
}

impl HomeAnswer {
    /// `{5, gen}`.
    pub(crate) const CLAIMED: i64 = 5;

    pub(crate) fn from_reply(reply: &[i64]) -> Self {
        match reply {
            [Self::CLAIMED, generation] => Self::Claimed {
                generation: (*generation).max(0) as u64,
            },
            [GrabAnswer::ALREADY_BOUGHT, order, generation, age_ms] => Self::ClaimedBefore {
                order: *order,
                generation: (*generation).max(0) as u64,
                age_ms: *age_ms,
            },
            _ => Self::Decided(GrabAnswer::from_reply(reply)),
        }
    }

    /// The script wrote: a unit taken or a record claimed (either waits for the replicas).
    pub(crate) fn wrote(&self) -> bool {
        matches!(
            self,
            Self::Claimed { .. } | Self::Decided(GrabAnswer::Accepted { .. })
        )
    }
}

impl FromRedisValue for HomeAnswer {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let reply: Vec<i64> = FromRedisValue::from_redis_value(v)?;
        Ok(Self::from_reply(&reply))
    }
}

/// Lends a unit of another bucket to an order whose buyer record is claimed in its home
/// bucket: takes the unit, notes the order among the bucket's loans, appends the order to the
/// bucket's shard stream and its deadline to the shard's deadlines, in one step. An order the
/// bucket has a loan or a `void` mark for is refused ([`LENT_VOID`]: the claim was settled as
/// abandoned, see [`FENCE`]).
///
/// KEYS and ARGV: see [`BucketOrder::borrow`]. Answers `{lent, gen}`, `{empty, gen}`, `{fenced}` or
/// `{not loaded}`, decoded by [`BorrowAnswer`].
pub(crate) static BORROW: LazyLock<Script> = LazyLock::new(|| Script::new(&borrow_lua()));

/// The text of [`BORROW`].
fn borrow_lua() -> String {
    format!(
        r"
local v = redis.call('HMGET', KEYS[1], '{FIELD_STOCK}', '{FIELD_BEGIN}', '{FIELD_END}', '{FIELD_GENERATION}')
if not (v[1] and v[2] and v[3]) then return {{{not_loaded}}} end
if redis.call('HEXISTS', KEYS[2], ARGV[{a_order}]) == 1 then return {{{fenced}}} end
local gen = tonumber(v[4]) or 0
if tonumber(v[1]) <= 0 then return {{{empty}, gen}} end
redis.call('HINCRBY', KEYS[1], '{FIELD_STOCK}', -1)
redis.call('HSET', KEYS[2], ARGV[{a_order}], ARGV[{a_user}])
{append}return {{{lent}, gen}}
",
        append = append_lua(),
        lent = BorrowAnswer::LENT,
        empty = BorrowAnswer::EMPTY,
        fenced = BorrowAnswer::FENCED,
        not_loaded = GrabAnswer::NOT_LOADED,
        a_user = GrabCall::USER,
        a_order = GrabCall::ORDER,
    )
}

/// The answer of [`BORROW`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BorrowAnswer {
    Lent {
        generation: u64,
    },
    Empty {
        generation: u64,
    },
    /// The bucket will never lend to this order: its claim was settled as abandoned.
    Fenced,
    NotLoaded,
}

impl BorrowAnswer {
    /// `{0, gen}`.
    pub(crate) const LENT: i64 = 0;
    /// `{1, gen}`.
    pub(crate) const EMPTY: i64 = 1;
    /// `{6}`.
    pub(crate) const FENCED: i64 = 6;

    pub(crate) fn from_reply(reply: &[i64]) -> Self {
        let generation = reply.get(1).map_or(0, |g| (*g).max(0) as u64);
        match reply.first().copied() {
            Some(Self::LENT) => Self::Lent { generation },
            Some(Self::EMPTY) => Self::Empty { generation },
            Some(Self::FENCED) => Self::Fenced,
            _ => Self::NotLoaded,
        }
    }
}

impl FromRedisValue for BorrowAnswer {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let reply: Vec<i64> = FromRedisValue::from_redis_value(v)?;
        Ok(Self::from_reply(&reply))
    }
}

/// A claim's member in the home bucket's claims: `<order>:<user>`, so that settling it needs
/// no search of the buyers.
pub(crate) fn claim_member(order: i64, user: i64) -> String {
    format!("{order}:{user}")
}

/// The order and the user of a claim's member.
pub(crate) fn parse_claim_member(member: &str) -> Option<(i64, i64)> {
    let (order, user) = member.split_once(':')?;
    Some((order.parse().ok()?, user.parse().ok()?))
}

/// What a bucket's loans hash holds for an order it will never lend to.
pub(crate) const LENT_VOID: &str = "void";

/// Settles one bucket's part of an abandoned claim: marks the order [`LENT_VOID`] unless the
/// bucket lent it a unit already. Once every other bucket is marked, no [`BORROW`] can ever
/// take a unit for the order, and its claim can be dropped.
///
/// KEYS: the bucket's loans. ARGV: the order. Returns 1 if the bucket lent the order a unit.
pub(crate) static FENCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"
if redis.call('HSETNX', KEYS[1], ARGV[1], '{LENT_VOID}') == 1 then return 0 end
if redis.call('HGET', KEYS[1], ARGV[1]) == '{LENT_VOID}' then return 0 end
return 1
"
    ))
});

/// Drops a claimed buyer record: the order's claim, and the record itself if it still names
/// the order (a claim settled twice, or a record since replaced, is left alone).
///
/// KEYS: the home bucket's hash, buyers and claims. ARGV: the user, the order.
/// Returns 1 if the record was dropped.
pub(crate) static UNCLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"
redis.call('ZREM', KEYS[3], ARGV[2] .. ':' .. ARGV[1])
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('HEXISTS', KEYS[1], '{FIELD_SOLD}') == 1 then redis.call('HINCRBY', KEYS[1], '{FIELD_SOLD}', -1) end
return 1
"
    ))
});

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use redis::{Arg, Cmd};

    use super::*;
    use crate::domain::{UserId, VoucherId};

    /// The keys and the arguments of an `EVALSHA` (after the script's hash and the key count).
    fn keys_and_argv(cmd: &Cmd, script: &Script) -> (Vec<String>, Vec<String>) {
        let words: Vec<String> = cmd
            .args_iter()
            .map(|a| match a {
                Arg::Simple(bytes) => String::from_utf8(bytes.to_vec()).expect("text"),
                _ => panic!("only plain words in a script's command"),
            })
            .collect();
        assert_eq!(words[..2], ["EVALSHA", script.get_hash()]);
        let n: usize = words[2].parse().expect("the key count");
        (words[3..3 + n].to_vec(), words[3 + n..].to_vec())
    }

    /// `argv` holds each value at its place and nothing else, and the places are 1, 2, … with
    /// none used twice or skipped.
    fn assert_at_places(argv: &[String], expected: &[(usize, String)]) {
        let mut places: Vec<usize> = expected.iter().map(|(place, _)| *place).collect();
        places.sort_unstable();
        assert_eq!(
            places,
            (1..=expected.len()).collect::<Vec<_>>(),
            "each place in ARGV used once, from 1 without a gap"
        );
        assert_eq!(argv.len(), expected.len(), "one argument a place: {argv:?}");
        for (place, value) in expected {
            assert_eq!(&argv[place - 1], value, "ARGV[{place}]");
        }
    }

    /// The places a script's text reads as a number (`ARGV[3]`; a loop's `ARGV[i]` is not one).
    fn places_read(lua: &str) -> BTreeSet<usize> {
        let place = regex::Regex::new(r"ARGV\[(\d+)\]").expect("a valid pattern");
        place
            .captures_iter(lua)
            .map(|c| c[1].parse().expect("a number"))
            .collect()
    }

    fn places(expected: &[(usize, String)]) -> BTreeSet<usize> {
        expected.iter().map(|(place, _)| *place).collect()
    }

    /// The one-key layout's script is the one earlier versions ran, byte for byte (its SHA1 is
    /// what `EVALSHA` names): splitting a sale into buckets added scripts, it changed none.
    #[test]
    fn the_one_key_grab_is_unchanged() {
        assert_eq!(GRAB.get_hash(), "956a4ce26fbe988775314f403e3731ba94f26384");
    }

    #[test]
    fn a_grab_sends_each_argument_at_its_place() {
        let record = PendingRecord {
            user_id: UserId::new(12).unwrap(),
            voucher_id: VoucherId::new(11).unwrap(),
            failed: false,
        };
        let call = GrabCall {
            keys: ["voucher", "buyers", "stream", "deadlines"],
            voucher: 11,
            user: 12,
            order: 13,
            deadline_ms: 14,
            pending: Some(("pending", record)),
            trace: None,
        };
        let expected = [
            (GrabCall::VOUCHER, "11".to_owned()),
            (GrabCall::USER, "12".to_owned()),
            (GrabCall::ORDER, "13".to_owned()),
            (GrabCall::DEADLINE, "14".to_owned()),
            (GrabCall::PENDING_RECORD, "12:11".to_owned()),
            (
                GrabCall::PENDING_TTL,
                order_stream::PENDING_TTL.as_millis().to_string(),
            ),
        ];
        let (keys, argv) = keys_and_argv(&call.command(), &GRAB);
        assert_eq!(
            keys,
            ["voucher", "buyers", "stream", "deadlines", "pending"]
        );
        assert_at_places(&argv, &expected);
        assert_eq!(places_read(&grab_lua()), places(&expected));

        // Without the pending record its key and its two arguments, the last ones, are left out.
        let (keys, argv) = keys_and_argv(
            &GrabCall {
                pending: None,
                ..call
            }
            .command(),
            &GRAB,
        );
        assert_eq!(keys, ["voucher", "buyers", "stream", "deadlines"]);
        assert_at_places(&argv, &expected[..4]);

        // A trace is the last argument, after the record or in its place.
        let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        for (pending, before) in [(call.pending, 6), (None, 4)] {
            let traced = GrabCall {
                pending,
                trace: Some(trace),
                ..call
            };
            let (_, argv) = keys_and_argv(&traced.command(), &GRAB);
            let mut with_trace = expected[..before].to_vec();
            with_trace.push((before + 1, trace.to_owned()));
            assert_at_places(&argv, &with_trace);
        }
    }

    #[test]
    fn a_load_sends_each_argument_at_its_place() {
        let sale = Sale {
            stock: 21,
            begin_ms: 22,
            end_ms: 23,
            sold: 24,
            generation: 25,
        };
        let fixed = [
            (LoadCall::STOCK, "21".to_owned()),
            (LoadCall::BEGIN, "22".to_owned()),
            (LoadCall::END, "23".to_owned()),
            (LoadCall::SOLD, "24".to_owned()),
            (LoadCall::GENERATION, "25".to_owned()),
        ];
        let call = LoadCall {
            key: "voucher",
            sale: &sale,
            released: None,
        };
        let (keys, argv) = keys_and_argv(&call.command(), &LOAD);
        assert_eq!(keys, ["voucher"]);
        assert_at_places(&argv, &fixed);
        assert_eq!(places_read(&load_lua()), places(&fixed));

        // The closed orders follow the fixed arguments, from their first place on.
        let closed = [26, 27];
        let call = LoadCall {
            released: Some(("released", &closed)),
            ..call
        };
        let mut expected = fixed.to_vec();
        expected.push((LoadCall::CLOSED_FROM, "26".to_owned()));
        expected.push((LoadCall::CLOSED_FROM + 1, "27".to_owned()));
        let (keys, argv) = keys_and_argv(&call.command(), &LOAD);
        assert_eq!(keys, ["voucher", "released"]);
        assert_at_places(&argv, &expected);
    }

    #[test]
    fn the_other_scripts_send_each_argument_at_its_place() {
        let release = ReleaseCall {
            hash: "voucher",
            released: "released",
            orders: &[31, 32],
        };
        let (keys, argv) = keys_and_argv(&release.command(), &RELEASE);
        assert_eq!(keys, ["voucher", "released"]);
        assert_at_places(
            &argv,
            &[
                (ReleaseCall::ORDERS_FROM, "31".to_owned()),
                (ReleaseCall::ORDERS_FROM + 1, "32".to_owned()),
            ],
        );
        assert!(places_read(&release_lua()).is_empty());

        let raise = RaiseGenerationCall {
            hash: "voucher",
            generation: 41,
        };
        let expected = [(RaiseGenerationCall::GENERATION, "41".to_owned())];
        let (keys, argv) = keys_and_argv(&raise.command(), &RAISE_GENERATION);
        assert_eq!(keys, ["voucher"]);
        assert_at_places(&argv, &expected);
        assert_eq!(places_read(&raise_generation_lua()), places(&expected));

        let mark = MarkMissingCall {
            hash: "voucher",
            ttl_ms: 51,
        };
        let expected = [(MarkMissingCall::TTL, "51".to_owned())];
        let (keys, argv) = keys_and_argv(&mark.command(), &MARK_MISSING);
        assert_eq!(keys, ["voucher"]);
        assert_at_places(&argv, &expected);
        assert_eq!(places_read(&mark_missing_lua()), places(&expected));
    }

    #[test]
    fn the_bucket_scripts_send_the_grabs_arguments_at_its_places() {
        let expected = [
            (GrabCall::VOUCHER, "11".to_owned()),
            (GrabCall::USER, "12".to_owned()),
            (GrabCall::ORDER, "13".to_owned()),
            (GrabCall::DEADLINE, "14".to_owned()),
        ];
        let order = BucketOrder {
            voucher: 11,
            user: 12,
            order: 13,
            deadline_ms: 14,
            trace: None,
        };
        let home = order.home(["voucher", "buyers", "stream", "deadlines", "claims"]);
        let (keys, argv) = keys_and_argv(&home, &GRAB_HOME);
        assert_eq!(keys, ["voucher", "buyers", "stream", "deadlines", "claims"]);
        assert_at_places(&argv, &expected);
        assert_eq!(places_read(&grab_home_lua()), places(&expected));
        let traced = BucketOrder {
            trace: Some("trace"),
            ..order
        };
        let borrow = traced.borrow(["voucher", "lent", "stream", "deadlines"]);
        let (keys, argv) = keys_and_argv(&borrow, &BORROW);
        assert_eq!(keys, ["voucher", "lent", "stream", "deadlines"]);
        let mut with_trace = expected.to_vec();
        with_trace.push((5, "trace".to_owned()));
        assert_at_places(&argv, &with_trace);
        assert_eq!(places_read(&borrow_lua()), places(&expected));
    }

    #[test]
    fn every_bucket_answer_decodes() {
        assert_eq!(
            HomeAnswer::from_reply(&[HomeAnswer::CLAIMED, 7]),
            HomeAnswer::Claimed { generation: 7 }
        );
        assert_eq!(
            HomeAnswer::from_reply(&[GrabAnswer::ALREADY_BOUGHT, 42, 7, 900]),
            HomeAnswer::ClaimedBefore {
                order: 42,
                generation: 7,
                age_ms: 900
            }
        );
        assert_eq!(
            HomeAnswer::from_reply(&[GrabAnswer::ALREADY_BOUGHT, 42, 7]),
            HomeAnswer::Decided(GrabAnswer::AlreadyBought {
                order: Some(42),
                generation: 7
            })
        );
        assert!(HomeAnswer::from_reply(&[GrabAnswer::ACCEPTED, 7]).wrote());
        assert!(!HomeAnswer::from_reply(&[GrabAnswer::ENDED]).wrote());
        assert_eq!(
            BorrowAnswer::from_reply(&[BorrowAnswer::LENT, 3]),
            BorrowAnswer::Lent { generation: 3 }
        );
        assert_eq!(
            BorrowAnswer::from_reply(&[BorrowAnswer::EMPTY, 3]),
            BorrowAnswer::Empty { generation: 3 }
        );
        assert_eq!(
            BorrowAnswer::from_reply(&[BorrowAnswer::FENCED]),
            BorrowAnswer::Fenced
        );
        assert_eq!(BorrowAnswer::from_reply(&[-1]), BorrowAnswer::NotLoaded);
        assert_eq!(parse_claim_member(&claim_member(13, 12)), Some((13, 12)));
        assert_eq!(parse_claim_member("13"), None);
    }

    #[test]
    fn every_grab_answer_decodes() {
        let decode = GrabAnswer::from_reply;
        assert_eq!(
            decode(&[GrabAnswer::ACCEPTED, 7]),
            GrabAnswer::Accepted {
                generation: 7,
                id_in_use: false
            }
        );
        assert_eq!(
            decode(&[GrabAnswer::ACCEPTED, 7, 1]),
            GrabAnswer::Accepted {
                generation: 7,
                id_in_use: true
            }
        );
        assert_eq!(
            decode(&[GrabAnswer::SOLD_OUT, 7]),
            GrabAnswer::SoldOut { generation: 7 }
        );
        assert_eq!(
            decode(&[GrabAnswer::ALREADY_BOUGHT, 42, 7]),
            GrabAnswer::AlreadyBought {
                order: Some(42),
                generation: 7
            }
        );
        assert_eq!(decode(&[GrabAnswer::NOT_STARTED]), GrabAnswer::NotStarted);
        assert_eq!(decode(&[GrabAnswer::ENDED]), GrabAnswer::Ended);
        assert_eq!(decode(&[GrabAnswer::NOT_LOADED]), GrabAnswer::NotLoaded);
        assert_eq!(
            decode(&[GrabAnswer::NO_SUCH_VOUCHER]),
            GrabAnswer::NoSuchVoucher
        );
        // A hash loaded before generations existed answers without one.
        assert_eq!(
            decode(&[GrabAnswer::SOLD_OUT]),
            GrabAnswer::SoldOut { generation: 0 }
        );
        // Nothing, or a code this version does not know: warm and ask again.
        assert_eq!(decode(&[]), GrabAnswer::NotLoaded);
        assert_eq!(decode(&[99]), GrabAnswer::NotLoaded);
    }
}
