-- GET the 20 newest messages of a random peer conversation among u1..u50, as u<a>'s view, with the app key.
local key = os.getenv("PARLEY_KEY")
local headers = { ["Authorization"] = "Bearer " .. key }
math.randomseed(os.time())
function request()
  local a = math.random(1, 50)
  local b = (a + math.random(1, 49) - 1) % 50 + 1
  return wrk.format("GET", "/v1/users/u" .. a .. "/conversations/peer/u" .. b .. "/messages", headers)
end
