#!/usr/bin/env bash
# GET history (the 20 newest messages of a peer conversation, as one of its users sees them, app key) with the node's
# history cache on, with it off (PARLEY_HISTORY_CACHE_MB=0, the same binary and data restarted), and pgbench running
# the same SELECT (bench/sql/history.sql, -M prepared) on the same embedded PostgreSQL, alternating, in one run; then,
# cache on, the same reads while a paced sender writes into the same conversations (each send drops its
# conversation's pages). The physical limit of a page served from memory, in the same run: nginx (one process) serving
# one such page, its exact bytes, from a file. CPU of Parley, its PostgreSQL and nginx per request from /proc. Appends
# to bench/RESULTS.md.
#
# Data: users u1..u50, every ordered pair's conversation with BENCH_HISTORY_MESSAGES (25) imported texts.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_CONNECTIONS=32, BENCH_DURATION=10s, BENCH_ROUNDS=3,
#              BENCH_THREADS=2, BENCH_RESULTS=path, BENCH_NO_RECORD=1, BENCH_NOTE="…", BENCH_HISTORY_MESSAGES=25,
#              BENCH_HISTORY_SEND_RATE=200 (sends/s during the mixed phase; 0 skips it)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONNECTIONS=${BENCH_CONNECTIONS:-32}
DURATION=${BENCH_DURATION:-10s}
MESSAGES=${BENCH_HISTORY_MESSAGES:-25}
SEND_RATE=${BENCH_HISTORY_SEND_RATE:-200}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools nginx
require_pgbench
build_parley
start_parley
SECS=$(seconds_of "$DURATION")
BENCH_ROUNDS=$ROUNDS

log "importing 50 users and $MESSAGES messages in each of the 1,225 peer conversations"
import_users 50
python3 - "$MESSAGES" "$TMP/import" <<'PY'
import json, sys
n, out = int(sys.argv[1]), sys.argv[2]
lines = []
for a in range(1, 51):
    for b in range(a + 1, 51):
        for i in range(n):
            f, t = (a, b) if i % 2 == 0 else (b, a)
            lines.append(json.dumps({"conversation_type": "peer", "from": f"u{f}", "to": f"u{t}", "type": 1,
                                     "body": {"text": f"message {i} between u{a} and u{b}"},
                                     "timestamp": 1_700_000_000_000 + i * 1000 + a, "client_msg_id": f"h-{a}-{b}-{i}"}))
for k in range(0, len(lines), 5000):
    with open(f"{out}.{k // 5000:03d}", "w") as fh:
        fh.write("\n".join(lines[k:k + 5000]) + "\n")
PY
for f in "$TMP"/import.*; do
    curl -fsS -H "Authorization: Bearer $PARLEY_KEY" -H 'Content-Type: application/x-ndjson' --data-binary "@$f" \
        "$BASE/v1/messages/import" >/dev/null || die "import failed"
done
api "$BASE/v1/users/u1/conversations/peer/u2/messages?limit=1" | grep -q '"seq":'"$MESSAGES" || die "the import did not land"

restart_parley() {  # cache MiB: the same binary and data, the history cache set to that many MiB
    stop_pid "$PARLEY_PID"
    forget_pid "$PARLEY_PID"
    PARLEY_HISTORY_CACHE_MB=$1 launch_parley
}

cache_figures() {  # "hits misses" from /metrics
    curl -fsS "$BASE/metrics" | awk '$1 == "parley_history_cache_hits_total" { h = $2 } $1 == "parley_history_cache_misses_total" { m = $2 }
        END { print h + 0, m + 0 }'
}

declare -A HITS
for ((r = 1; r <= ROUNDS; r++)); do
    run_pgbench "select #$r" history.sql
    restart_parley 64
    wait_quiet
    before=$(cache_figures)
    measure "cache on #$r" history.lua "$CONNECTIONS"
    HITS["cache on #$r"]=$(awk -v a="$before" -v b="$(cache_figures)" 'BEGIN { split(a, x); split(b, y); h = y[1] - x[1]; m = y[2] - x[2]; printf "%.1f%%", 100 * h / (h + m > 0 ? h + m : 1) }')
    restart_parley 0
    wait_quiet
    measure "cache off #$r" history.lua "$CONNECTIONS"
done

