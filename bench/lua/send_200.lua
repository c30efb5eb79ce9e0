-- POST /v1/messages with the app key from the environment: peer texts of 200 bytes (common words, matching no
-- blocklist entry of bench/moderation.sh) between random users u1..u$USERS (50), each with its own client_msg_id.
local key = os.getenv("PARLEY_KEY")
local users = tonumber(os.getenv("USERS") or "50")
local headers = { ["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json" }
local text = string.sub(string.rep("the quick brown fox jumps over the lazy dog while we talk about plans for lunch ", 3), 1, 200)
local counter = 1
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end
function init(args)
  n = 0
  start = os.time()
  math.randomseed(start * 7919 + id)
end
function request()
  n = n + 1
  local a = math.random(1, users)
  local b = (a + math.random(1, users - 1) - 1) % users + 1
  local body = string.format('{"from":"u%d","conversation_type":"peer","to":"u%d","type":1,"body":{"text":"%s"},"client_msg_id":"b%d-%d-%d"}',
    a, b, text, id, start, n)
  return wrk.format("POST", "/v1/messages", headers, body)
end
