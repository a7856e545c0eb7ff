//! The social half's Lua scripts. Each touches exactly one key (`KEYS[1]`), so each is legal
//! on a Redis Cluster; each is created once and invoked with `EVALSHA` (reloaded by redis-rs on
//! `NOSCRIPT`).

use std::sync::LazyLock;

use redis::Script;

/// Toggles one user's like of a note: the check and the change in one step, so two racing
/// clicks of one user are one like and one unlike, never two likes.
///
/// KEYS: `blog:liked:{id}`. ARGV: user id, now (ms, the like's score).
/// Returns `{1, size}` when the user now likes the note, `{0, size}` when they no longer do;
/// `size` is the set's size after the change.
pub static TOGGLE_LIKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return {0, redis.call('ZCARD', KEYS[1])}
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return {1, redis.call('ZCARD', KEYS[1])}
",
    )
});

/// Applies one follow or unfollow to a loaded `follows:{userId}` set; a set that is not loaded
/// (no marker member: lost, evicted, or never built) is left alone for the next rebuild, which
/// reads the database and so includes this change.
///
/// KEYS: `follows:{userId}`. ARGV: the marker, the followed user's id, `1` follow / `0` unfollow.
/// Returns 1 if applied, 0 if the set is not loaded.
pub static APPLY_FOLLOW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
if ARGV[3] == '1' then
  redis.call('SADD', KEYS[1], ARGV[2])
else
  redis.call('SREM', KEYS[1], ARGV[2])
end
return 1
",
    )
});

/// Replaces a `follows:{userId}` set that is not loaded with the marker and the given ids
/// (read from `tb_follow`); a loaded set is kept (someone else rebuilt it first).
///
/// KEYS: `follows:{userId}`. ARGV: the marker, then the followed users' ids.
/// Returns 1 if rebuilt, 0 if it was loaded already.
pub static REBUILD_FOLLOWS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 0 end
redis.call('DEL', KEYS[1])
local n = #ARGV
local i = 1
while i <= n do
  local j = math.min(i + 999, n)
  redis.call('SADD', KEYS[1], unpack(ARGV, i, j))
  i = j + 1
end
return 1
",
    )
});
