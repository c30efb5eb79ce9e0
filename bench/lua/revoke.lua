-- POST /v1/messages/{id}/revoke with the app key (no operator: the app revokes, revoke_status 2), each request a
-- different message: thread i of T takes ids i, i+T, i+2T … of the file $IDS (one message_id per line).
local key = os.getenv("PARLEY_KEY")
local file = os.getenv("IDS")
local headers = { ["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json" }
local counter = 1
local threads = {}
function setup(thread)
  thread:set("id", counter)
  table.insert(threads, thread)
  counter = counter + 1
end
function init(args)
  ids = {}
  for line in io.lines(file) do ids[#ids + 1] = line end
  step = tonumber(os.getenv("WRK_THREADS") or "2")
  -- Each wrk run (the warm-up, then the measured one) starts at its own random place, so it seldom meets ids another
  -- run revoked (those answer 409, counted as non-2xx).
  math.randomseed(os.time() * 7919 + id)
  n = math.random(0, math.floor(#ids / step))
end
function request()
  local i = id + n * step
  n = n + 1
  local mid = ids[((i - 1) % #ids) + 1]
  return wrk.format("POST", "/v1/messages/" .. mid .. "/revoke", headers, "{}")
end
