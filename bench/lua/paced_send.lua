-- bench/lua/send.lua's peer texts at a set pace: PACE_RATE requests per second over all of wrk's threads (-t), each
-- thread giving its connections one slot every threads/PACE_RATE s in turn. A connection waits for its slot; when the
-- server answers late the next slots go at once (the schedule is kept, up to 1 s behind: slots older than that are
-- dropped and counted), so the rate holds while the connections suffice. Needs LuaJIT (wrk's build) for the clock.
dofile(os.getenv("BENCH_LUA_DIR") .. "/send.lua")
local ffi = require("ffi")
ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } parley_timespec;
  int clock_gettime(int clk_id, parley_timespec *tp);
]]
local ts = ffi.new("parley_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end
local rate = tonumber(os.getenv("PACE_RATE") or "100")
local threads = tonumber(os.getenv("PACE_THREADS") or "1")
local interval = 1000 * threads / rate
local next_slot = nil
dropped = 0
function delay()
  local now = now_ms()
  if next_slot == nil then next_slot = now end
  if next_slot < now - 1000 then
    dropped = dropped + math.floor((now - 1000 - next_slot) / interval)
    next_slot = now - 1000
  end
  local wait = next_slot - now
  next_slot = next_slot + interval
  if wait < 0 then return 0 end
  return math.floor(wait)
end
