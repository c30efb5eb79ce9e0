-- GET the 20 newest messages of a random peer conversation among u1..u50, as u<a>'s view, with the app key.
-- Every (a, b) request is formatted once (wrk.format per request costs the client CPU the server then lacks).
local key = os.getenv("PARLEY_KEY")
local headers = { ["Authorization"] = "Bearer " .. key }
local requests = {}
for a = 1, 50 do
  for b = 1, 50 do
    if a ~= b then
      requests[#requests + 1] = wrk.format("GET", "/v1/users/u" .. a .. "/conversations/peer/u" .. b .. "/messages", headers)
    end
  end
end
math.randomseed(os.time())
function request()
  return requests[math.random(1, #requests)]
end
