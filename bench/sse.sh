#!/usr/bin/env bash
# Idle SSE streams: how much server memory each open user stream costs. Opens BENCH_STREAMS user streams
# (10 per user, the per-user cap) with a Python asyncio client, reads Parley's RSS before and with them open,
# and appends the figures to bench/RESULTS.md. (Fan-out latency to 1,000 group members comes with group messages.)
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_STREAMS=10000, BENCH_RESULTS=path, BENCH_NO_RECORD=1,
#              BENCH_NOTE="…"
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
STREAMS=${BENCH_STREAMS:-10000}
PER_USER=10
USERS=$(((STREAMS + PER_USER - 1) / PER_USER))
RESULTS=${BENCH_RESULTS:-$ROOT/bench/RESULTS.md}
SCRATCH=${BENCH_SCRATCH_PATH:-$ROOT/.build}
READY_TIMEOUT=60
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
command -v python3 >/dev/null || install_package python3
ulimit -n $((STREAMS * 2 + 1024)) 2>/dev/null || ulimit -n "$(ulimit -Hn)"

build_parley
start_parley
log "importing $USERS users"
for ((first = 1; first <= USERS; first += 100)); do
    last=$((first + 99 < USERS ? first + 99 : USERS))
    body=$(python3 -c "import json,sys; a,b=int(sys.argv[1]),int(sys.argv[2]); print(json.dumps({'users':[{'user_id':f'u{i}'} for i in range(a,b+1)]}))" "$first" "$last")
    api -X POST "$BASE/v1/users/import" -d "$body" >/dev/null
done
sleep 2
RSS_IDLE=$(rss_kib "$PARLEY_PID" VmRSS)
log "opening $STREAMS streams ($USERS users x $PER_USER)"
STARTED=$SECONDS
python3 "$ROOT/bench/py/sse_clients.py" "$PORT" "$PARLEY_KEY" "$USERS" "$PER_USER" 600 "$TMP/ready" &
CLIENT_PID=$!
PIDS=("$CLIENT_PID" "${PIDS[@]}")
for _ in $(seq 600); do [[ -s $TMP/ready ]] && break; sleep 0.5; done
[[ -s $TMP/ready ]] || die "the streams did not open in time"
OPEN_SECONDS=$((SECONDS - STARTED))
read -r OPENED FAILED _ <"$TMP/ready"
sleep 5  # let the hub settle (presence rows, first heartbeat pass)
RSS_OPEN=$(rss_kib "$PARLEY_PID" VmRSS)
FDS=$(ls "/proc/$PARLEY_PID/fd" | wc -l)
stop_pid "$CLIENT_PID"
PER_STREAM=$(awk -v a="$RSS_IDLE" -v b="$RSS_OPEN" -v n="$OPENED" 'BEGIN { if (n > 0) printf "%.1f", (b - a) / n; else print "n/a" }')
log "opened $OPENED (failed $FAILED) in ${OPEN_SECONDS}s; RSS ${RSS_IDLE} KiB -> ${RSS_OPEN} KiB: ${PER_STREAM} KiB per stream; ${FDS} fds"

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — idle SSE user streams: memory per stream"
    echo
    machine_lines
    echo "- parley: release build, embedded PostgreSQL 15, log level error; streams opened with the app key, $PER_USER per user (the cap), by bench/py/sse_clients.py (asyncio, one process)"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    echo "| streams asked | open | failed | time to open | RSS before | RSS with them open | per stream | open fds |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
    echo "| $STREAMS | $OPENED | $FAILED | ${OPEN_SECONDS} s | $((RSS_IDLE / 1024)) MiB | $((RSS_OPEN / 1024)) MiB | ${PER_STREAM} KiB | $FDS |"
)
if [[ ${BENCH_NO_RECORD:-0} != 1 ]]; then
    printf '\n%s\n' "$SECTION" >>"$RESULTS"
    log "recorded in $RESULTS"
fi
echo "$SECTION"
