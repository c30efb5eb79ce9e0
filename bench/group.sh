#!/usr/bin/env bash
# Group messages (API.md §11.1 group branch): text sends to a 500-member group through POST /v1/messages beside
# pgbench running the SQL a group send runs, one send per transaction (bench/sql/group_send.sql: BEGIN; the writer's
# MessageWrite.statement for one item; its message.sent event numbered under the app's head lock as EventLog.appendNumbered writes it; END;
# the pgbench script is generated at the start of the run by bench/py/send_sql.py from that template and the statements
# the release binary prints (`parley sql`), so it runs the server's current statements), then GET the group's 20 newest
# messages beside pgbench running the history SELECT (bench/sql/group_history.sql), then the latency of single
# sends (one connection) to a 5-member and to a 5,000-member group: a group send writes one message row and one
# event whatever the group's size, so the two should cost the same. Appends the figures to bench/RESULTS.md.
# The physical limit in the same rounds as the group sends: pgbench's single-row durable INSERT
# (bench/sql/floor_insert.sql, same clients and duration).
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_CONNECTIONS=32, BENCH_DURATION=15s,
#              BENCH_ROUNDS=3, BENCH_THREADS=2, BENCH_RESULTS=path, BENCH_NO_RECORD=1, BENCH_NOTE="…"
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONNECTIONS=${BENCH_CONNECTIONS:-32}
DURATION=${BENCH_DURATION:-15s}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
require_pgbench

build_parley
send_sql group_send.sql
start_parley
api -X PATCH "$BASE/v1/settings" -d '{"max_group_members":10000}' >/dev/null
import_users 5000
create_group g5 5
create_group g500 500
create_group g5000 5000
api -X POST "$BASE/v1/messages" -d '{"from":"u2","conversation_type":"group","to":"g500","type":1,"body":{"text":"check"}}' \
    | grep -q '"seq":2' || die "the first group send did not get seq 2 (after the creation tips message)"
SECS=$(seconds_of "$DURATION")
reference_tables create

export GROUP=g500 MEMBERS=500
run_pair "group send (500 members)" group_send.sql send.lua "$CONNECTIONS" floor_insert.sql
floor_rows=$(psql -h "$DATA/run" -p 5432 -U parley -d postgres -X -qtA -c 'SELECT count(*) FROM bench_floor_rows')
reference_tables drop
group_floor_ratio=$(ref_ratio "group send (500 members)")
REF_LINE="group sends (500 members) / single-row durable INSERT: **$group_floor_ratio** (target ≥ 0.8×); same SQL: ${ROUND_RATIOS[group send (500 members)]}"
log "$REF_LINE"
run_pair "group history (500 members)" group_history.sql group_history.lua
stored=$(api "$BASE/v1/groups/g500/messages?limit=1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["items"][0]["seq"])')
export GROUP=g5 MEMBERS=5
run_wrk "one sender, 5 members" send.lua 1
export GROUP=g5000 MEMBERS=5
run_wrk "one sender, 5,000 members" send.lua 1
ms() { awk -v v="$1" 'BEGIN { if (v ~ /us$/) printf "%.3f", v / 1000; else if (v ~ /ms$/) printf "%.3f", v + 0; else printf "%.3f", v * 1000 }'; }
latency_ratio=$(awk -v a="$(ms "${P50[one sender, 5,000 members]}")" -v b="$(ms "${P50[one sender, 5 members]}")" 'BEGIN { printf "%.2f×", a / b }')
log "p50 latency 5,000 members / 5 members: $latency_ratio"

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — group sends and history (app key) vs pgbench, and send latency by group size"
    echo
    machine_lines
    echo "- parley: release build, embedded PostgreSQL 15, default pool, log level error; 5,000 users; groups g5, g500, g5000 (owner u1, members u2..u<n>)"
    echo "- group send: text from a random member of g500 with a fresh client_msg_id (bench/lua/send.lua); pgbench runs the SQL a send runs, one send per transaction: \`BEGIN\`, the writer's \`MessageWrite.statement\` for one item, its message.sent event numbered under the app's head lock (\`EventLog.appendNumbered\`), \`END\` (bench/sql/group_send.sql, generated from the statements the release binary prints by bench/py/send_sql.py); Parley's writer commits concurrent sends together, in batches; g500 held $stored messages at the end"
    echo "- group history: \`GET /v1/groups/g500/messages\` (20 newest, app key); pgbench runs the same SELECT (bench/sql/group_history.sql)"
    echo "- load: wrk \`-t$THREADS -c$CONNECTIONS -d$DURATION --latency\` and pgbench \`-M prepared -j $THREADS -c$CONNECTIONS -T$SECS\`, alternating for $ROUNDS rounds (the row shows the round with the median ratio); latency rows: wrk with one connection, senders u1..u5 (members of both groups)"
    echo "- physical limit, in the same rounds as the group sends with the same clients and duration: pgbench \`-c synchronous_commit=on\` running a single-row durable INSERT, one per transaction, into the script's own table (bench/sql/floor_insert.sql, $floor_rows rows at the end, dropped after)"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    echo "$PAIR_HEADER"
    pair_row "group send (500 members)"
    pair_row "group history (500 members)"
    echo
    echo "$REF_HEADER"
    ref_row "group send (500 members)" "single-row durable INSERT" "≥ 0.8×"
    echo
    echo "$REF_LINE"
    echo
    echo "| one connection sending | req/s | p50 | p99 | non-2xx |"
    echo "|---|---:|---|---|---:|"
    for name in "one sender, 5 members" "one sender, 5,000 members"; do
        printf '| %s | %.0f | %s | %s | %s |\n' "$name" "${RATE[parley,$name]}" "${P50[$name]}" "${P99[$name]}" "${ERR[$name]}"
    done
    echo
    echo "p50 latency of a send to 5,000 members / to 5 members: **$latency_ratio** (target ≤ 1.5×)"
)
record_section "$SECTION"
