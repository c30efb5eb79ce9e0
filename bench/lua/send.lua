-- POST /v1/messages with the app key from the environment, each request with its own client_msg_id (thread id,
-- start second, counter). Peer texts between random users u1..u$USERS (50; HOT=1: always u1 -> u2), or with GROUP set,
-- group texts to $GROUP from a random member u1..u$MEMBERS. TEXT_BYTES=N sends texts of N bytes (common words that
-- match no blocklist entry of bench/moderation.sh) instead of the short greeting.
local key = os.getenv("PARLEY_KEY")
local hot = os.getenv("HOT") == "1"
local group = os.getenv("GROUP")
local members = tonumber(os.getenv("MEMBERS") or "0")
local users = tonumber(os.getenv("USERS") or "50")
local text = "hello from the bench"
local textBytes = tonumber(os.getenv("TEXT_BYTES") or "0")
if textBytes > 0 then
  text = string.sub(string.rep("the quick brown fox jumps over the lazy dog while we talk about plans for lunch ", math.floor(textBytes / 80) + 1), 1, textBytes)
end
local headers = { ["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json" }
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
  local target
  if group then
    target = string.format('"from":"u%d","conversation_type":"group","to":"%s"', math.random(1, members), group)
  else
    local a, b = 1, 2
    if not hot then
      a = math.random(1, users)
      b = (a + math.random(1, users - 1) - 1) % users + 1
    end
    target = string.format('"from":"u%d","conversation_type":"peer","to":"u%d"', a, b)
  end
  local body = string.format('{%s,"type":1,"body":{"text":"%s"},"client_msg_id":"w%d-%d-%d"}', target, text, id, start, n)
  return wrk.format("POST", "/v1/messages", headers, body)
end
