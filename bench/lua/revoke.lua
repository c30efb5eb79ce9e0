-- POST /v1/messages/{id}/revoke with the app key (no operator: the app revokes, revoke_status 2), each request a
-- different message: thread i of T takes ids i, i+T, i+2T … of the file $IDS (one message_id per line). Run it without
-- wrk's warm-up (bench/lib.sh NO_WARMUP=1): a second run would revoke the same ids again (409).
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
  n = 0
end
function request()
  local i = id + n * step
  n = n + 1
  local mid = ids[((i - 1) % #ids) + 1]
  return wrk.format("POST", "/v1/messages/" .. mid .. "/revoke", headers, "{}")
end
