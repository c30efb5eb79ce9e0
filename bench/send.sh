#!/usr/bin/env bash
# Peer text sends through POST /v1/messages (wrk, each request its own client_msg_id) beside pgbench running the
# SQL a send runs, one send per transaction (BEGIN; the writer's MessageWrite.statement for one item; its message.sent
# event numbered under the app's head lock as EventLog.appendNumbered writes it; END; -M prepared, same number of clients) on the same
# embedded PostgreSQL, in one run; then GET history (20 newest) beside pgbench running the history SELECT; then one hot
# conversation (every connection sends u1 -> u2) both ways. Appends the figures to bench/RESULTS.md.
# The send scripts are generated at the start of each run (bench/py/send_sql.py, after the build) from the templates bench/sql/send.sql
# (send_hot.sql: the same with u1 -> u2 only) and the statements the release binary prints (`parley sql`), so they run the server's current statements.
# The physical limit in the same rounds: pgbench's single-row durable INSERT (bench/sql/floor_insert.sql) beside the
# sends, the naive hot-counter transaction (bench/sql/hot_counter.sql) beside the hot pair. SSE commit-to-delivery:
# bench/py/sse_latency.py on an app-level stream, at idle and during an extra wrk send phase.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_CONNECTIONS=32, BENCH_DURATION=15s,
#              BENCH_ROUNDS=3, BENCH_THREADS=2, BENCH_RESULTS=path, BENCH_NO_RECORD=1, BENCH_NOTE="…",
#              BENCH_SSE_SENDS=500 (probe messages per phase, 0 skips the probe), BENCH_SSE_INTERVAL_MS=20
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONNECTIONS=${BENCH_CONNECTIONS:-32}
DURATION=${BENCH_DURATION:-15s}
SSE_SENDS=${BENCH_SSE_SENDS:-500}
SSE_INTERVAL_MS=${BENCH_SSE_INTERVAL_MS:-20}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
require_pgbench
build_parley
send_sql send.sql
# The hot pair is send.sql with every transaction in the one conversation u1 -> u2: each holds the pair's seq row from
# the statement to its commit.
sed -e 's/^\\set a .*/\\set a 1/' -e 's/^\\set b .*/\\set b 2/' "$TMP/sql/send.sql" >"$TMP/sql/send_hot.sql"

start_parley
log "importing 50 users"
body=$(python3 -c "import json; print(json.dumps({'users':[{'user_id':f'u{i}','name':f'User {i}'} for i in range(1,51)]}))")
api -X POST "$BASE/v1/users/import" -d "$body" >/dev/null
api -X POST "$BASE/v1/messages" -d '{"from":"u1","conversation_type":"peer","to":"u2","type":1,"body":{"text":"check"}}' \
    | grep -q '"seq":1' || die "the first send did not get seq 1"
SECS=$(seconds_of "$DURATION")
reference_tables create

# SSE commit-to-delivery (bench/py/sse_latency.py): at idle now, under load during an extra send phase below.
# sse_probe max_seconds output_file: the probe's JSON line into the file. It execs, so that the process started in the
# background during the load (run_wrk's DURING_WRK, stopped by PID on exit) is the probe's own `timeout`.
sse_probe() { exec timeout $(($1 + 60)) python3 "$ROOT/bench/py/sse_latency.py" "$PORT" "$PARLEY_KEY" "$SSE_SENDS" "$SSE_INTERVAL_MS" "$1" >"$2"; }
sse_probe_under_load() { sse_probe "$((SECS > 2 ? SECS - 1 : 1))" "$TMP/sse-load.json"; }
if ((SSE_SENDS > 0)); then
    log "sse commit-to-delivery at idle: $SSE_SENDS sends, one every ${SSE_INTERVAL_MS} ms"
    (sse_probe 60 "$TMP/sse-idle.json") || log "  warning: the idle SSE probe exited with status $?"
    log "  sse probe at idle: $(cat "$TMP/sse-idle.json" 2>/dev/null)"
fi

run_pair "send" send.sql send.lua "$CONNECTIONS" floor_insert.sql
if ((SSE_SENDS > 0)); then
    # Its own phase, so the app stream and the probe's sends stay out of the ratio rounds.
    log "sse commit-to-delivery under the send load: the probe runs during the measured wrk run"
    DURING_WRK["send + SSE probe"]=sse_probe_under_load
    run_wrk "send + SSE probe" send.lua
    log "  sse probe under load: $(cat "$TMP/sse-load.json" 2>/dev/null)"
