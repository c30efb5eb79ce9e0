#!/usr/bin/env bash
# Message search (API.md §11.9, issue 22) on 1,000,000 stored messages of one app: a release-build Parley on its
# embedded PostgreSQL, users imported through the API, then groups, members and 1,000,000 texts written straight into
# the tables (bench/sql/search_load.sql: INSERT … SELECT generate_series, half English words, half CJK characters),
# so the load takes about a minute instead of hours of sends. Then, through HTTP (bench/py/search_latency.py, one
# client, sequential requests on one keep-alive connection):
#   1. a 2-keyword search in one conversation as a member of it (a 10,000-message group), target p99 < 100 ms;
#   2. a 2-keyword search app-wide with `user_id` (a random user of 2,000 each request), target p99 < 300 ms;
#   3. the same app-wide with two CJK keywords of one character each.
# The generic plan of each statement the server ran (read back from the PostgreSQL log with its parameters,
# bench/py/search_plan.py) is EXPLAIN ANALYZEd under plan_cache_mode = force_generic_plan and recorded with the
# figures in bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_REQUESTS=200, BENCH_RESULTS=path, BENCH_NO_RECORD=1
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
REQUESTS=${BENCH_REQUESTS:-200}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
require_pgbench  # for psql

build_parley
start_parley
APP=$(cut -d. -f2 <<<"$PARLEY_KEY")
psql_run() { psql -h "$DATA/run" -p 5432 -U parley -d postgres -v ON_ERROR_STOP=1 -Atq "$@"; }
import_users 2000
log "loading 1,000,000 messages (bench/sql/search_load.sql)"
started=$(date +%s)
count=$(psql_run -v app="$APP" -f "$ROOT/bench/sql/search_load.sql" | tail -n 1)
load_s=$(($(date +%s) - started))
log "  $count messages in ${load_s} s"
index_size=$(psql_run -c "SELECT pg_size_pretty(pg_relation_size('messages_search')) || ' index, ' || pg_size_pretty(pg_relation_size('messages')) || ' heap'")

# Every statement the server runs from here is logged with its parameters, so its exact text can be explained below.
psql_run -c "ALTER SYSTEM SET log_min_duration_statement = 0" -c "SELECT pg_reload_conf()" >/dev/null
sleep 1

# conversation (a group u1 belongs to), app-wide with a user, app-wide CJK: label, query template, SQL marker
cjk_a=$(printf '\u4e20') cjk_b=$(printf '\u4e21')
enc() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$1"; }
declare -a LABELS=("group g1 (10,000 messages), member u1, q=meeting tomorrow"
    "app-wide, user_id random of 2,000, q=meeting tomorrow"
    "app-wide, user_id random of 2,000, q=$cjk_a $cjk_b (one CJK character each)")
declare -a QUERIES=("user_id=u1&conversation_type=group&conversation_id=g1&q=meeting%20tomorrow"
    "user_id={user}&q=meeting%20tomorrow"
    "user_id={user}&q=$(enc "$cjk_a")%20$(enc "$cjk_b")")
declare -a TARGETS=(100 300 300)
declare -a MARKERS=("ORDER BY m.seq" "parley_search_key" "parley_search_key")

rows=""
plans=""
for i in "${!LABELS[@]}"; do
    log "searching: ${LABELS[$i]} ($REQUESTS requests)"
    read -r p50 p99 max items < <(python3 "$ROOT/bench/py/search_latency.py" "$BASE" "$PARLEY_KEY" "$REQUESTS" "${QUERIES[$i]}")
    rows+="| ${LABELS[$i]} | $p50 ms | $p99 ms | $max ms | $items | < ${TARGETS[$i]} ms: $(awk -v x="$p99" -v t="${TARGETS[$i]}" 'BEGIN { print (x < t ? "met" : "**not met**") }') |"$'\n'
    sleep 1  # the log reaches the file
    script=$(python3 "$ROOT/bench/py/search_plan.py" "$DATA/pg.log" "${MARKERS[$i]}")
    plan=$(psql_run -c "SET log_min_duration_statement = -1" -f <(echo "$script") | sed 's/^/    /')
    plans+="- ${LABELS[$i]}:"$'\n\n'"$plan"$'\n\n'
done
psql_run -c "ALTER SYSTEM RESET log_min_duration_statement" -c "SELECT pg_reload_conf()" >/dev/null

record_section "## $(date -u '+%Y-%m-%d %H:%M') UTC — message search on 1,000,000 messages (GET /v1/messages/search)

$(machine_lines)
- data: bench/sql/search_load.sql, $count messages in one app (1,999 peer conversations × 200, 60 groups × 10,000),
  loaded in ${load_s} s; $index_size
- load: bench/py/search_latency.py, $REQUESTS sequential requests per search after 10 warm-up ones, one keep-alive
  connection, app key

| search | p50 | p99 | max | items per page | target |
|---|---:|---:|---:|---:|---|
${rows}
Generic plans of the statements the server ran (plan_cache_mode = force_generic_plan, the pool's setting):

${plans}"
