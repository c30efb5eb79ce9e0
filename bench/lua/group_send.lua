-- POST /v1/messages: texts to group $GROUP from a random member u1..u$MEMBERS, each request with its own
-- client_msg_id (thread id, start second, counter), with the app key from the environment.
local key = os.getenv("PARLEY_KEY")
local group = os.getenv("GROUP")
local members = tonumber(os.getenv("MEMBERS"))
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
  local body = string.format(
    '{"from":"u%d","conversation_type":"group","to":"%s","type":1,"body":{"text":"hello from the bench"},"client_msg_id":"g%d-%d-%d"}',
    math.random(1, members), group, id, start, n)
  return wrk.format("POST", "/v1/messages", headers, body)
end
