-- GET the 20 newest messages of group $GROUP with the app key (one request, formatted once).
local key = os.getenv("PARLEY_KEY")
local req = wrk.format("GET", "/v1/groups/" .. os.getenv("GROUP") .. "/messages", { ["Authorization"] = "Bearer " .. key })
function request()
  return req
end
