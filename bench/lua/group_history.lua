-- GET the 20 newest messages of group $GROUP with the app key (one request, formatted once in init(), after wrk has
-- set the Host header that wrk.format copies: HTTP/1.1 requires it).
local key = os.getenv("PARLEY_KEY")
local req
function init(args)
  req = wrk.format("GET", "/v1/groups/" .. os.getenv("GROUP") .. "/messages", { ["Authorization"] = "Bearer " .. key })
end
function request()
  return req
end
