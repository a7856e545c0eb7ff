-- wrk: every request carries the session token of a random logged-in user, as the original
-- pages send `authorization` on every call. TOKENS: a file with one token per line (from
-- `hmdp-bench tokens`); METHOD: GET (default) or POST.
local tokens = {}
for line in io.lines(os.getenv("TOKENS")) do
  if #line > 0 then tokens[#tokens + 1] = line end
end
local method = os.getenv("METHOD") or "GET"
math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))

request = function()
  return wrk.format(method, nil, { ["authorization"] = tokens[math.random(#tokens)] })
end
