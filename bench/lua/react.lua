-- POST /v1/messages/$MESSAGE/reactions on one hot group message: every request adds a new (user, type) pair, so none
-- is refused: thread i of T takes pairs k = i, i+T, i+2T …, user u(2 + k mod $USERS), type "r" .. (k div $USERS) (at most
-- 50 types per message). Run it without wrk's warm-up (bench/lib.sh NO_WARMUP=1): a second run would add the same pairs (409).
local key = os.getenv("PARLEY_KEY")
local message = os.getenv("MESSAGE")
local users = tonumber(os.getenv("USERS") or "1999")
local headers = { ["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json" }
local counter = 1
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end
function init(args)
  n = 0
  step = tonumber(os.getenv("WRK_THREADS") or "2")
end
function request()
  local k = id - 1 + n * step
  n = n + 1
  local body = string.format('{"user_id":"u%d","reaction_type":"r%d"}', 2 + k % users, math.floor(k / users) % 50)
  return wrk.format("POST", "/v1/messages/" .. message .. "/reactions", headers, body)
end
