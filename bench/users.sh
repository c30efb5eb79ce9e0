#!/usr/bin/env bash
# GET /v1/users/{id} with an app key (wrk) beside pgbench running the same SELECT (-M prepared, same number
# of clients) on the same embedded PostgreSQL, in one run; appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_CONNECTIONS="64", BENCH_DURATION=10s,
#              BENCH_THREADS=2, BENCH_RESULTS=path, BENCH_NO_RECORD=1, BENCH_NOTE="…"
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONNECTIONS=${BENCH_CONNECTIONS:-64}
DURATION=${BENCH_DURATION:-10s}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
require_pgbench

build_parley
start_parley
log "importing 1000 users"
for batch in $(seq 0 9); do
    body=$(python3 -c "import json,sys; b=int(sys.argv[1]); print(json.dumps({'users':[{'user_id':f'u{i}','name':f'User {i}'} for i in range(b*100+1,b*100+101)]}))" "$batch")
    api -X POST "$BASE/v1/users/import" -d "$body" >/dev/null
done
[[ $(api "$BASE/v1/users/u1000" -o /dev/null -w '%{http_code}') == 200 ]] || die "user u1000 missing"

SOCKET="$DATA/run"
PGB=(pgbench -h "$SOCKET" -p 5432 -U parley -n -M prepared -j "$THREADS" -f "$ROOT/bench/sql/get_user.sql" postgres)

seconds_of() { local d=$1; case $d in *s) echo "${d%s}" ;; *) echo "$d" ;; esac; }
declare -A RATE P50 P99
for conns in $CONNECTIONS; do
    log "pgbench -c$conns -T$(seconds_of "$DURATION") -M prepared (same SELECT)"
    "${PGB[@]}" -c "$conns" -T 2 >/dev/null 2>&1 || true
    out=$("${PGB[@]}" -c "$conns" -T "$(seconds_of "$DURATION")" 2>&1) || { echo "$out" >&2; die "pgbench failed"; }
    RATE[pgbench,$conns]=$(awk '/^tps = / { print $3; exit }' <<<"$out")
    P50[pgbench,$conns]=$(awk '/^latency average = / { print $4 " ms (avg)"; exit }' <<<"$out")
    log "  pgbench: ${RATE[pgbench,$conns]} tps"
    log "wrk -t$THREADS -c$conns -d$DURATION GET /v1/users/{id}"
    wrk -t"$THREADS" -c"$conns" -d2s -s "$ROOT/bench/lua/get_user.lua" "$BASE" >/dev/null 2>&1 || true
    out=$(wrk -t"$THREADS" -c"$conns" -d"$DURATION" --latency -s "$ROOT/bench/lua/get_user.lua" "$BASE" 2>&1)
    RATE[parley,$conns]=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
    P50[parley,$conns]=$(awk '$1 == "50%" { print $2 }' <<<"$out")
    P99[parley,$conns]=$(awk '$1 == "99%" { print $2 }' <<<"$out")
    errors=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' <<<"$out")
    [[ -z $errors ]] || log "  warning: $errors non-2xx responses"
    log "  parley: ${RATE[parley,$conns]} req/s, p50 ${P50[parley,$conns]}, p99 ${P99[parley,$conns]}"
done

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — GET /v1/users/{id} (app key) vs pgbench, same SELECT"
    echo
    machine_lines
    echo "- parley: release build, embedded PostgreSQL 15, default pool (2 per core, ≥ 4), log level error; 1000 users; wrk picks a random user per request"
    echo "- pgbench: \`-M prepared -j $THREADS\`, bench/sql/get_user.sql (the SELECT the route runs) over the same Unix socket"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    echo "| conns | pgbench tps | parley req/s | parley/pgbench | parley p50 / p99 | pgbench latency |"
    echo "|---:|---:|---:|---:|---|---|"
    for conns in $CONNECTIONS; do
        ratio=$(awk -v p="${RATE[parley,$conns]}" -v n="${RATE[pgbench,$conns]}" 'BEGIN { printf "%.2f×", p / n }')
        printf '| %s | %.0f | %.0f | %s | %s / %s | %s |\n' "$conns" "${RATE[pgbench,$conns]}" "${RATE[parley,$conns]}" "$ratio" \
            "${P50[parley,$conns]}" "${P99[parley,$conns]}" "${P50[pgbench,$conns]}"
    done
)
record_section "$SECTION"
