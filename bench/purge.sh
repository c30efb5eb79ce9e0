#!/usr/bin/env bash
# A retention purge beside the sends of the same conversation (docs/retention.md#runs), and beside its floor: in each
# of BENCH_ROUNDS rounds,
#   1. paced sends u1 -> u2 (bench/lua/paced_send.lua with HOT=1: PACE_RATE/s over BENCH_CONNECTIONS connections) for
#      BENCH_DURATION, alone: the reference send latency;
#   2. BENCH_MESSAGES (100,000) messages u1 -> u2 imported with timestamps of 2023, then the same paced sends while a
#      real purge run (`POST /v1/retention/runs`, the app policy keeping 365 days) deletes them: each batch of the
#      purge locks the message rows it deletes, the sends lock the conversation's sequence head;
#   3. the same import and the purge with no sends: its wall time and CPU (Parley + its PostgreSQL, from /proc) per
#      message purged;
#   4. the same import and the floor: a plain `DELETE FROM messages WHERE ctid = ANY(ARRAY(SELECT ctid … LIMIT 1000))`
#      loop, one transaction per batch, in one psql session on the server's own PostgreSQL (no hold check, no
#      combine snapshots, no file usage, no run log): its wall time and CPU per message.
# Target: the p99 send latency during the purge < 2× the p99 alone. Appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_CONNECTIONS=8, BENCH_DURATION=8s, BENCH_ROUNDS=3,
#              BENCH_MESSAGES=100000, PACE_RATE=200, BENCH_THREADS=2, BENCH_RESULTS=path, BENCH_NO_RECORD=1
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONNECTIONS=${BENCH_CONNECTIONS:-8}
DURATION=${BENCH_DURATION:-8s}
MESSAGES=${BENCH_MESSAGES:-100000}
PACE=${PACE_RATE:-200}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
require_pgbench
SECS=$(seconds_of "$DURATION")
now_ms() { date +%s%3N; }
OLD=1700000000000  # 2023-11-14: older than the 365 days the policy keeps; the paced sends are stamped now

build_parley
start_parley
import_users 50
psql_q() { psql -h "$DATA/run" -p 5432 -U parley -d postgres -Atq -c "$1"; }
APP_ID=$(psql_q "SELECT app_id FROM app_keys LIMIT 1")
api -X POST "$BASE/v1/retention/policies" -d '{"scope":{"type":"app"},"max_age_days":365}' >/dev/null

BATCH=0
# import_batch: MESSAGES texts u1 -> u2 with timestamps in 2023, 10,000 per request
import_batch() {
    BATCH=$((BATCH + 1))
    local first
    for ((first = 0; first < MESSAGES; first += 10000)); do
        python3 - "$first" "$((first + 10000 < MESSAGES ? first + 10000 : MESSAGES))" "$BATCH" "$OLD" >"$TMP/import.ndjson" <<'PY'
import json, sys
first, end, batch, old = (int(a) for a in sys.argv[1:])
for i in range(first, end):
    print(json.dumps({"conversation_type": "peer", "from": "u1", "to": "u2", "type": 1, "body": {"text": f"old {i}"},
                      "timestamp": old + i, "client_msg_id": f"old-{batch}-{i}"}))
PY
        curl -fsS -H "Authorization: Bearer $PARLEY_KEY" -H 'Content-Type: application/x-ndjson' --data-binary "@$TMP/import.ndjson" \
            "$BASE/v1/messages/import" >/dev/null
    done
    psql_q "ANALYZE messages" >/dev/null
}

# purge: a real run, waited for; prints "wall_ms purged"
purge() {
    local run id body t0
    t0=$(now_ms)
    run=$(api -X POST "$BASE/v1/retention/runs" -d '{"dry_run":false}')
    id=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])' <<<"$run")
    while :; do
        body=$(api "$BASE/v1/retention/runs?limit=100")
        state=$(python3 -c '
import json, sys
run = next((r for r in json.load(sys.stdin)["items"] if r["run_id"] == sys.argv[1]), None)
print("missing" if run is None else ("running" if run["finished_at"] is None else ("failed: " + run["error"] if run["error"] else "done %d" % run["messages_purged"])))' "$id" <<<"$body")
        [[ $state == running ]] || break
        sleep 0.05
    done
    [[ $state == done* ]] || die "purge run $id: $state"
    echo "$(($(now_ms) - t0)) ${state#done }"
}

