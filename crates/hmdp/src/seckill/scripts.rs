//! The flash sale's Lua scripts. Each gets every key it touches in `KEYS` (one shard's hash
//! tag), is created once and invoked with `EVALSHA` (reloaded by redis-rs on `NOSCRIPT`).
//!
//! The voucher hash's field names come from [`super::voucher_hash`], the order stream's entry fields
//! from [`order_stream`], both formatted into the scripts' text once; the grab script's answer
//! codes are declared on [`GrabAnswer`], which decodes that answer for every caller.

use std::sync::LazyLock;

use redis::{
    Cmd, ErrorKind, FromRedisValue, ParsingError, RedisResult, Script, ServerErrorKind, Value,
    aio::ConnectionLike,
};

use super::voucher_hash::{
    FIELD_BEGIN, FIELD_END, FIELD_GENERATION, FIELD_MISSING, FIELD_SOLD, FIELD_STOCK,
};
use crate::order_stream;

/// Decides one order.
///
/// KEYS: voucher hash, buyers hash (user id → order id), order stream, the shard's pay
/// deadlines (sorted set), and optionally the order's pending record
/// (`seckill:pending:<order id>`; never on a cluster, where it is in another slot).
/// ARGV: voucher id, user id, order id, the order's pay deadline in ms, then with the pending
/// record its value and lifetime in ms.
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
pub static GRAB: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
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
local prior = redis.call('HGET', KEYS[2], ARGV[2])
if prior then return {{{already_bought}, prior, gen}} end
if tonumber(v[1]) <= 0 then return {{{sold_out}, gen}} end
if v[5] and tonumber(v[5]) > 0 and redis.call('EXISTS', KEYS[2]) == 0 then return {{{not_loaded}}} end
redis.call('HINCRBY', KEYS[1], '{FIELD_STOCK}', -1)
redis.call('HINCRBY', KEYS[1], '{FIELD_SOLD}', 1)
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('XADD', KEYS[3], '*', '{order}', ARGV[3], '{user}', ARGV[2], '{voucher}', ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[3])
if KEYS[5] and not redis.call('SET', KEYS[5], ARGV[5], 'PX', ARGV[6], 'NX') then
  return {{{accepted}, gen, 1}}
end
return {{{accepted}, gen}}
",
        accepted = GrabAnswer::ACCEPTED,
        sold_out = GrabAnswer::SOLD_OUT,
        already_bought = GrabAnswer::ALREADY_BOUGHT,
        not_started = GrabAnswer::NOT_STARTED,
        ended = GrabAnswer::ENDED,
        not_loaded = GrabAnswer::NOT_LOADED,
        no_such_voucher = GrabAnswer::NO_SUCH_VOUCHER,
        order = order_stream::FIELD_ORDER_ID,
        user = order_stream::FIELD_USER_ID,
        voucher = order_stream::FIELD_VOUCHER_ID,
    ))
});

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
/// KEYS: voucher hash, and optionally the voucher's released set. ARGV: stock, begin ms, end ms,
/// sold (buyers recorded in the buyers hash), generation (announced to every instance before:
/// `Seckill::announce_load`), then the closed orders the stock counts as returned.
/// Returns 1 if written, 0 if it was there.
///
/// With the released set: an order in it but not among the closed orders given was closed
/// after the database snapshot the stock comes from (its [`RELEASE`] found no hash to give the
/// unit to), so the stock written is one higher for each; the closed orders given join the set,
/// so a [`RELEASE`] of one of them, late, gives nothing twice.
pub(crate) static LOAD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"
local v = redis.call('HMGET', KEYS[1], '{FIELD_STOCK}', '{FIELD_BEGIN}', '{FIELD_END}')
if v[1] and v[2] and v[3] then return 0 end
local stock = tonumber(ARGV[1])
if KEYS[2] then
  local counted = {{}}
  for i = 6, #ARGV do counted[ARGV[i]] = true end
  for _, o in ipairs(redis.call('SMEMBERS', KEYS[2])) do
    if not counted[o] then stock = stock + 1 end
  end
  for i = 6, #ARGV, 500 do
    redis.call('SADD', KEYS[2], unpack(ARGV, i, math.min(i + 499, #ARGV)))
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], '{FIELD_STOCK}', stock, '{FIELD_BEGIN}', ARGV[2], '{FIELD_END}', ARGV[3], '{FIELD_SOLD}', ARGV[4],
  '{FIELD_GENERATION}', ARGV[5])
return 1
",
    ))
});

/// Gives the units of closed orders back to a sale, once each: an order already in the
/// released set (given back before, or counted by the load that wrote the hash) gives nothing.
/// Without a loaded hash the orders only join the set; the next [`LOAD`] counts them.
///
/// KEYS: voucher hash, released set. ARGV: order ids.
/// Returns `{units given back now, the stock before (-1: not loaded)}`.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"
local added = 0
for i = 1, #ARGV do added = added + redis.call('SADD', KEYS[2], ARGV[i]) end
local stock = redis.call('HGET', KEYS[1], '{FIELD_STOCK}')
if not stock then return {{added, -1}} end
if added > 0 then redis.call('HINCRBY', KEYS[1], '{FIELD_STOCK}', added) end
return {{added, tonumber(stock)}}
",
    ))
});

/// Raises a loaded sale's generation to ARGV[1] (never lowers it): after units came back to a
/// sale that was sold out, answers remembered from before are ignored and new ones honoured.
///
/// KEYS: voucher hash.
pub(crate) static RAISE_GENERATION: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"
if redis.call('HEXISTS', KEYS[1], '{FIELD_STOCK}') == 0 then return 0 end
local g = tonumber(redis.call('HGET', KEYS[1], '{FIELD_GENERATION}')) or 0
if tonumber(ARGV[1]) > g then redis.call('HSET', KEYS[1], '{FIELD_GENERATION}', ARGV[1]) end
return 1
",
    ))
});

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
/// KEYS: voucher hash. ARGV: TTL in ms. Returns 1 if marked.
pub(crate) static MARK_MISSING: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"
if redis.call('HEXISTS', KEYS[1], '{FIELD_STOCK}') == 1 then return 0 end
redis.call('HSET', KEYS[1], '{FIELD_MISSING}', '1')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
",
    ))
});

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

#[cfg(test)]
mod tests {
    use super::GrabAnswer;

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