fi
run_pair "history" history.sql history.lua
export HOT=1
run_pair "send, hot pair" send_hot.sql send.lua "$CONNECTIONS" hot_counter.sql
unset HOT
stored=$(api "$BASE/v1/users/u1/conversations/peer/u2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["last_seq"])')
floor_rows=$(psql -h "$DATA/run" -p 5432 -U parley -d postgres -X -qtA -c 'SELECT count(*) FROM bench_floor_rows')
counter=$(psql -h "$DATA/run" -p 5432 -U parley -d postgres -X -qtA -c 'SELECT n FROM bench_counter')
reference_tables drop

floor_ratio=$(ref_ratio "send")
hot_ratio=$(ref_ratio "send, hot pair")
REF_LINE="peer sends / single-row durable INSERT: **$floor_ratio** (target ≥ 0.8×); hot pair / naive hot counter: **$hot_ratio** (target ≥ 5×); same SQL: sends ${ROUND_RATIOS[send]}, hot pair ${ROUND_RATIOS[send, hot pair]}"
log "$REF_LINE"
sse() {  # file key: a figure of the probe's JSON ("n/a" when it did not run)
    python3 -c 'import json,sys
try: v = json.load(open(sys.argv[1]))[sys.argv[2]]
except Exception: v = None
print("n/a" if v is None else v)' "$1" "$2"
}
SSE_LINE=
if ((SSE_SENDS > 0)); then
    SSE_LINE="sse commit-to-delivery idle p50 $(sse "$TMP/sse-idle.json" post_to_event_p50_ms) ms p99 $(sse "$TMP/sse-idle.json" post_to_event_p99_ms) ms; under load p50 $(sse "$TMP/sse-load.json" post_to_event_p50_ms) ms p99 $(sse "$TMP/sse-load.json" post_to_event_p99_ms) ms"
    log "$SSE_LINE"
fi

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — POST /v1/messages and GET history (app key) vs pgbench, same SQL"
    echo
    machine_lines
    echo "- parley: release build, embedded PostgreSQL 15, default pool (2 per core, ≥ 4), log level error; 50 users"
    echo "- send: peer text between random users u1..u50, a fresh client_msg_id per request (bench/lua/send.lua); pgbench runs the SQL a send runs, one send per transaction: \`BEGIN\`, the writer's \`MessageWrite.statement\` for one item, its message.sent event numbered under the app's head lock (\`EventLog.appendNumbered\`), \`END\` (bench/sql/send.sql, generated from the statements the release binary prints by bench/py/send_sql.py); Parley's writer commits concurrent sends together, in batches"
    echo "- history: \`GET /v1/users/u<a>/conversations/peer/u<b>/messages\` (20 newest) of random pairs; pgbench runs the same SELECT (bench/sql/history.sql)"
    echo "- hot pair: every connection sends u1 -> u2 (one seq head row); the pair held $stored messages at the end"
    echo "- load: wrk \`-t$THREADS -c$CONNECTIONS -d$DURATION --latency\` and pgbench \`-M prepared -j $THREADS -c$CONNECTIONS -T$SECS\`, alternating for $ROUNDS rounds (the row shows the round with the median ratio), loopback / Unix socket"
    echo "- physical limit, in the same rounds with the same clients and duration (pgbench \`-c synchronous_commit=on\`, the scripts' own tables, dropped at the end): a single-row durable INSERT, one per transaction (bench/sql/floor_insert.sql, $floor_rows rows at the end), beside the sends; the naive hot counter, \`BEGIN; UPDATE bench_counter SET n = n + 1 WHERE id = 1 RETURNING n; INSERT a row with n; END;\` with every client on the one counter row (bench/sql/hot_counter.sql, counter at $counter), beside the hot pair"
    if ((SSE_SENDS > 0)); then
        echo "- sse: one app-level stream \`GET /v1/events?types=message.sent\` (bench/py/sse_latency.py); up to $SSE_SENDS peer sends one at a time, one every $SSE_INTERVAL_MS ms, each matched on the stream by its client_msg_id; latency = from writing the POST to the stream receiving its event (the commit lies in between: under load this includes the POST's own wait). At idle, then during an extra wrk send phase (not one of the rounds)"
    fi
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    echo "$PAIR_HEADER"
    for name in "send" "history" "send, hot pair"; do pair_row "$name"; done
    echo
    echo "$REF_HEADER"
    ref_row "send" "single-row durable INSERT" "≥ 0.8×"
    ref_row "send, hot pair" "naive hot counter" "≥ 5×"
    echo
    echo "$REF_LINE"
    if ((SSE_SENDS > 0)); then
        echo
        echo "| sse phase | sent | delivered | missing | POST → event p50 / p99 / max | response → event p50 / p99 | POST round trip p50 / p99 | stream events | send load |"
        echo "|---|---:|---:|---:|---|---|---|---:|---|"
        for phase in idle load; do
            f="$TMP/sse-$phase.json"
            if [[ $phase == idle ]]; then load="none"; else
                load=$(printf '%.0f req/s (p50 %s, p99 %s, non-2xx %s)' "${RATE[parley,send + SSE probe]:-0}" "${P50[send + SSE probe]:-}" "${P99[send + SSE probe]:-}" "${ERR[send + SSE probe]:-}")
            fi
            echo "| $phase | $(sse "$f" sent) | $(sse "$f" delivered) | $(sse "$f" missing) | $(sse "$f" post_to_event_p50_ms) / $(sse "$f" post_to_event_p99_ms) / $(sse "$f" post_to_event_max_ms) ms | $(sse "$f" response_to_event_p50_ms) / $(sse "$f" response_to_event_p99_ms) ms | $(sse "$f" post_p50_ms) / $(sse "$f" post_p99_ms) ms | $(sse "$f" stream_events) | $load |"
        done
        echo
        echo "$SSE_LINE (target: p99 < 50 ms under load)"
    fi
)
record_section "$SECTION"
