-- POST /v1/messages: peer texts between random users u1..u50 (HOT=1: always u1 -> u2), each request with its
-- own client_msg_id (thread id, start second, counter), with the app key from the environment.
local key = os.getenv("PARLEY_KEY")
local hot = os.getenv("HOT") == "1"
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
  local a, b = 1, 2
  if not hot then
    a = math.random(1, 50)
    b = (a + math.random(1, 49) - 1) % 50 + 1
  end
  local body = string.format(
    '{"from":"u%d","conversation_type":"peer","to":"u%d","type":1,"body":{"text":"hello from the bench"},"client_msg_id":"w%d-%d-%d"}',
    a, b, id, start, n)
  return wrk.format("POST", "/v1/messages", headers, body)
end
