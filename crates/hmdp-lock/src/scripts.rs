//! The Lua scripts. Each is created once and invoked with
//! [`redis::Script::invoke_async`], which sends `EVALSHA` and falls back to
//! loading the script on `NOSCRIPT`. Every key a script touches is passed in
//! `KEYS`; the unlock channel is passed in `KEYS` too (it shares the lock's
//! hash tag, so cluster routing stays on one slot).
//!
//! Acquire scripts return `{1, hold_count, fence}` on success (`fence` is 0
//! when fencing is off) and `{0, pttl, 0}` when someone else holds the lock.
//! Release scripts return -1 (not our lock), 0 (released, channel notified)
//! or the remaining hold count. Renew/extend scripts return 1 or 0.

use std::sync::LazyLock;

use redis::Script;

/// KEYS: lock, fence. ARGV: token, lease ms, fencing flag ("1"/"0").
pub(crate) static SIMPLE_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = 0
  if ARGV[3] == '1' then fence = redis.call('incr', KEYS[2]) end
  return {1, 1, fence}
end
return {0, redis.call('pttl', KEYS[1]), 0}
",
    )
});

/// KEYS: lock, channel. ARGV: token.
pub(crate) static SIMPLE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], '0')
  return 0
end
return -1
",
    )
});

/// KEYS: lock. ARGV: token, lease ms.
pub(crate) static SIMPLE_EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
",
    )
});

/// KEYS: lock, fence. ARGV: owner field, lease ms, fencing flag.
pub(crate) static REENTRANT_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  local n = redis.call('hincrby', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  local fence = 0
  if n == 1 and ARGV[3] == '1' then fence = redis.call('incr', KEYS[2]) end
  return {1, n, fence}
end
return {0, redis.call('pttl', KEYS[1]), 0}
",
    )
});

/// Re-entry by an existing owner only. KEYS: lock. ARGV: owner field, lease ms.
/// Returns the new hold count, or 0 if the field is gone (the lock was lost).
pub(crate) static REENTRANT_REENTER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  local n = redis.call('hincrby', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return n
end
return 0
",
    )
});

/// KEYS: lock, channel. ARGV: owner field, lease ms.
pub(crate) static REENTRANT_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local n = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if n > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return n
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
return 0
",
    )
});

/// KEYS: lock. ARGV: owner field, lease ms.
pub(crate) static REENTRANT_EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
",
    )
});

/// Unconditional release. KEYS: lock, channel.
pub(crate) static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('del', KEYS[1]) == 1 then
  redis.call('publish', KEYS[2], '0')
  return 1
end
return 0
",
    )
});
