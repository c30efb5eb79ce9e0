#!/usr/bin/env bash
# The message lifecycle beside the send path (API.md §11.5, §11.6): in each of BENCH_ROUNDS rounds, wrk runs
#   1. peer text sends between u1..u50 (bench/lua/send.lua), the reference rate;
#   2. revokes by the app of the messages the sends just stored, each request a different message (bench/lua/revoke.lua);
#   3. reactions on one hot group message (a 2,000-member group, a fresh message each round) from 32 connections, each
#      request a new (user, type) pair (bench/lua/react.lua);
# and pgbench runs the physical limits with the same clients and duration (synchronous_commit=on): a single-row durable
# INSERT per transaction (bench/sql/floor_insert.sql) and the naive hot counter, every client on one row
# (bench/sql/hot_counter.sql): the floor of a change that must queue on one row, as reactions to one message do.
# Before each phase the script waits for the machine to go quiet (bench/lib.sh wait_quiet: the push bridge plans the
# sends' events after the send phase ends, and that is the sends' cost, not the next phase's), and it measures each
# wrk phase's CPU (Parley + its PostgreSQL, ms per request). Target (issue 21): revokes/s and reactions/s each ≥ 0.5×
# the same round's sends/s. Appends the figures (every round, and the median round's ratios) to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_CONNECTIONS=32, BENCH_DURATION=10s, BENCH_ROUNDS=3,
#              BENCH_THREADS=2, BENCH_RESULTS=path, BENCH_NO_RECORD=1, BENCH_NO_REACTIONS=1 (skip phase 3)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONNECTIONS=${BENCH_CONNECTIONS:-32}
DURATION=${BENCH_DURATION:-10s}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
require_pgbench
export WRK_THREADS=$THREADS

SECS=$(seconds_of "$DURATION")

build_parley
start_parley
import_users 2000
create_group hot 2000
reference_tables create
psql_q() { psql -h "$DATA/run" -p 5432 -U parley -d postgres -Atq -c "$1"; }
# Before a measured phase: fresh planner statistics, then a quiet machine. The pool runs generic plans, made when a
# session first runs a statement: made while the statistics still describe the empty tables of a fresh server, a
# lookup by (app_id, message_id) chose the (app_id, sender) index and scanned the app's messages, until autovacuum's
# ANALYZE (about a minute later) made the sessions plan again (the first round's reactions ran at 0.7k/s, the later
# ones at 2.2–2.4k/s). Benchmarks of a database analyze it after loading; so does this one, before every phase.
settle() {
    psql_q "ANALYZE" >/dev/null
    wait_quiet
}

