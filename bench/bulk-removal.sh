#!/usr/bin/env bash
# Bulk removal beside the senders of the same conversation (docs/jobs.md#removing-a-users-messages): in each of
# BENCH_ROUNDS rounds,
#   1. paced sends u1 -> u2 (bench/lua/paced_send.lua with HOT=1: PACE_RATE/s over BENCH_CONNECTIONS connections) for
#      BENCH_DURATION, alone: the reference send latency;
#   2. 10,000 (BENCH_MESSAGES) messages u1 -> u2 imported with past timestamps, then the same paced sends for the same
#      duration while `POST /v1/moderation/remove_messages` (mode delete, dry_run false) deletes them for everyone:
#      every step of the job locks 500 of those message rows while the sends lock the conversation's sequence head;
#   3. the same import and removal with no sends: its wall time, steps, and CPU (Parley + its PostgreSQL, from /proc)
#      per message removed.
# Target (issue 38): the p99 send latency during the removal < 2× the p99 alone. Appends the figures to
# bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_CONNECTIONS=8, BENCH_DURATION=8s, BENCH_ROUNDS=3,
#              BENCH_MESSAGES=10000, PACE_RATE=200, BENCH_THREADS=2, BENCH_RESULTS=path, BENCH_NO_RECORD=1
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONNECTIONS=${BENCH_CONNECTIONS:-8}
DURATION=${BENCH_DURATION:-8s}
MESSAGES=${BENCH_MESSAGES:-10000}
PACE=${PACE_RATE:-200}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
SECS=$(seconds_of "$DURATION")
now_ms() { date +%s%3N; }

build_parley
start_parley
import_users 50
psql_q() { psql -h "$DATA/run" -p 5432 -U parley -d postgres -Atq -c "$1"; }

BATCH=0
# import_batch: MESSAGES texts u1 -> u2 with timestamps in the past (the sends' are now: the removal never matches them)
import_batch() {
    BATCH=$((BATCH + 1))
    python3 - "$MESSAGES" "$BATCH" >"$TMP/import.ndjson" <<'PY'
import json, sys
n, batch = int(sys.argv[1]), int(sys.argv[2])
for i in range(n):
    print(json.dumps({"conversation_type": "peer", "from": "u1", "to": "u2", "type": 1, "body": {"text": f"spam {i}"},
                      "timestamp": 1_700_000_000_000 + i, "client_msg_id": f"bulk-{batch}-{i}"}))
PY
    curl -fsS -H "Authorization: Bearer $PARLEY_KEY" -H 'Content-Type: application/x-ndjson' --data-binary "@$TMP/import.ndjson" \
        "$BASE/v1/messages/import" >/dev/null
    psql_q "ANALYZE messages" >/dev/null
}

# remove: starts the removal and waits for it; prints "wall_ms done"
remove() {
    local t0 body
    t0=$(now_ms)
    body=$(await_job "$(api -X POST "$BASE/v1/moderation/remove_messages" \
        -d '{"user_id":"u1","from":1700000000000,"to":'"$((1700000000000 + MESSAGES))"',"mode":"delete","dry_run":false}')")
    echo "$(($(now_ms) - t0)) $(python3 -c 'import json,sys; print(json.load(sys.stdin)["result"]["changed"])' <<<"$body")"
}

declare -A WALL REMOVED CPUMS RATIO
ROWS=()
for ((r = 1; r <= ROUNDS; r++)); do
    log "round $r: sends alone"
    wait_quiet
    DURING="" paced "alone #$r"
    log "round $r: $MESSAGES messages removed beside the sends"
    import_batch
    wait_quiet
    DURING=remove paced "during #$r"
    read -r wall changed <"$TMP/during-during #$r"
    ((changed == MESSAGES)) || die "the removal beside the sends changed $changed of $MESSAGES"
    WALL["during #$r"]=$wall
    RATIO[$r]=$(awk -v a="$(to_ms "${P99[alone #$r]}")" -v b="$(to_ms "${P99[during #$r]}")" 'BEGIN { printf "%.2f", (a > 0 ? b / a : 0) }')
    log "round $r: the removal alone"
    import_batch
    wait_quiet
    before=$(cpu_snapshot)
    read -r wall changed <<<"$(remove)"
    read -r p g _ busy total <<<"$(cpu_delta "$before" "$(cpu_snapshot)")"
    WALL["alone #$r"]=$wall
    CPUMS[$r]=$(awk -v p="$p" -v g="$g" -v n="$changed" 'BEGIN { printf "%.3f / %.3f", 1000 * p / n, 1000 * g / n }')
    log "  removal alone: $changed in $wall ms; CPU per message parley / pg: ${CPUMS[$r]} ms (machine busy $busy of $total s)"
    ROWS+=("| $r | ${RATE[parley,alone #$r]} | ${P50[alone #$r]} | ${P99[alone #$r]} | ${P50[during #$r]} | ${P99[during #$r]} | ${RATIO[$r]}× | ${ERR[during #$r]} | ${WALL[during #$r]} | ${WALL[alone #$r]} | ${CPUMS[$r]} |")
done
median_ratio=$(for ((r = 1; r <= ROUNDS; r++)); do echo "${RATIO[$r]}"; done | sort -n | awk -v m=$(((ROUNDS + 1) / 2)) 'NR == m')
steps=$(((MESSAGES + 499) / 500))

section=$(
    echo "## $(date -u +%Y-%m-%d) — bulk removal beside the sends of the same conversation (bench/bulk-removal.sh)"
    echo
    machine_lines
    echo "- load: paced hot sends u1 → u2 (bench/lua/paced_send.lua, HOT=1) at $PACE/s over $CONNECTIONS connections for $DURATION;"
    echo "  during: $MESSAGES imported u1 → u2 messages deleted for everyone by one \`remove_messages\` job ($steps steps of 500,"
    echo "  each its own transaction locking its 500 message rows; the sends lock the conversation's \`conversation_seqs\` row)"
    echo "- target: p99 send latency during the removal < 2× alone — median round $median_ratio×: $(awk -v x="$median_ratio" 'BEGIN { print (x + 0 < 2 ? "met" : "**not met**") }')"
    echo
    echo "| round | sends/s | p50 alone | p99 alone | p50 during | p99 during | p99 ratio | send errors | removal beside sends, ms | removal alone, ms | CPU ms per message removed (parley / pg) |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
)
record_section "$section"