mixed_hits="n/a"
if ((SEND_RATE > 0)); then
    restart_parley 64
    wait_quiet
    # The paced sender: SEND_RATE peer texts per second into random pairs of u1..u50 for the measured run.
    paced_sender() {
        exec timeout $((SECS + 30)) python3 - "$PORT" "$PARLEY_KEY" "$SEND_RATE" "$SECS" <<'PY'
import http.client, json, random, sys, time
port, key, rate, secs = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
c = http.client.HTTPConnection("127.0.0.1", port)
start = time.monotonic()
i = 0
while time.monotonic() - start < secs:
    due = start + i / rate
    now = time.monotonic()
    if due > now:
        time.sleep(due - now)
    a, b = random.sample(range(1, 51), 2)
    body = json.dumps({"from": f"u{a}", "to": f"u{b}", "conversation_type": "peer", "type": 1, "body": {"text": f"live {i}"}})
    c.request("POST", "/v1/messages", body, {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    if r.status >= 300:
        sys.exit(f"send failed: {r.status}")
    i += 1
print(i)
PY
    }
    both_during() { paced_sender >"$TMP/sent" & local s=$!; cpu_window; wait "$s"; }
    CPU_FILE="$TMP/cpu.mixed"
    DURING_WRK["cache on, sends"]=both_during
    before=$(cache_figures)
    run_wrk "cache on, sends" history.lua "$CONNECTIONS"
    CPU["cache on, sends"]=$(cat "$CPU_FILE" 2>/dev/null || true)
    mixed_hits=$(awk -v a="$before" -v b="$(cache_figures)" 'BEGIN { split(a, x); split(b, y); h = y[1] - x[1]; m = y[2] - x[2]; printf "%.1f%%", 100 * h / (h + m > 0 ? h + m : 1) }')
    log "  sends during the run: $(cat "$TMP/sent" 2>/dev/null || echo '?'), hits $mixed_hits"
fi

# The physical limit: nginx, one process (no master), serving one page's bytes from a file, keep-alive, same wrk.
page_bytes="n/a"
nginx_phase() {
    local dir="$TMP/nginx" user_line="" nginx_port
    mkdir -p "$dir/www"
    api "$BASE/v1/users/u1/conversations/peer/u2/messages" >"$dir/www/page.json"
    page_bytes=$(stat -c %s "$dir/www/page.json")
    nginx_port=$(free_port)
    [[ $(id -u) -eq 0 ]] && user_line="user root root;"
    cat >"$dir/nginx.conf" <<CONF
$user_line
worker_processes 1;
master_process off;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $dir/client_body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    server {
        listen 127.0.0.1:$nginx_port;
        root $dir/www;
        location / { default_type application/json; }
    }
}
CONF
    "$NGINX" -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" >"$dir/stdout.log" 2>&1 &
    local nginx_pid=$!
    PIDS=("$nginx_pid" "${PIDS[@]}")
    local tries=0
    until curl -fsS -o /dev/null "http://127.0.0.1:$nginx_port/page.json" 2>/dev/null; do
        ((++tries < 40)) || { cat "$dir/error.log" >&2; die "nginx did not start"; }
        sleep 0.25
    done
    cmp -s <(curl -fsS "http://127.0.0.1:$nginx_port/page.json") "$dir/www/page.json" || die "nginx does not serve the page"
    wait_quiet
    CPU_PEER_PID=$nginx_pid
    local before out
    before=$(cpu_snapshot)
    out=$(timeout $((SECS + 30)) wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -H "Authorization: Bearer $PARLEY_KEY" \
        "http://127.0.0.1:$nginx_port/page.json" 2>&1)
    CPU[nginx]=$(cpu_delta "$before" "$(cpu_snapshot)")
    CPU_PEER_PID=0
    RATE[parley,nginx]=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
    P50[nginx]=$(awk '$1 == "50%" { print $2 }' <<<"$out")
    P99[nginx]=$(awk '$1 == "99%" { print $2 }' <<<"$out")
    ERR[nginx]=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' <<<"$out")
    ERR[nginx]=${ERR[nginx]:-0}
    log "nginx, the page from a file: ${RATE[parley,nginx]} req/s, p50 ${P50[nginx]}, p99 ${P99[nginx]}; cpu ${CPU[nginx]}"
    stop_pid "$nginx_pid"
    forget_pid "$nginx_pid"
}
nginx_phase

median_key() {  # prefix: the key "<prefix> #r" of the median Parley rate
    local r
    for ((r = 1; r <= ROUNDS; r++)); do echo "${RATE[parley,$1 #$r]:-0} $r"; done | sort -g | awk -v m=$(((ROUNDS + 1) / 2)) 'NR == m { print $2 }'
}
cpu_split() {  # key: "parley ms / pg ms" CPU per request
    local v=${CPU[$1]:-} rate=${RATE[parley,$1]:-0}
    [[ -n $v ]] || { echo "n/a"; return; }
    awk -v v="$v" -v r="$rate" -v s="$SECS" 'BEGIN { split(v, c, " "); n = r * s; if (n <= 0) n = 1; printf "%.3f / %.3f", 1000 * c[1] / n, 1000 * c[2] / n }'
}
row() {  # label key hits
    local key=$1 label=$2 hits=$3
    printf '| %s | %.0f | %s / %s | %s | %s | %s |\n' "$label" "${RATE[parley,$key]}" "${P50[$key]}" "${P99[$key]}" "$(cpu_split "$key")" \
        "$hits" "${ERR[$key]}"
}
on=$(median_key "cache on")
off=$(median_key "cache off")
pg_vals=()
for ((r = 1; r <= ROUNDS; r++)); do pg_vals+=("${RATE[pgbench,select #$r]}"); done
pg=$(printf '%s\n' "${pg_vals[@]}" | sort -g | awk -v m=$(((ROUNDS + 1) / 2)) 'NR == m { print }')
every() {  # prefix [parley|pgbench]
    local r out=()
    for ((r = 1; r <= ROUNDS; r++)); do out+=("$(printf '%.0f' "${RATE[${2:-parley},$1 #$r]}")"); done
    local IFS=,
    echo "${out[*]}" | sed 's/,/, /g'
}

section=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — GET history: the history cache on vs off vs pgbench, same SELECT"
    echo
    machine_lines
    echo "- data: users u1..u50, $MESSAGES imported texts in each of the 1,225 peer conversations"
    echo "- read: \`GET /v1/users/u<a>/conversations/peer/u<b>/messages\` (20 newest, app key) of random ordered pairs (bench/lua/history.lua: 2,450 distinct pages); pgbench runs the statement it runs (bench/sql/history.sql, \`-M prepared\`, generic plans as Parley's pool)"
    echo "- load: wrk \`-t$THREADS -c$CONNECTIONS -d$DURATION --latency\` and pgbench \`-j $THREADS -c$CONNECTIONS -T$SECS\`; per round: pgbench, Parley restarted with the cache on (64 MiB), Parley restarted with it off (\`PARLEY_HISTORY_CACHE_MB=0\`); $ROUNDS rounds, the row shows the median round; CPU per request from /proc (Parley's process, its PostgreSQL's processes) over the measured run"
    ((SEND_RATE > 0)) && echo "- mixed: the cache on, the same reads while $SEND_RATE peer sends/s (one Python client, paced) go into random pairs of the same conversations; each send drops its conversation's pages"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    echo "| workload | req/s | p50 / p99 | CPU ms per request, Parley / PostgreSQL | served from the cache | non-2xx |"
    echo "|---|---:|---|---|---:|---:|"
    row "cache on #$on" "history, cache on" "${HITS[cache on #$on]}"
    row "cache off #$off" "history, cache off" "0%"
    ((SEND_RATE > 0)) && row "cache on, sends" "history, cache on, $SEND_RATE sends/s" "$mixed_hits"
    printf '| pgbench, same SELECT | %.0f | %s | | | |\n' "$pg" "${LAT[select #1]}"
    printf '| nginx, one page (%s bytes) from a file | %.0f | %s / %s | %s (nginx) | | %s |\n' "$page_bytes" "${RATE[parley,nginx]}" "${P50[nginx]}" \
        "${P99[nginx]}" "$(awk -v v="${CPU[nginx]}" -v r="${RATE[parley,nginx]}" -v s="$SECS" 'BEGIN { split(v, c, " "); printf "%.3f", 1000 * c[3] / (r * s) }')" "${ERR[nginx]}"
    echo
    echo "- every round, req/s: cache on $(every "cache on"); cache off $(every "cache off"); pgbench $(every select pgbench)"
    echo "- cache on / nginx serving the page: $(ab_ratio "${RATE[parley,cache on #$on]}" "${RATE[parley,nginx]}") of the rate, $(awk -v v="${CPU[nginx]}" -v r="${RATE[parley,nginx]}" -v s="$SECS" -v c="$(cpu_split "cache on #$on")" 'BEGIN { split(v, x, " "); n = 1000 * x[3] / (r * s); split(c, y, " / "); printf "%.1f×", (y[1] + y[2]) / n }') the CPU per request (Parley + PostgreSQL against nginx)"
    echo "- cache on / pgbench: $(ab_ratio "${RATE[parley,cache on #$on]}" "$pg") (target ≥ 3×: $(met "$(awk -v a="${RATE[parley,cache on #$on]}" -v b="$pg" 'BEGIN { print a / b }')" 3)); cache off / pgbench: $(ab_ratio "${RATE[parley,cache off #$off]}" "$pg"); cache on / off: $(ab_ratio "${RATE[parley,cache on #$on]}" "${RATE[parley,cache off #$off]}")"
)
record_section "$section"
