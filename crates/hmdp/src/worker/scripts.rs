//! The worker's Lua scripts (keys in `KEYS`, so they run on a cluster).

use std::sync::LazyLock;

use redis::Script;

/// Records one failed write of an entry; returns `{first failure ms, failures, now ms}`.
///
/// KEYS: the shard's failure hash (field: entry id, value: `first-ms:count`). ARGV: entry id.
/// Redis's clock, so every worker measures "failing since" alike.
pub(super) static RECORD_FAILURE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local first, n = now, 0
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then
  local a, b = string.match(v, '^(%d+):(%d+)$')
  if a then first = tonumber(a); n = tonumber(b) end
end
n = n + 1
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d:%d', first, n))
return {first, n, now}
",
    )
});

/// Removes the group's consumers that have no pending entries and have been idle at least
/// ARGV[2] ms, except ARGV[3] (the caller). Atomic, so a consumer cannot get entries between
/// the check and the removal (removing a consumer drops its pending entries).
///
/// KEYS: stream. ARGV: group, idle ms, caller. Returns the names removed.
pub(super) static DROP_IDLE_CONSUMERS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local removed = {}
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] ~= ARGV[3] and tonumber(f['pending']) == 0
      and tonumber(f['idle']) >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    table.insert(removed, f['name'])
  end
end
return removed
",
    )
});
