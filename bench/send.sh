#!/usr/bin/env bash
# Peer text sends through POST /v1/messages (wrk, each request its own client_msg_id) beside pgbench running the
# one statement a send runs (bench/sql/send.sql, -M prepared, same number of clients) on the same embedded
# PostgreSQL, in one run; then GET history (20 newest) beside pgbench running the history SELECT; then one hot
# conversation (every connection sends u1 -> u2) both ways. Appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_CONNECTIONS=32, BENCH_DURATION=15s,
#              BENCH_THREADS=2, BENCH_RESULTS=path, BENCH_NO_RECORD=1, BENCH_NOTE="…"
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
start_parley
log "importing 50 users"
body=$(python3 -c "import json; print(json.dumps({'users':[{'user_id':f'u{i}','name':f'User {i}'} for i in range(1,51)]}))")
api -X POST "$BASE/v1/users/import" -d "$body" >/dev/null
api -X POST "$BASE/v1/messages" -d '{"from":"u1","conversation_type":"peer","to":"u2","type":1,"body":{"text":"check"}}' \
    | grep -q '"seq":1' || die "the first send did not get seq 1"
SECS=$(seconds_of "$DURATION")

run_pair "send" send.sql send.lua
run_pair "history" history.sql history.lua
export HOT=1
run_pair "send, hot pair" send_hot.sql send.lua
unset HOT
stored=$(api "$BASE/v1/users/u1/conversations/peer/u2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["last_seq"])')

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — POST /v1/messages and GET history (app key) vs pgbench, same SQL"
    echo
    machine_lines
    echo "- parley: release build, embedded PostgreSQL 15, default pool (2 per core, ≥ 4), log level error; 50 users"
    echo "- send: peer text between random users u1..u50, a fresh client_msg_id per request (bench/lua/send.lua); pgbench runs the one statement a send runs (bench/sql/send.sql: \`parley_send_message\`, Migrations/0009)"
    echo "- history: \`GET /v1/users/u<a>/conversations/peer/u<b>/messages\` (20 newest) of random pairs; pgbench runs the same SELECT (bench/sql/history.sql)"
    echo "- hot pair: every connection sends u1 -> u2 (one seq head row); the pair held $stored messages at the end"
    echo "- load: wrk \`-t$THREADS -c$CONNECTIONS -d$DURATION --latency\` and pgbench \`-M prepared -j $THREADS -c$CONNECTIONS -T$SECS\`, alternating for $ROUNDS rounds (the row shows the round with the median ratio), loopback / Unix socket"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    echo "$PAIR_HEADER"
    for name in "send" "history" "send, hot pair"; do pair_row "$name"; done
)
record_section "$SECTION"
