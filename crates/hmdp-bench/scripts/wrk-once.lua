-- wrk: every request carries a different logged-in user's token, each token once, so that every
-- grab is a purchase while the stock lasts. TOKENS: a file with one token per line; THREADS:
-- wrk's -t (default 2). Thread i sends tokens i, i + THREADS, ... and stops after its share has
-- been answered; requests already in flight then repeat a token (refused as duplicates).
local next_id, threads = 1, {}
function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  threads[#threads + 1] = thread
end

function init(args)
  local threads = tonumber(os.getenv("THREADS") or "2")
  mine, sent, answered, accepted = {}, 0, 0, 0
  local n = 0
  for line in io.lines(os.getenv("TOKENS")) do
    if #line > 0 then
      n = n + 1
      if (n - 1) % threads == id - 1 then mine[#mine + 1] = line end
    end
  end
end

request = function()
  sent = sent + 1
  local token = mine[(sent - 1) % #mine + 1]
  return wrk.format("POST", nil, { ["authorization"] = token })
end

response = function(status, headers, body)
  answered = answered + 1
  if body:find('"success":true', 1, true) then accepted = accepted + 1 end
  if answered >= #mine then wrk.thread:stop() end
end

function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do total = total + thread:get("accepted") end
  io.write(string.format("accepted %d\n", total))
end
