-- bench/lua/send.lua's sends, paced: each wrk thread spaces its requests 1000 * threads / $SEND_RATE ms apart over its
-- connections (wrk's delay() hook, wall clock through LuaJIT's FFI), so the run offers $SEND_RATE sends/s whatever the
-- answers' latency, as long as some connection is free (with enough connections, an open loop). A thread that falls
-- behind does not catch up in a burst: wrk's Requests/sec is the rate achieved.
local ffi = require("ffi")
ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } parley_timespec;
  int clock_gettime(int clock, parley_timespec *tp);
]]
local ts = ffi.new("parley_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, ts)  -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

local threads = tonumber(os.getenv("THREADS") or "2")
local rate = tonumber(os.getenv("SEND_RATE") or "1000")
dofile(os.getenv("BENCH_LUA_DIR") .. "/send.lua")
local send_init = init
function init(args)
  send_init(args)
  period = 1000 * threads / rate
  next_at = now_ms()
end
function delay()
  local now = now_ms()
  local at = math.max(next_at, now)
  next_at = at + period
  return math.floor(at - now)
end