declare -a ROWS REFS
ratios_revoke=()
ratios_react=()
for ((r = 1; r <= ROUNDS; r++)); do
    log "round $r of $ROUNDS (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    settle
    measure "send #$r" send.lua "$CONNECTIONS"
    export IDS="$TMP/ids-$r.txt"
    psql_q "SELECT message_id FROM messages WHERE conv_type = 'peer' AND type = 1 AND NOT deleted" | shuf >"$IDS"
    log "  $(wc -l <"$IDS") stored texts to revoke from"
    settle
    NO_WARMUP=1 measure "revoke #$r" revoke.lua "$CONNECTIONS"
    left=$(psql_q "SELECT count(*) FROM messages WHERE conv_type = 'peer' AND type = 31")
    log "  revoke records so far: $left"
    react="n/a"
    react_ratio="n/a"
    if [[ ${BENCH_NO_REACTIONS:-0} != 1 ]]; then
        export MESSAGE USERS=1999
        MESSAGE=$(api -X POST "$BASE/v1/messages" -d '{"from":"u1","conversation_type":"group","to":"hot","type":1,"body":{"text":"react to me"}}' \
            | python3 -c 'import json,sys; print(json.load(sys.stdin)["message_id"])')
        settle
        NO_WARMUP=1 measure "react #$r" react.lua "$CONNECTIONS"
        total=$(psql_q "SELECT count(*) FROM message_reactions WHERE message_id = '$MESSAGE'")
        summary=$(api "$BASE/v1/messages/$MESSAGE" | python3 -c 'import json,sys; print(sum(x["count"] for x in json.load(sys.stdin)["reactions"]))')
        log "  hot message: $total reactions stored, summary counts $summary"
        react="${RATE[parley,react #$r]} (p99 ${P99[react #$r]}, non-2xx ${ERR[react #$r]}, cpu $(cpu_ms_per_request "react #$r") ms)"
        react_ratio=$(ab_ratio "${RATE[parley,react #$r]}" "${RATE[parley,send #$r]}")
        ratios_react+=("$react_ratio")
    fi
    wait_quiet
    run_pgbench "floor #$r" floor_insert.sql "$CONNECTIONS" "-c synchronous_commit=on"
    run_pgbench "hot counter #$r" hot_counter.sql "$CONNECTIONS" "-c synchronous_commit=on"
    revoke_ratio=$(ab_ratio "${RATE[parley,revoke #$r]}" "${RATE[parley,send #$r]}")
    # A round whose revokes ran out of stored messages (the ids wrap around: a second revoke answers 409) measured
    # something else; it stays in the table but not in the median (the first round of a fresh server, whose sends run
    # on plans made for empty tables, stores too few).
    if [[ ${ERR[revoke #$r]:-0} == 0 ]]; then ratios_revoke+=("$revoke_ratio"); else revoke_ratio="($revoke_ratio, not counted)"; fi
    ROWS+=("| $r | ${RATE[parley,send #$r]} (p99 ${P99[send #$r]}, cpu $(cpu_ms_per_request "send #$r") ms) | ${RATE[parley,revoke #$r]} (p99 ${P99[revoke #$r]}, non-2xx ${ERR[revoke #$r]}, cpu $(cpu_ms_per_request "revoke #$r") ms) | $revoke_ratio | $react | $react_ratio | $(cut -d' ' -f1 /proc/loadavg) |")
    REFS+=("| $r | ${RATE[pgbench,floor #$r]} | $(ab_ratio "${RATE[parley,send #$r]}" "${RATE[pgbench,floor #$r]}") | $(ab_ratio "${RATE[parley,revoke #$r]}" "${RATE[pgbench,floor #$r]}") | ${RATE[pgbench,hot counter #$r]} | $( [[ $react == n/a ]] && echo n/a || ab_ratio "${RATE[parley,react #$r]}" "${RATE[pgbench,hot counter #$r]}") |")
done
reference_tables drop

median() { printf '%s\n' "$@" | tr -d '×' | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] "×" }'; }
text=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M') UTC — message lifecycle: revokes and reactions beside sends"
    echo
    machine_lines
    echo "- parley: release build, embedded PostgreSQL 15, log level error, app rate limit 100000/s; 2000 users, group \`hot\` of 2000 members"
    echo "- load: wrk \`-t$THREADS -c$CONNECTIONS -d$DURATION --latency\` per phase, loopback; each round: sends (bench/lua/send.lua, random peer pairs of u1..u50), then revokes by the app key of the texts stored so far, one message per request (bench/lua/revoke.lua), then reactions on a fresh message of \`hot\`, a new (user, type) pair per request (bench/lua/react.lua)"
    echo
    echo "- before each phase: waits until the machine is ≤ 25% busy (the push bridge plans the sends' events after the send phase); cpu = (Parley + its PostgreSQL) CPU ms per request over the measured run"
    echo
    echo "| round | sends/s | revokes/s | revokes ÷ sends | reactions/s (one message) | reactions ÷ sends | load (1 min) |"
    echo "|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${ROWS[@]}"
    echo
    echo "Physical limits in the same rounds (pgbench, same clients and duration, synchronous_commit=on): the single-row durable INSERT (bench/sql/floor_insert.sql) and the naive hot counter, every client on one row (bench/sql/hot_counter.sql)"
    echo
    echo "| round | floor INSERT tps | sends ÷ floor | revokes ÷ floor | hot counter tps | reactions ÷ hot counter |"
    echo "|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${REFS[@]}"
    echo
    echo "- median ratio: revokes $(median "${ratios_revoke[@]}") of sends over the ${#ratios_revoke[@]} rounds whose revokes all answered 2xx (target ≥ 0.5×: $(met "$(median "${ratios_revoke[@]}" | tr -d '×')" 0.5))"
    if ((${#ratios_react[@]} > 0)); then
        echo "- median ratio: reactions $(median "${ratios_react[@]}") of sends (target ≥ 0.5×: $(met "$(median "${ratios_react[@]}" | tr -d '×')" 0.5))"
    fi
)
record_section "$text"
