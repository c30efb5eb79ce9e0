-- GET the 20 newest messages of group $GROUP with the app key.
local key = os.getenv("PARLEY_KEY")
local headers = { ["Authorization"] = "Bearer " .. key }
local path = "/v1/groups/" .. os.getenv("GROUP") .. "/messages"
function request()
  return wrk.format("GET", path, headers)
end
