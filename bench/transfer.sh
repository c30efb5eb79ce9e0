#!/usr/bin/env bash
# Message import and export (API.md §11.10, issue 22): a release-build Parley on its embedded PostgreSQL, two users,
# then through HTTP:
#   1. import: BENCH_MESSAGES (1,000,000) text lines of one peer conversation with `parley import` (requests of 10,000
#      lines), target >= 5,000 messages/s;
#   2. export: the same conversation with curl into /dev/null, target >= 20,000 messages/s, with the server's RSS
#      sampled every 0.5 s during it (it must stay flat: the export streams in pages).
# The machine's 2 cores are shared with other work, so the figures are a floor, not a capacity.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_MESSAGES=1000000, BENCH_RESULTS=path, BENCH_NO_RECORD=1
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
MESSAGES=${BENCH_MESSAGES:-1000000}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools

build_parley
start_parley
import_users 2

log "writing $MESSAGES import lines"
python3 - "$MESSAGES" >"$TMP/in.ndjson" <<'EOF'
import json, sys
out = sys.stdout
for i in range(int(sys.argv[1])):
    a, b = ("u1", "u2") if i % 2 == 0 else ("u2", "u1")
    out.write(json.dumps({"conversation_type": "peer", "from": a, "to": b, "type": 1,
                          "body": {"text": f"message {i} of the migrated history, 你好"},
                          "timestamp": 1700000000000 + i, "message_id": f"legacy-{i}"}) + "\n")
EOF

log "importing (parley import)"
started=$(date +%s.%N)
"$SCRATCH/release/parley" import --url "$BASE" --file "$TMP/in.ndjson" 2>"$TMP/import.log" || { tail -n 5 "$TMP/import.log" >&2; die "import failed"; }
import_s=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
import_rate=$(awk -v n="$MESSAGES" -v s="$import_s" 'BEGIN { printf "%d", n / s }')
log "  $MESSAGES in $import_s s: $import_rate messages/s ($(tail -n 1 "$TMP/import.log"))"

# RSS of the server every 0.5 s while the export runs.
(while :; do rss_kib "$PARLEY_PID" VmRSS; sleep 0.5; done) >"$TMP/rss.txt" &
SAMPLER_PID=$!
log "exporting (curl)"
started=$(date +%s.%N)
curl -fsS -H "Authorization: Bearer $PARLEY_KEY" -o "$TMP/out.ndjson" "$BASE/v1/messages/export?conversation_type=peer&user_id=u1&peer_id=u2"
export_s=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
stop_pid "$SAMPLER_PID"
SAMPLER_PID=
lines=$(wc -l <"$TMP/out.ndjson")
[[ $lines == "$MESSAGES" ]] || die "the export has $lines lines, expected $MESSAGES"
export_rate=$(awk -v n="$lines" -v s="$export_s" 'BEGIN { printf "%d", n / s }')
bytes=$(stat -c %s "$TMP/out.ndjson")
read -r rss_first rss_min rss_max rss_last samples < <(awk 'NR == 1 { f = $1; lo = $1; hi = $1 } { if ($1 < lo) lo = $1; if ($1 > hi) hi = $1; l = $1 }
    END { printf "%d %d %d %d %d\n", f, lo, hi, l, NR }' "$TMP/rss.txt")
log "  $lines in $export_s s: $export_rate messages/s; RSS $(mib "$rss_min")–$(mib "$rss_max") over $samples samples"

record_section "## $(date -u '+%Y-%m-%d %H:%M') UTC — message import and export (POST /v1/messages/import, GET /v1/messages/export)

$(machine_lines)
- the machine's 2 cores were shared with other engineers' builds and tests during the run: figures are a floor
- data: one peer conversation, $MESSAGES type-1 lines (~$((bytes / MESSAGES)) B per exported line)

| step | messages | seconds | messages/s | target |
|---|---:|---:|---:|---|
| import, \`parley import\` (10,000 lines per request, 1,000 per statement) | $MESSAGES | $import_s | $import_rate | ≥ 5,000/s: $(met "$import_rate" 5000) |
| export, curl → file | $lines | $export_s | $export_rate | ≥ 20,000/s: $(met "$export_rate" 20000) |

Server RSS during the export ($samples samples, every 0.5 s): first $(mib "$rss_first"), min $(mib "$rss_min"), max $(mib "$rss_max"),
last $(mib "$rss_last")."
