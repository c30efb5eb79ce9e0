#!/usr/bin/env bash
# Scheduled messages (docs/scheduled-messages.md): BENCH_MESSAGES (10,000, the per-app limit) scheduled peer messages
# u<i> -> u<i+1> all due in the same second, against the release server. In each of BENCH_ROUNDS rounds:
#   1. the messages are scheduled through POST /v1/messages with `send_at` far ahead (keep-alive, bench/py);
#   2. white box: one UPDATE moves every `send_at` to the same ms, 3 s ahead, so they fall due together;
#   3. the script waits (bounded) until none is left waiting, then reads each message's lateness (its `timestamp`
#      minus `send_at`) from the database, and the CPU Parley and its PostgreSQL spent from /proc.
# Target (issue 39): lateness p99 <= 1 s. Appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_MESSAGES=10000, BENCH_ROUNDS=2, BENCH_RESULTS=path,
#              BENCH_NO_RECORD=1
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
MESSAGES=${BENCH_MESSAGES:-10000}
ROUNDS=${BENCH_ROUNDS:-2}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
now_ms() { date +%s%3N; }

build_parley
start_parley
import_users 100
psql_q() { psql -h "$DATA/run" -p 5432 -U parley -d postgres -Atq -c "$1"; }

# schedule round: MESSAGES sends with send_at one hour ahead, over one keep-alive connection
schedule() {
    python3 - "$PORT" "$PARLEY_KEY" "$MESSAGES" "$1" <<'PY'
import http.client, json, sys, time
port, key, n, rnd = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
send_at = int(time.time() * 1000) + 3_600_000
for i in range(n):
    a, b = 1 + i % 100, 1 + (i + 1) % 100
    body = {"from": f"u{a}", "conversation_type": "peer", "to": f"u{b}", "type": 1, "body": {"text": f"r{rnd} m{i}"}, "send_at": send_at}
    conn.request("POST", "/v1/messages", json.dumps(body), headers)
    r = conn.getresponse()
    data = r.read()
    if r.status != 202:
        sys.exit(f"scheduling {i}: {r.status} {data[:300]!r}")
PY
}

ROWS=()
declare -A P99S
for ((r = 1; r <= ROUNDS; r++)); do
    log "round $r: scheduling $MESSAGES messages"
    t0=$(now_ms)
    schedule "$r"
    log "  scheduled in $(($(now_ms) - t0)) ms"
    wait_quiet
    due=$(($(now_ms) + 3000))
    psql_q "UPDATE scheduled_messages SET send_at = $due WHERE state = 'scheduled'" >/dev/null
    before=$(cpu_snapshot)
    # Bounded: every message is sent (or failed) within 120 s of due, or the round fails.
    left=$MESSAGES
    for ((i = 0; i < 1300; i++)); do
        left=$(psql_q "SELECT count(*) FROM scheduled_messages WHERE state IN ('scheduled', 'sending')")
        ((left == 0)) && break
        sleep 0.1
    done
    ((left == 0)) || die "round $r: $left scheduled messages still waiting 120 s after due"
    read -r p g _ busy total <<<"$(cpu_delta "$before" "$(cpu_snapshot)")"
    read -r sent failed p50 p99 max <<<"$(psql_q "
        SELECT count(*) FILTER (WHERE s.state = 'sent'), count(*) FILTER (WHERE s.state = 'failed'),
               percentile_disc(0.5) WITHIN GROUP (ORDER BY m.timestamp - s.send_at),
               percentile_disc(0.99) WITHIN GROUP (ORDER BY m.timestamp - s.send_at), max(m.timestamp - s.send_at)
        FROM scheduled_messages s LEFT JOIN messages m ON m.app_id = s.app_id AND m.message_id = s.message_id
        WHERE s.send_at = $due" | tr '|' ' ')"
    ((sent == MESSAGES)) || die "round $r: $sent of $MESSAGES sent ($failed failed)"
    cpu=$(awk -v p="$p" -v g="$g" -v n="$sent" 'BEGIN { printf "%.3f / %.3f", 1000 * p / n, 1000 * g / n }')
    log "  round $r: lateness p50 $p50 ms, p99 $p99 ms, max $max ms; CPU per message parley / pg: $cpu ms (busy $busy of $total s)"
    ROWS+=("| $r | $sent | $p50 | $p99 | $max | $cpu |")
    P99S[$r]=$p99
done
worst=$(for ((r = 1; r <= ROUNDS; r++)); do echo "${P99S[$r]}"; done | sort -n | tail -1)

section=$(
    echo "## $(date -u +%Y-%m-%d) — scheduled messages, $MESSAGES due in the same second (bench/scheduled.sh)"
    echo
    machine_lines
    echo "- load: $MESSAGES peer messages among 100 users scheduled with \`send_at\`, then (white box) all moved to the same ms"
    echo "  3 s ahead; lateness = the message's \`timestamp\` − \`send_at\`; CPU from /proc over the sending"
    echo "- target: lateness p99 ≤ 1 s — worst round $worst ms: $(awk -v x="$worst" 'BEGIN { print (x + 0 <= 1000 ? "met" : "**not met**") }')"
    echo
    echo "| round | sent | lateness p50, ms | p99, ms | max, ms | CPU ms per message (parley / pg) |"
    echo "|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
)
record_section "$section"