# floor: the same rows deleted by the plainest loop; prints "wall_ms deleted"
floor() {
    local t0 left
    t0=$(now_ms)
    psql -h "$DATA/run" -p 5432 -U parley -d postgres -Xq -v ON_ERROR_STOP=1 >/dev/null <<SQL
DO \$\$
DECLARE n bigint;
BEGIN
  LOOP
    DELETE FROM messages WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM messages WHERE app_id = '$APP_ID' AND timestamp < $((OLD + MESSAGES)) LIMIT 1000));
    GET DIAGNOSTICS n = ROW_COUNT;
    COMMIT;
    EXIT WHEN n = 0;
  END LOOP;
END
\$\$;
SQL
    left=$(psql_q "SELECT count(*) FROM messages WHERE app_id = '$APP_ID' AND timestamp < $((OLD + MESSAGES))")
    ((left == 0)) || die "the floor left $left rows"
    echo "$(($(now_ms) - t0)) $MESSAGES"
}

# timed name command: runs it alone with the CPU measured; sets WALL[name], CPUMS[name] ("parley / pg" ms per message)
declare -A WALL CPUMS RATIO
timed() {
    local name=$1 before wall count p g busy total
    shift
    before=$(cpu_snapshot)
    read -r wall count <<<"$("$@")"
    read -r p g _ busy total <<<"$(cpu_delta "$before" "$(cpu_snapshot)")"
    ((count == MESSAGES)) || die "$name removed $count of $MESSAGES"
    WALL[$name]=$wall
    CPUMS[$name]=$(awk -v p="$p" -v g="$g" -v n="$count" 'BEGIN { printf "%.3f / %.3f", 1000 * p / n, 1000 * g / n }')
    log "  $name: $count in $wall ms; CPU per message parley / pg: ${CPUMS[$name]} ms (machine busy $busy of $total s)"
}

ROWS=()
for ((r = 1; r <= ROUNDS; r++)); do
    log "round $r: sends alone"
    wait_quiet
    DURING="" paced "alone #$r"
    log "round $r: $MESSAGES messages purged beside the sends"
    import_batch
    wait_quiet
    DURING=purge paced "during #$r"
    read -r wall purged <"$TMP/during-during #$r"
    ((purged == MESSAGES)) || die "the purge beside the sends purged $purged of $MESSAGES"
    WALL["during #$r"]=$wall
    RATIO[$r]=$(awk -v a="$(to_ms "${P99[alone #$r]}")" -v b="$(to_ms "${P99[during #$r]}")" 'BEGIN { printf "%.2f", (a > 0 ? b / a : 0) }')
    log "round $r: the purge alone, then the floor on the same rows"
    import_batch
    wait_quiet
    timed "purge #$r" purge
    import_batch
    wait_quiet
    timed "floor #$r" floor
    ROWS+=("| $r | ${RATE[parley,alone #$r]} | ${P50[alone #$r]} | ${P99[alone #$r]} | ${P50[during #$r]} | ${P99[during #$r]} | ${RATIO[$r]}× | ${ERR[during #$r]} | ${WALL[during #$r]} | ${WALL[purge #$r]} | ${CPUMS[purge #$r]} | ${WALL[floor #$r]} | ${CPUMS[floor #$r]} |")
done
median_ratio=$(for ((r = 1; r <= ROUNDS; r++)); do echo "${RATIO[$r]}"; done | sort -n | awk -v m=$(((ROUNDS + 1) / 2)) 'NR == m')

section=$(
    echo "## $(date -u +%Y-%m-%d) — a retention purge beside the sends of the same conversation, and its floor (bench/purge.sh)"
    echo
    machine_lines
    echo "- load: paced hot sends u1 → u2 (bench/lua/paced_send.lua, HOT=1) at $PACE/s over $CONNECTIONS connections for $DURATION;"
    echo "  during: $MESSAGES imported u1 → u2 messages of 2023 purged by one real run of the app policy (365 days)"
    echo "- floor: the same rows deleted by \`DELETE FROM messages WHERE ctid = ANY(ARRAY(SELECT ctid … LIMIT 1000))\` in a loop,"
    echo "  one transaction per batch, in one psql session (no hold check, no snapshots, no file usage, no run log)"
    echo "- target: p99 send latency during the purge < 2× alone — median round $median_ratio×: $(awk -v x="$median_ratio" 'BEGIN { print (x + 0 < 2 ? "met" : "**not met**") }')"
    echo
    echo "| round | sends/s | p50 alone | p99 alone | p50 during | p99 during | p99 ratio | send errors | purge beside sends, ms | purge alone, ms | CPU ms per message purged (parley / pg) | floor, ms | floor CPU ms per message (psql's backend in pg) |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
)
record_section "$section"
