//! The social half's Lua scripts. Each touches exactly one key (`KEYS[1]`), so each is legal
//! on a Redis Cluster; each is created once and invoked with `EVALSHA` (reloaded by redis-rs on
//! `NOSCRIPT`).

use std::sync::LazyLock;

use redis::Script;

/// Toggles one user's like of a loaded note set: the check and the change in one step, so two
/// racing clicks of one user are one like and one unlike, never two likes. A set without the
/// marker member (lost, evicted, never built) is left alone for a rebuild.
///
/// KEYS: `blog:liked:{id}`. ARGV: the marker, user id, now (ms, the like's score).
/// Returns `{1, likers}` when the user now likes the note, `{0, likers}` when they no longer
/// do (`likers`: the set's size after the change, without the marker), `{-1, 0}` when the set
/// is not loaded.
pub(super) static TOGGLE_LIKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {-1, 0} end
if redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[2])
  return {0, redis.call('ZCARD', KEYS[1]) - 1}
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[2])
return {1, redis.call('ZCARD', KEYS[1]) - 1}
",
    )
});

/// Loads a note's set that is not loaded: adds the given likes (read from the database) and
/// the marker (score 0, before every like), keeping what the set already held. A loaded set is
/// kept as it is (someone else rebuilt it first).
///
/// KEYS: `blog:liked:{id}`. ARGV: the marker, then pairs of (ms, user id).
/// Returns nil if the set was loaded already, else what it held before, as a flat list of
/// member and score (likes Redis knew of and the database did not).
pub(super) static REBUILD_LIKES: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return false end
local before = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
redis.call('ZADD', KEYS[1], 0, ARGV[1])
local n = #ARGV
local i = 2
while i <= n do
  local j = math.min(i + 999, n)
  redis.call('ZADD', KEYS[1], 'NX', unpack(ARGV, i, j))
  i = j + 1
end
return before
",
    )
});

/// Applies one follow or unfollow to a loaded `follows:{userId}` set; a set that is not loaded
/// (no marker member: lost, evicted, or never built) is left alone for the next rebuild, which
/// reads the database and so includes this change.
///
/// KEYS: `follows:{userId}`. ARGV: the marker, the followed user's id, `1` follow / `0` unfollow.
/// Returns 1 if applied, 0 if the set is not loaded.
pub(super) static APPLY_FOLLOW: LazyLock<Script> = LazyLock::new(|| {
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
pub(super) static REBUILD_FOLLOWS: LazyLock<Script> = LazyLock::new(|| {
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

/// Counts one comment of a user's day unless the day's cap is reached: the check and the count
/// in one step, so racing posts never pass the cap.
///
/// KEYS: `comment:quota:{userId}:{day}`. ARGV: comments a day, the key's lifetime (s).
/// Returns 1 when counted, 0 when the day is spent.
pub(super) static CHARGE_COMMENT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if tonumber(redis.call('GET', KEYS[1]) or '0') >= tonumber(ARGV[1]) then return 0 end
redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
",
    )
});

/// Gives back a counted comment that was not written after all; a day's record that is gone
/// is left gone (never recreated without its lifetime).
///
/// KEYS: `comment:quota:{userId}:{day}`.
pub(super) static REFUND_COMMENT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then redis.call('DECR', KEYS[1]) end
return 1
",
    )
});
