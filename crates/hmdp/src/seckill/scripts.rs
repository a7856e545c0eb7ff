//! The flash sale's Lua scripts. Each gets every key it touches in `KEYS` (one shard's hash
//! tag), is created once and invoked with `EVALSHA` (reloaded by redis-rs on `NOSCRIPT`).
//!
//! The voucher hash holds `stock`, `begin`, `end` (ms), `sold` (orders accepted since it
//! was loaded, counted for the buyer-set guard below) and `gen` (the load's generation, see
//! [`NEXT_GENERATION`]), or only `missing` for "no such voucher".

use std::sync::LazyLock;

use redis::Script;

use crate::order_stream;

/// Decides one order.
///
/// KEYS: voucher hash, buyers hash (user id → order id), order stream.
/// ARGV: voucher id, user id, order id.
/// Returns `{0, gen}`, `{1, gen}`, `{2, order id, gen}` or `{code}`: 0 accepted (stock taken,
/// buyer recorded with the order, order appended to the stream with the [`order_stream`]
/// fields), 1 sold out, 2 already bought (with the buyer's order), 3 not started, 4 ended, -1
/// not loaded, -2 no such voucher. `gen` is the hash's load generation (0 for a hash loaded
/// before generations existed): the answer is remembered only under it (`super::memory`).
/// The order id goes back as Redis stored it (a string): a Lua number would round it.
///
/// "Not loaded" (the caller warms the voucher and retries) also covers a hash missing any of
/// `stock`, `begin`, `end` (no `tonumber(nil)`), and a buyer set that vanished while the hash
/// stayed (`sold > 0`, hash gone: evicted or deleted) — without the guard a buyer whose record
/// was lost could buy a second time.
pub static GRAB: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"
local v = redis.call('HMGET', KEYS[1], 'stock', 'begin', 'end', 'missing', 'sold', 'gen')
if not (v[1] and v[2] and v[3]) then
  if v[4] and not v[1] then return {{-2}} end
  return {{-1}}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now < tonumber(v[2]) then return {{3}} end
if now > tonumber(v[3]) then return {{4}} end
local gen = tonumber(v[6]) or 0
if tonumber(v[1]) <= 0 then return {{1, gen}} end
local prior = redis.call('HGET', KEYS[2], ARGV[2])
if prior then return {{2, prior, gen}} end
if v[5] and tonumber(v[5]) > 0 and redis.call('EXISTS', KEYS[2]) == 0 then return {{-1}} end
redis.call('HINCRBY', KEYS[1], 'stock', -1)
redis.call('HINCRBY', KEYS[1], 'sold', 1)
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('XADD', KEYS[3], '*', '{order}', ARGV[3], '{user}', ARGV[2], '{voucher}', ARGV[1])
return {{0, gen}}
",
        order = order_stream::FIELD_ORDER_ID,
        user = order_stream::FIELD_USER_ID,
        voucher = order_stream::FIELD_VOUCHER_ID,
    ))
});

/// Loads a voucher's sale fields unless it is already (completely) loaded; a `missing` marker
/// or a partial hash is replaced.
///
/// KEYS: voucher hash. ARGV: stock, begin ms, end ms, sold (buyers recorded in the buyers hash),
/// generation (announced to every instance before: `Seckill::announce_load`).
/// Returns 1 if written, 0 if it was there.
pub static LOAD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = redis.call('HMGET', KEYS[1], 'stock', 'begin', 'end')
if v[1] and v[2] and v[3] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'stock', ARGV[1], 'begin', ARGV[2], 'end', ARGV[3], 'sold', ARGV[4],
  'gen', ARGV[5])
return 1
",
    )
});

/// The next load generation of a voucher: above every earlier one, and at least Redis's clock
/// in ms, so that a lost counter key starts above the generations instances still remember.
///
/// KEYS: the voucher's generation key. Returns the new generation.
pub static NEXT_GENERATION: LazyLock<Script> = LazyLock::new(|| {
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
/// KEYS: voucher hash, buyers hash. Returns 1 loaded; 0 not loaded (nothing, or a `missing`
/// marker); -1 it was unusable and has been dropped, so it must be loaded again: a partial
/// hash (a field missing), or `sold > 0` with the buyers hash gone. Dropping it makes the
/// voucher "not loaded" for [`GRAB`], so no order is accepted until the warm-up has rebuilt
/// stock and buyers from the database and the stream.
pub static CHECK_LOADED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = redis.call('HMGET', KEYS[1], 'stock', 'begin', 'end', 'sold')
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
    )
});

/// Remembers for a while that a voucher id is not a flash-sale voucher, unless it got loaded.
///
/// KEYS: voucher hash. ARGV: TTL in ms. Returns 1 if marked.
pub static MARK_MISSING: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('HEXISTS', KEYS[1], 'stock') == 1 then return 0 end
redis.call('HSET', KEYS[1], 'missing', '1')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
",
    )
});

/// `hmdp reconcile`'s view of a sale in Redis: both hashes read at one instant.
///
/// KEYS: voucher hash, buyers hash. Returns `{voucher fields, buyers}` (`HGETALL` each).
pub static READ_SALE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(r"return {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}")
});

/// Drops a sale from Redis so that the next warm-up rebuilds it from the database and the
/// streams (`hmdp reconcile --repair`, under the warm-up lock). Grabs meanwhile see "not
/// loaded" and wait for that warm-up.
///
/// KEYS: voucher hash, buyers hash.
pub static UNLOAD: LazyLock<Script> =
    LazyLock::new(|| Script::new(r"return redis.call('DEL', KEYS[1], KEYS[2])"));
