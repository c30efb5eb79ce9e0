-- GET the 20 newest messages of a random peer conversation among u1..u50, as u<a>'s view, with the app key.
-- Every (a, b) request is formatted once (wrk.format per request costs the client CPU the server then lacks), in
-- init(), which wrk calls after it has set the Host header that wrk.format copies (HTTP/1.1 requires it: 400 without).
local key = os.getenv("PARLEY_KEY")
local requests = {}
function init(args)
  for a = 1, 50 do
    for b = 1, 50 do
      if a ~= b then
        local headers = { ["Authorization"] = "Bearer " .. key }
        requests[#requests + 1] = wrk.format("GET", "/v1/users/u" .. a .. "/conversations/peer/u" .. b .. "/messages", headers)
      end
    end
  end
end
math.randomseed(os.time())
function request()
  return requests[math.random(1, #requests)]
end
