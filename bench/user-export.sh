#!/usr/bin/env bash
# A user's data export (docs/privacy.md#user-data-export): its throughput, in each of BENCH_ROUNDS rounds,
#   1. `POST /v1/users/u1/export` over BENCH_MESSAGES messages u1 sent (imported once, spread over 20 peers): the job's
#      wall time from the request to `succeeded`, messages per second, and CPU (Parley + its PostgreSQL, from /proc)
#      per message; the archive downloaded and checked (python3 zipfile: every entry's CRC, every message once);
#   2. the physical floor: `cp` of a file of the archive's size (written once, from the page cache) — what copying
#      the bytes alone costs on this machine.
# Appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_ROUNDS=3, BENCH_MESSAGES=50000, BENCH_RESULTS=path,
#              BENCH_NO_RECORD=1
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
MESSAGES=${BENCH_MESSAGES:-50000}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
now_ms() { date +%s%3N; }

build_parley
start_parley
import_users 21

log "importing $MESSAGES messages from u1"
python3 - "$MESSAGES" "$TMP" <<'PY'
import json, sys
n, tmp = int(sys.argv[1]), sys.argv[2]
for part in range(0, n, 10000):
    with open(f"{tmp}/import-{part // 10000}.ndjson", "w") as f:
        for i in range(part, min(n, part + 10000)):
            f.write(json.dumps({"conversation_type": "peer", "from": "u1", "to": f"u{2 + i % 20}", "type": 1,
                                "body": {"text": f"message {i} of the user's history, a sentence of ordinary length"},
                                "timestamp": 1_700_000_000_000 + i, "client_msg_id": f"export-{i}"}) + "\n")
PY
for f in "$TMP"/import-*.ndjson; do
    curl -fsS -H "Authorization: Bearer $PARLEY_KEY" -H 'Content-Type: application/x-ndjson' --data-binary "@$f" \
        "$BASE/v1/messages/import" >/dev/null
done

# export: starts the export and waits for it; prints "wall_ms file_id file_size"
export_user() {
    local t0 body
    t0=$(now_ms)
    body=$(await_job "$(api -X POST "$BASE/v1/users/u1/export")")
    echo "$(($(now_ms) - t0)) $(python3 -c 'import json,sys; r = json.load(sys.stdin)["result"]; print(r["file_id"], r["file_size"])' <<<"$body")"
}

declare -A WALL RATE CPUMS CPMS
ROWS=()
for ((r = 1; r <= ROUNDS; r++)); do
    log "round $r: export"
    wait_quiet
    before=$(cpu_snapshot)
    read -r wall file_id size <<<"$(export_user)"
    read -r p g _ busy total <<<"$(cpu_delta "$before" "$(cpu_snapshot)")"
    WALL[$r]=$wall
    RATE[$r]=$(awk -v n="$MESSAGES" -v w="$wall" 'BEGIN { printf "%.0f", 1000 * n / w }')
    CPUMS[$r]=$(awk -v p="$p" -v g="$g" -v n="$MESSAGES" 'BEGIN { printf "%.3f / %.3f", 1000 * p / n, 1000 * g / n }')
    curl -fsS -H "Authorization: Bearer $PARLEY_KEY" -o "$TMP/export.zip" "$BASE/v1/files/$file_id"
    python3 - "$TMP/export.zip" "$MESSAGES" <<'PY' || die "the archive does not check"
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
assert z.testzip() is None
ids = [json.loads(line)["message_id"] for name in z.namelist() if name.startswith("messages/") for line in z.read(name).splitlines()]
assert len(ids) == int(sys.argv[2]) == len(set(ids)), (len(ids), len(set(ids)))
PY
    log "  $MESSAGES messages in $wall ms (${RATE[$r]}/s), archive $(mib $((size / 1024))); CPU ms per message parley / pg: ${CPUMS[$r]} (machine busy $busy of $total s)"

    log "round $r: cp of $size bytes"
    head -c "$size" /dev/urandom >"$TMP/floor.bin"
    cat "$TMP/floor.bin" >/dev/null
    t0=$(date +%s%N)
    cp "$TMP/floor.bin" "$TMP/floor-copy.bin"
    CPMS[$r]=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e6 }')
    rm -f "$TMP/floor-copy.bin"
    log "  cp: ${CPMS[$r]} ms"
    ROWS+=("| $r | ${WALL[$r]} | ${RATE[$r]} | ${CPUMS[$r]} | $(mib $((size / 1024))) | ${CPMS[$r]} |")
done

section=$(
    echo "## $(date -u +%Y-%m-%d) — a user's data export (bench/user-export.sh)"
    echo
    machine_lines
    echo "- load: \`POST /v1/users/u1/export\` over $MESSAGES messages u1 sent (imported, 20 peers), no files; one \`user_export\`"
    echo "  job: $(((MESSAGES + 1999) / 2000)) message steps of 2,000 (each appends an entry to the archive in the database's chunk"
    echo "  store in its own transaction), then the step that reads the archive back for its SHA-256 and records it"
    echo "- floor: \`cp\` of a file of the archive's size (from the page cache) on the same machine"
    echo
    echo "| round | export wall, ms | messages/s | CPU ms per message (parley / pg) | archive | cp of the same size, ms |"
    echo "|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
)
record_section "$section"
