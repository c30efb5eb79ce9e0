-- GET /v1/users/u<1..1000> with the app key from the environment, a random user per request.
-- The 1000 requests are formatted once: wrk.format per request cost the client more CPU than the read it measures
-- takes in PostgreSQL, and the client shares the machine with the server. They are formatted in init(), which wrk
-- calls after it has set the Host header that wrk.format copies (HTTP/1.1 requires it: 400 without).
local key = os.getenv("PARLEY_KEY")
local requests = {}
function init(args)
  for i = 1, 1000 do
    requests[i] = wrk.format("GET", "/v1/users/u" .. i, { ["Authorization"] = "Bearer " .. key })
  end
end
math.randomseed(os.time())
request = function()
  return requests[math.random(1, 1000)]
end
