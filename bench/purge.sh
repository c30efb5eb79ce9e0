#!/usr/bin/env bash
# The retention purge (docs/retention.md#runs) beside its floor: in each of BENCH_ROUNDS rounds,
#   1. BENCH_MESSAGES (100,000) messages u1 -> u2..u50 imported with timestamps years in the past, an app policy of one
#      day, then `POST /v1/retention/runs` {"dry_run":false} and the run log polled until the run finished: its wall
#      time and CPU (Parley + its PostgreSQL, from /proc) per message purged;
#   2. the same import, then the floor: `DELETE FROM messages WHERE ctid IN (SELECT ctid … LIMIT 1000)` in a loop,
#      one transaction per batch, in one session (a DO block), over the same rows (no hold check, no files, no run
#      log): its wall time and CPU per message.
# Appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_ROUNDS=2, BENCH_MESSAGES=100000, BENCH_RESULTS=path,
#              BENCH_NO_RECORD=1
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
MESSAGES=${BENCH_MESSAGES:-100000}
BENCH_ROUNDS=${BENCH_ROUNDS:-2}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
now_ms() { date +%s%3N; }

build_parley
start_parley
import_users 50
psql_q() { psql -h "$DATA/run" -p 5432 -U parley -d postgres -Atq -c "$1"; }

BATCH=0
# import_batch: MESSAGES texts from u1 to u2..u50 (49 peer conversations), timestamps from 2023 on
import_batch() {
    BATCH=$((BATCH + 1))
    local done=0 n
    while ((done < MESSAGES)); do
        n=$((MESSAGES - done < 5000 ? MESSAGES - done : 5000))
        python3 - "$done" "$n" "$BATCH" >"$TMP/import.ndjson" <<'PY'
import json, sys
start, n, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for i in range(start, start + n):
    print(json.dumps({"conversation_type": "peer", "from": "u1", "to": f"u{2 + i % 49}", "type": 1, "body": {"text": f"old {i}"},
                      "timestamp": 1_672_531_200_000 + i, "client_msg_id": f"purge-{batch}-{i}"}))
PY
        curl -fsS -H "Authorization: Bearer $PARLEY_KEY" -H 'Content-Type: application/x-ndjson' --data-binary "@$TMP/import.ndjson" \
            "$BASE/v1/messages/import" >/dev/null
        done=$((done + n))
    done
    psql_q "ANALYZE messages" >/dev/null
}

# purge: one real run through the API, waited for; prints "wall_ms purged"
purge() {
    local run id t0 body finished
    t0=$(now_ms)
    run=$(api -X POST "$BASE/v1/retention/runs" -d '{"dry_run":false}')
    id=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])' <<<"$run")
    while :; do
        body=$(api "$BASE/v1/retention/runs?limit=5")
        finished=$(python3 -c 'import json,sys; r=[x for x in json.load(sys.stdin)["items"] if x["run_id"]==sys.argv[1]]; print(r[0]["messages_purged"] if r and r[0]["finished_at"] is not None else "")' "$id" <<<"$body")
        [[ -n $finished ]] && break
        sleep 0.05
    done
    echo "$(($(now_ms) - t0)) $finished"
}

# floor: the plain batched DELETE of the same rows, 1,000 per transaction, in one session (a DO block committing
# after each batch); prints "wall_ms deleted"
floor() {
    local t0 total
    total=$(psql_q "SELECT count(*) FROM messages WHERE timestamp < 1700000000000")
    t0=$(now_ms)
    psql_q "DO \$\$ DECLARE n int; BEGIN LOOP
                DELETE FROM messages WHERE ctid IN (SELECT ctid FROM messages WHERE timestamp < 1700000000000 LIMIT 1000);
                GET DIAGNOSTICS n = ROW_COUNT; COMMIT; EXIT WHEN n < 1000; END LOOP; END \$\$" >/dev/null
    echo "$(($(now_ms) - t0)) $total"
}

api -X POST "$BASE/v1/retention/policies" -d '{"scope":{"type":"app"},"max_age_days":1}' >/dev/null
ROWS=()
for ((r = 1; r <= BENCH_ROUNDS; r++)); do
    log "round $r: $MESSAGES messages purged by a run"
    import_batch
    wait_quiet
    before=$(cpu_snapshot)
    read -r wall purged <<<"$(purge)"
    read -r p g _ busy total <<<"$(cpu_delta "$before" "$(cpu_snapshot)")"
    ((purged == MESSAGES)) || die "the run purged $purged of $MESSAGES"
    run_rate=$(awk -v n="$purged" -v w="$wall" 'BEGIN { printf "%.0f", 1000 * n / w }')
    run_cpu=$(awk -v p="$p" -v g="$g" -v n="$purged" 'BEGIN { printf "%.4f / %.4f", 1000 * p / n, 1000 * g / n }')
    log "  run: $purged in $wall ms ($run_rate/s); CPU ms per message parley / pg: $run_cpu (machine busy $busy of $total s)"
    log "round $r: the floor (plain batched DELETE)"
    import_batch
    wait_quiet
    before=$(cpu_snapshot)
    read -r fwall deleted <<<"$(floor)"
    read -r p g _ busy total <<<"$(cpu_delta "$before" "$(cpu_snapshot)")"
    floor_rate=$(awk -v n="$deleted" -v w="$fwall" 'BEGIN { printf "%.0f", 1000 * n / w }')
    floor_cpu=$(awk -v p="$p" -v g="$g" -v n="$deleted" 'BEGIN { printf "%.4f / %.4f", 1000 * p / n, 1000 * g / n }')
    log "  floor: $deleted in $fwall ms ($floor_rate/s); CPU ms per message parley / pg: $floor_cpu"
    ROWS+=("| $r | $purged | $wall | $run_rate | $run_cpu | $fwall | $floor_rate | $floor_cpu |")
done

section=$(
    echo "## $(date -u +%Y-%m-%d) — retention purge beside a plain batched DELETE (bench/purge.sh)"
    echo
    machine_lines
    echo "- load: $MESSAGES imported messages u1 → u2..u50 older than the app policy (1 day), purged by one real run"
    echo "  (\`POST /v1/retention/runs\`; batches of 1,000, each one statement with the legal-hold test, its own transaction);"
    echo "  floor: \`DELETE FROM messages WHERE ctid IN (SELECT ctid … LIMIT 1000)\` looped in one session (a DO block committing each batch) over the same rows"
    echo
    echo "| round | messages | run, ms | run, messages/s | run CPU ms per message (parley / pg) | floor, ms | floor, messages/s | floor CPU ms per message (parley / pg) |"
    echo "|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
)
record_section "$section"
