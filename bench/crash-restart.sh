#!/usr/bin/env bash
# How long a restart takes after the server and its embedded PostgreSQL are killed together (a container's OOM kill,
# a power cut of one node), against a restart after a kill of the server alone (its postmaster then gets SIGINT from
# the kernel's parent-death signal and shuts down with a checkpoint). In each of BENCH_ROUNDS rounds:
#   1. BENCH_DURATION of peer sends (bench/lua/send.lua, BENCH_CONNECTIONS connections): WAL to replay;
#   2. SIGKILL to the server and to every process of its PostgreSQL at once (postmaster and backends);
#   3. `parley serve` again on the same data directory, timed from its start to the first `/readyz` 200, and the parts
#      PostgreSQL's own log names: crash recovery start ("database system was interrupted") to redo done and ready.
# Then the same rounds with a kill of the server alone. Target (issue 40): < 1.5 s from the kill of both to /readyz.
# Appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_CONNECTIONS=16, BENCH_DURATION=8s, BENCH_ROUNDS=5,
#              BENCH_THREADS=2, BENCH_RESULTS=path, BENCH_NO_RECORD=1
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONNECTIONS=${BENCH_CONNECTIONS:-16}
DURATION=${BENCH_DURATION:-8s}
BENCH_ROUNDS=${BENCH_ROUNDS:-5}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
now_ms() { date +%s%3N; }

build_parley
start_parley
import_users 50

postgres_pids() {  # the postmaster of $DATA's cluster and all its children
    local postmaster
    postmaster=$(head -1 "$DATA/pg/postmaster.pid" 2>/dev/null || true)
    [[ -n $postmaster ]] || return 0
    echo "$postmaster"
    pgrep -P "$postmaster" || true
}

wait_readyz() {  # until GET /readyz answers 200 (at most 60 s)
    local deadline=$((SECONDS + 60))
    while ((SECONDS < deadline)); do
        kill -0 "$PARLEY_PID" 2>/dev/null || die "parley exited during restart (see $TMP/parley.log)"
        curl -fsS --max-time 1 -o /dev/null "$BASE/readyz" 2>/dev/null && return 0
        sleep 0.02
    done
    die "no /readyz 200 within 60 s"
}

# recovery_span log_offset: PostgreSQL's own account of the last start, from its log: "<crash recovery ms> <wal MB>"
recovery_span() {
    python3 - "$DATA/pg.log" "$1" <<'PY'
import re, sys, datetime
text = open(sys.argv[1], "rb").read()[int(sys.argv[2]):].decode("utf-8", "replace")
def stamp(pattern):
    for line in text.splitlines():
        if re.search(pattern, line):
            m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})", line)
            if m: return datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f")
    return None
start = stamp(r"database system was (interrupted|shut down)")
ready = stamp(r"database system is ready to accept connections")
redo = re.search(r"redo done at .*?\n", text)
span = "n/a" if not (start and ready) else str(int((ready - start).total_seconds() * 1000))
print(span, "redo" if redo else "no-redo")
PY
}

declare -a ROWS
run_rounds() {  # label both|server
    local label=$1 which=$2 r kill_ms ready_ms offset pids span
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        run_wrk "$label load #$r" send.lua "$CONNECTIONS" >/dev/null
        pids=$(postgres_pids | tr '\n' ' ')
        offset=$(stat -c %s "$DATA/pg.log")
        kill_ms=$(now_ms)
        if [[ $which == both ]]; then
            # shellcheck disable=SC2086
            kill -KILL "$PARLEY_PID" $pids 2>/dev/null || true
        else
            kill -KILL "$PARLEY_PID"
        fi
        wait "$PARLEY_PID" 2>/dev/null || true
        forget_pid "$PARLEY_PID"
        PARLEY_LOG_LEVEL=error "$SCRATCH/release/parley" serve --listen "127.0.0.1:$PORT" --data-dir "$DATA" >>"$TMP/parley.log" 2>&1 &
        PARLEY_PID=$!
        PIDS=("$PARLEY_PID" "${PIDS[@]}")
        wait_readyz
        ready_ms=$(($(now_ms) - kill_ms))
        span=$(recovery_span "$offset")
        log "  $label #$r: kill to /readyz ${ready_ms} ms; postgres start to ready ${span}"
        ROWS+=("| $label | $r | $ready_ms | ${span% *} | ${span#* } |")
    done
}

run_rounds "server and postgres killed" both
run_rounds "server killed alone" server

section=$(
    cat <<MD
## Restart after a kill ($(date -u +%Y-%m-%d), bench/crash-restart.sh)

$(machine_lines)
- before each kill: ${DURATION} of peer sends from ${CONNECTIONS} connections (WAL to replay); then SIGKILL and
  \`parley serve\` again on the same data directory; "kill to /readyz" is wall time from the kill to the first 200.

| kill | round | kill to /readyz (ms) | PostgreSQL start to ready (ms, its log) | WAL redo |
|---|---|---|---|---|
$(printf '%s\n' "${ROWS[@]}")
MD
)
record_section "$section"
