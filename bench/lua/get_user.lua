-- GET /v1/users/u<1..1000> with the app key from the environment.
local key = os.getenv("PARLEY_KEY")
math.randomseed(os.time())
request = function()
  return wrk.format("GET", "/v1/users/u" .. math.random(1, 1000), { ["Authorization"] = "Bearer " .. key })
end
