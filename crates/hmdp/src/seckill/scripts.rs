//! The flash sale's Lua scripts. Each gets every key it touches in `KEYS` (one shard's hash
//! tag), is created once and invoked with `EVALSHA` (reloaded by redis-rs on `NOSCRIPT`).

use std::sync::LazyLock;

use redis::Script;

/// Decides one order.
///
/// KEYS: voucher hash (`stock`, `begin`, `end` in ms, or `missing`), buyer set, order stream.
/// ARGV: voucher id, user id, order id.
/// Returns 0 accepted (stock taken, buyer recorded, order appended to the stream), 1 sold out,
/// 2 already bought, 3 not started, 4 ended, -1 not loaded, -2 no such voucher.
pub static GRAB: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = redis.call('HMGET', KEYS[1], 'stock', 'begin', 'end', 'missing')
if not v[1] then
  if v[4] then return -2 end
  return -1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now < tonumber(v[2]) then return 3 end
if now > tonumber(v[3]) then return 4 end
if tonumber(v[1]) <= 0 then return 1 end
if redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 1 then return 2 end
redis.call('HINCRBY', KEYS[1], 'stock', -1)
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('XADD', KEYS[3], '*', 'id', ARGV[3], 'userId', ARGV[2], 'voucherId', ARGV[1])
return 0
",
    )
});

/// Loads a voucher's sale fields unless it is already loaded (a `missing` marker is replaced).
///
/// KEYS: voucher hash. ARGV: stock, begin ms, end ms. Returns 1 if written, 0 if it was there.
pub static LOAD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('HEXISTS', KEYS[1], 'stock') == 1 then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'stock', ARGV[1], 'begin', ARGV[2], 'end', ARGV[3])
return 1
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
