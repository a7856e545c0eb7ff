-- wrk: every request carries a different logged-in user's token, each token once, so that every
-- grab is a purchase while the stock lasts. TOKENS: a file with one token per line; THREADS:
-- wrk's -t (default 2). Thread i sends tokens i, i + THREADS, ... and stops once its share has
-- been answered; until then, a connection with no user left asks for a path that is not a grab
-- (a 404, not counted).
-- wrk's own Requests/sec divides by the whole -d even when every thread stopped early, so each
-- thread takes the monotonic clock (LuaJIT's FFI) at its first request and at each grab's
-- answer, and `done` prints the rate over that span:
-- "once: answered N accepted N seconds S req/s R".
local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } wrk_once_timespec;
int clock_gettime(int clock, wrk_once_timespec *now);
]]
local timespec = ffi.new("wrk_once_timespec")
local function now()
  ffi.C.clock_gettime(1, timespec) -- CLOCK_MONOTONIC
  return tonumber(timespec.tv_sec) + tonumber(timespec.tv_nsec) / 1e9
end

local next_id, threads = 1, {}
function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  threads[#threads + 1] = thread
end

function init(args)
  local count = tonumber(os.getenv("THREADS") or "2")
  mine, sent, answered, accepted = {}, 0, 0, 0
  local n = 0
  for line in io.lines(os.getenv("TOKENS")) do
    if #line > 0 then
      n = n + 1
      if (n - 1) % count == id - 1 then mine[#mine + 1] = line end
    end
  end
end

request = function()
  -- wrk calls the first thread's `request` once before the run, to check what it returns.
  if id == 1 and not checked then
    checked = true
    return wrk.format("GET", "/no-such-route")
  end
  if sent == 0 then started = now() end
  sent = sent + 1
  if sent > #mine then return wrk.format("GET", "/no-such-route") end
  return wrk.format("POST", nil, { ["authorization"] = mine[sent] })
end

response = function(status, headers, body)
  if status == 404 then return end
  answered = answered + 1
  finished = now()
  if body:find('"success":true', 1, true) then accepted = accepted + 1 end
  if answered >= #mine then wrk.thread:stop() end
end

function done(summary, latency, requests)
  local total, ok, first, last = 0, 0, math.huge, 0
  for _, thread in ipairs(threads) do
    total = total + thread:get("answered")
    ok = ok + thread:get("accepted")
    first = math.min(first, thread:get("started") or math.huge)
    last = math.max(last, thread:get("finished") or 0)
  end
  io.write(string.format("once: answered %d accepted %d seconds %.3f req/s %.2f\n",
    total, ok, last - first, total / (last - first)))
end
