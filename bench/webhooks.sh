#!/usr/bin/env bash
# Webhooks under the send load (docs/webhooks.md), on one server run with a loopback receiver (bench/py/webhook_receiver.py):
#   (a)/(b) peer sends/s through POST /v1/messages (wrk, bench/lua/send.lua, u1..u50) without and with one endpoint
#       subscribed to `message.*` (created before its run, deleted once its deliveries arrived), alternating a, b per
#       round, BENCH_ROUNDS rounds per connection count; after each b run the script waits until every message.sent
#       event stored in the run has reached the receiver and checks the set of webhook-ids against them (missing,
#       extra, duplicates);
#   (e) a paced phase at BENCH_PACED_SHARE (0.8) of the median no-endpoint rate with the endpoint on
#       (bench/lua/paced_send.lua, BENCH_PACED_CONNECTIONS connections, an open loop while a connection is free):
#       commit → receipt p50/p99/max over every delivery, each delivery checked present exactly once; target p99 < 1 s;
#   (c)/(d) at BENCH_HOOK_CONNECTIONS (256), alternating with the no-hook rate: a `message.before_send` hook answering
#       {"action":"allow"} after 1 ms and after 50 ms.
# "Commit" is the event's `created_at` in the delivery body: the server time the send was taken (its batch commits a
# few ms later), so the lag is an upper bound of commit → receipt; the sends' own latency is beside it (wrk).
# Per measured run it reads the CPU seconds of Parley, its PostgreSQL processes and the receiver from /proc/<pid>/stat,
# and the machine's busy CPU from /proc/stat (the rest is wrk and other sessions), and gives CPU ms per send.
# BENCH_PGSS=1 also loads pg_stat_statements (track = all, so statements inside functions and triggers count) and
# records the statements of the first a and b rounds by total time.
# Appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_WH_CONNECTIONS="32" (the A/B connection counts),
#              BENCH_HOOK_CONNECTIONS=256, BENCH_DURATION=10s, BENCH_ROUNDS=3, BENCH_THREADS=2, BENCH_RESULTS=path,
#              BENCH_NO_RECORD=1, BENCH_NOTE="…", BENCH_DRAIN_TIMEOUT=180 (s), BENCH_HOOKS=auto|0, BENCH_PACED=1|0,
#              BENCH_PACED_SHARE=0.8, BENCH_PACED_DURATION=15s, BENCH_PACED_CONNECTIONS=64, BENCH_PGSS=0|1
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONNECTIONS=32
DURATION=${BENCH_DURATION:-10s}
export BENCH_ROUNDS=${BENCH_ROUNDS:-3}
WH_CONNECTIONS=${BENCH_WH_CONNECTIONS:-32}
HOOK_CONNECTIONS=${BENCH_HOOK_CONNECTIONS:-256}
DRAIN_TIMEOUT=${BENCH_DRAIN_TIMEOUT:-180}
PACED=${BENCH_PACED:-1}
PACED_SHARE=${BENCH_PACED_SHARE:-0.8}
PACED_DURATION=${BENCH_PACED_DURATION:-15s}
PACED_CONNECTIONS=${BENCH_PACED_CONNECTIONS:-64}
PGSS=${BENCH_PGSS:-0}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
command -v psql >/dev/null || install_package postgresql-client
SECS=$(seconds_of "$DURATION")
export BENCH_LUA_DIR="$ROOT/bench/lua" THREADS

build_parley
# The receiver is on loopback: private destinations must be allowed (docs/webhooks.md, OutboundPolicy).
export PARLEY_WEBHOOK_ALLOW_PRIVATE=1
start_parley
psql_value() { psql -h "$DATA/run" -p 5432 -U parley -d postgres -X -qtA -c "$1"; }
if ((PGSS == 1)); then
    log "restarting the server with pg_stat_statements (track = all)"
    restart_with_pg_stat_statements psql_value
    # A setting of the library: known once it is loaded.
    psql_value "ALTER SYSTEM SET pg_stat_statements.track = 'all'" >/dev/null
    psql_value "SELECT pg_reload_conf()" >/dev/null
fi
import_users 50
api -X POST "$BASE/v1/messages" -d '{"from":"u1","conversation_type":"peer","to":"u2","type":1,"body":{"text":"check"}}' \
    | grep -q '"seq":1' || die "the first send did not get seq 1"

# --- the receiver ---------------------------------------------------------------------------------------------------
python3 "$ROOT/bench/py/webhook_receiver.py" --port-file "$TMP/receiver.port" >"$TMP/receiver.out" 2>"$TMP/receiver.err" &
RECV_PID=$!
PIDS=("$RECV_PID" "${PIDS[@]}")
for _ in $(seq 100); do [[ -s $TMP/receiver.port ]] && break; kill -0 "$RECV_PID" 2>/dev/null || break; sleep 0.1; done
[[ -s $TMP/receiver.port ]] || { cat "$TMP/receiver.err" >&2; die "the webhook receiver did not start"; }
RECV_PORT=$(cat "$TMP/receiver.port")
RECV="http://127.0.0.1:$RECV_PORT"
receiver_stats() { curl -fsS --max-time 10 "$RECV/stats${1:+?$1}"; }  # [reset=1]
json_field() { python3 -c 'import json,sys; v = json.loads(sys.argv[1]).get(sys.argv[2]); print("n/a" if v is None else (round(v, 1) if isinstance(v, float) else v))' "$1" "$2"; }
log "receiver on $RECV (pid $RECV_PID)"

max_event_id() { psql_value "SELECT coalesce(max(id), 0) FROM events"; }

# CPU accounting: bench/lib.sh (cpu_snapshot, measure, cpu_cell) with the receiver as the peer process.
CPU_PEER_PID=$RECV_PID
CPU_PEER_NAME=receiver

declare -A DRAIN_S SENT GOT DUP MISSING EXTRA P50L P99L MAXL SUCC HOOKCALLS PGSS_TOP
open_rows() { psql_value "SELECT count(*) FROM webhook_deliveries WHERE webhook_id = '$1' AND status IN ('pending', 'failed')"; }
# key wid first: waits (bounded) until the receiver holds as many unique webhook-ids as message.sent events were stored
# after event id `first` and the endpoint has no open delivery; then checks the ids against the events.
wait_delivered() {
    local key=$1 wid=$2 first=$3 start=$SECONDS before last sent got
    before=$(cpu_snapshot)
    while :; do
        last=$(max_event_id)
        sent=$(psql_value "SELECT count(*) FROM events WHERE id > $first AND id <= $last AND type = 'message.sent'")
        got=$(json_field "$(receiver_stats)" unique_ids)
        ((got >= sent)) && (($(open_rows "$wid") == 0)) && break
        ((SECONDS - start < DRAIN_TIMEOUT)) || { log "  warning: $got of $sent deliveries after ${DRAIN_TIMEOUT}s"; break; }
        sleep 0.5
    done
    DRAIN_S[$key]=$((SECONDS - start))
    CPU[$key, drain]=$(cpu_delta "$before" "$(cpu_snapshot)")
    SENT[$key]=$sent
    psql_value "SELECT id FROM events WHERE id > $first AND id <= $last AND type = 'message.sent'" >"$TMP/expected.ids"
    curl -fsS --max-time 30 "$RECV/ids" >"$TMP/received.ids"
    local missing extra
    read -r missing extra < <(python3 -c 'import sys
expected = set(open(sys.argv[1]).read().split()); received = set(open(sys.argv[2]).read().split())
print(len(expected - received), len(received - expected))' "$TMP/expected.ids" "$TMP/received.ids")
    MISSING[$key]=$missing EXTRA[$key]=$extra
    SUCC[$key]=$(psql_value "SELECT count(*) FROM webhook_deliveries WHERE webhook_id = '$wid' AND status = 'succeeded'")
    local stats
    stats=$(receiver_stats reset=1)
    GOT[$key]=$(json_field "$stats" unique_ids)
    DUP[$key]=$(json_field "$stats" duplicates)
    P50L[$key]=$(json_field "$stats" p50_ms)
    P99L[$key]=$(json_field "$stats" p99_ms)
    MAXL[$key]=$(json_field "$stats" max_ms)
    log "  delivered in ~${DRAIN_S[$key]} s: message.sent stored ${SENT[$key]}, received unique ${GOT[$key]} (missing ${MISSING[$key]}, extra ${EXTRA[$key]}, duplicates ${DUP[$key]}), succeeded rows ${SUCC[$key]}; lag p50 ${P50L[$key]} ms p99 ${P99L[$key]} ms max ${MAXL[$key]} ms"
}

create_endpoint() {  # url types_json: prints the webhook_id
    api -X POST "$BASE/v1/webhooks" -d "{\"url\":\"$1\",\"event_types\":$2}" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["webhook_id"])'
}
delete_endpoint() { api -X DELETE "$BASE/v1/webhooks/$1" >/dev/null; }

pgss_reset() { ((PGSS == 1)) && psql_value "SELECT pg_stat_statements_reset()" >/dev/null || true; }
pgss_top() {  # key: the run's 5 statements with the most total time, and every statement on a webhook table or the
              # outbox trigger's (calls, total ms, ms per call, the query's start)
    ((PGSS == 1)) || return 0
    PGSS_TOP[$1]=$(psql_value "WITH s AS (
            SELECT *, row_number() OVER (ORDER BY total_exec_time DESC) AS rank FROM pg_stat_statements
            WHERE query NOT ILIKE '%pg_stat_statements%' AND dbid = (SELECT oid FROM pg_database WHERE datname = 'postgres'))
        SELECT format('| %s | %s | %s | %s | %s | \`%s\` |', '$1', calls, round(total_exec_time::numeric, 1),
            round((total_exec_time / calls)::numeric, 3), rows, left(regexp_replace(query, '\s+', ' ', 'g'), 110))
        FROM s WHERE rank <= 5 OR query ~* 'webhook|new_events' ORDER BY total_exec_time DESC LIMIT 14")
}
per_send() {  # key: "parley / pg / receiver" CPU ms per send of a measure'd run
    local v=${CPU[$1]:-} rate=${RATE[parley,$1]:-0}
    [[ -n $v ]] || { echo "n/a"; return; }
    awk -v v="$v" -v r="$rate" -v s="$SECS" 'BEGIN { split(v, c, " "); n = r * s; if (n <= 0) { print "n/a"; exit }
        printf "%.3f / %.3f / %.3f", 1000 * c[1] / n, 1000 * c[2] / n, 1000 * c[3] / n }'
}

# --- (a)/(b): without and with one message.* endpoint, alternating --------------------------------------------------
declare -A AB_ROUNDS
for conns in $WH_CONNECTIONS; do
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        pgss_reset
        measure "a,$conns #$r" send.lua "$conns"
        ((r == 1)) && pgss_top "a,$conns #$r"
        receiver_stats reset=1 >/dev/null
        wid=$(create_endpoint "$RECV/wh" '["message.*"]')
        first=$(max_event_id)
        key="b,$conns #$r"
        pgss_reset
        measure "$key" send.lua "$conns"
        ((r == 1)) && pgss_top "$key"
        wait_delivered "$key" "$wid" "$first"
        delete_endpoint "$wid"
        AB_ROUNDS[$conns]="${AB_ROUNDS[$conns]:-}${AB_ROUNDS[$conns]:+, }$(awk -v b="${RATE[parley,$key]}" -v a="${RATE[parley,a,$conns #$r]}" 'BEGIN { printf "%.2f×", b / a }')"
    done
done

# --- (e): paced at a share of the no-endpoint rate, with the endpoint -----------------------------------------------
if ((PACED == 1)); then
    first_conns=${WH_CONNECTIONS%% *}
    PACED_RATE=$(awk -v a="$(median_of "a,$first_conns")" -v s="$PACED_SHARE" 'BEGIN { printf "%d", a * s }')
    receiver_stats reset=1 >/dev/null
    wid=$(create_endpoint "$RECV/wh" '["message.*"]')
    first=$(max_event_id)
    log "paced: $PACED_RATE sends/s offered ($PACED_SHARE × the median no-endpoint rate at $first_conns connections)"
    SAVED_DURATION=$DURATION
    DURATION=$PACED_DURATION SECS=$(seconds_of "$PACED_DURATION")
    export PACE_RATE=$PACED_RATE PACE_THREADS=$THREADS
    measure "paced" paced_send.lua "$PACED_CONNECTIONS"
    wait_delivered "paced" "$wid" "$first"
    PACED_SECS=$SECS
    DURATION=$SAVED_DURATION SECS=$(seconds_of "$SAVED_DURATION")
    delete_endpoint "$wid"
fi

# --- (c)/(d): a message.before_send hook answering in 1 ms and 50 ms ------------------------------------------------
HOOKS=no HOOK_NOTE=
if [[ ${BENCH_HOOKS:-auto} != 0 ]]; then
    if hid=$(create_endpoint "$RECV/hook?delay_ms=1" '["message.before_send"]' 2>"$TMP/hook.err"); then
        before=$(json_field "$(receiver_stats)" hooks)
        api -X POST "$BASE/v1/messages" -d '{"from":"u3","conversation_type":"peer","to":"u4","type":1,"body":{"text":"hook check"}}' >/dev/null
        after=$(json_field "$(receiver_stats)" hooks)
        delete_endpoint "$hid"
        if ((after > before)); then HOOKS=yes; else HOOK_NOTE="the server does not call message.before_send on POST /v1/messages in this build (one send, no hook call)"; fi
    else
        HOOK_NOTE="POST /v1/webhooks with message.before_send failed: $(head -c 300 "$TMP/hook.err")"
    fi
    [[ $HOOKS == yes ]] || log "hooks: not measured: $HOOK_NOTE"
else
    HOOK_NOTE="skipped (BENCH_HOOKS=0)"
fi
if [[ $HOOKS == yes ]]; then
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        measure "nohook #$r" send.lua "$HOOK_CONNECTIONS"
        for delay in 1 50; do
            receiver_stats reset=1 >/dev/null
            hid=$(create_endpoint "$RECV/hook?delay_ms=$delay" '["message.before_send"]')
            measure "hook $delay ms #$r" send.lua "$HOOK_CONNECTIONS"
            HOOKCALLS["hook $delay ms #$r"]=$(json_field "$(receiver_stats reset=1)" hooks)
            delete_endpoint "$hid"
            log "  hook calls received: ${HOOKCALLS[hook $delay ms #$r]}"
        done
    done
fi
RECEIVER_FINAL=$(receiver_stats)

# --- results --------------------------------------------------------------------------------------------------------

SUMMARY=()
for conns in $WH_CONNECTIONS; do
    a=$(median_of "a,$conns") b=$(median_of "b,$conns")
    rt=$(ab_ratio "$b" "$a")
    SUMMARY+=("$conns connections: with one message.* endpoint / without = **$rt** (median rates $(printf '%.0f' "$b") / $(printf '%.0f' "$a") req/s; rounds ${AB_ROUNDS[$conns]}); target ≥ 0.85×: $(met "${rt%×}" 0.85)")
    sent=0 got=0 missing=0 extra=0 dup=0 lags=
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        k="b,$conns #$r"
        sent=$((sent + ${SENT[$k]:-0})) got=$((got + ${GOT[$k]:-0})) missing=$((missing + ${MISSING[$k]:-0}))
        extra=$((extra + ${EXTRA[$k]:-0})) dup=$((dup + ${DUP[$k]:-0}))
        lags="$lags${lags:+, }p50 ${P50L[$k]} / p99 ${P99L[$k]} ms"
    done
    SUMMARY+=("$conns connections: $got unique webhook-ids received of $sent message.sent stored, $missing missing, $extra extra, $dup duplicate requests; lag (saturated runs, every delivery of the round) per round: $lags")
done
if ((PACED == 1)); then
    k=paced
    ok=$([[ ${MISSING[$k]} == 0 && ${EXTRA[$k]} == 0 && ${DUP[$k]} == 0 && ${GOT[$k]} == "${SENT[$k]}" ]] && echo "every delivery exactly once" || echo "**not every delivery exactly once**")
    SUMMARY+=("paced at $PACED_RATE sends/s offered ($PACED_SHARE × $(printf '%.0f' "$(median_of "a,${WH_CONNECTIONS%% *}")")), $(printf '%.0f' "${RATE[parley,$k]}") achieved, with the endpoint: ${GOT[$k]} of ${SENT[$k]} deliveries received, ${MISSING[$k]} missing, ${EXTRA[$k]} extra, ${DUP[$k]} duplicates ($ok); commit → receipt p50 **${P50L[$k]} ms**, p99 **${P99L[$k]} ms**, max ${MAXL[$k]} ms; target p99 < 1000 ms: $(awk -v p="${P99L[$k]}" 'BEGIN { print (p + 0 < 1000 ? "met" : "**not met**") }'); cpu ms per send parley / pg / receiver $(SECS=$PACED_SECS per_send "$k")")
fi
if [[ $HOOKS == yes ]]; then
    n=$(median_of "nohook") c=$(median_of "hook 1 ms") d=$(median_of "hook 50 ms")
    bound=$(awk -v n="$n" 'BEGIN { print (n < 5120 ? n : 5120) }')
    rd=$(ab_ratio "$d" "$bound")
    SUMMARY+=("$HOOK_CONNECTIONS connections: hook 1 ms $(printf '%.0f' "$c") req/s ($(ab_ratio "$c" "$n") of no hook), hook 50 ms $(printf '%.0f' "$d") req/s = **$rd** of min(no hook $(printf '%.0f' "$n"), 5120); target ≥ 0.8×: $(met "${rd%×}" 0.8)")
else
    SUMMARY+=("(c)/(d) message.before_send at 1 ms / 50 ms: **not measured** — $HOOK_NOTE")
fi
for line in "${SUMMARY[@]}"; do log "$line"; done

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — webhooks under the send load: POST /v1/messages with and without a message.* endpoint"
    echo
    machine_lines
    echo "- load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared with other sessions' builds: read the CPU columns)"
    echo "- parley: release build ($SCRATCH/release/parley), embedded PostgreSQL 15, log level error, PARLEY_WEBHOOK_ALLOW_PRIVATE=1; 50 users; one server run$( ((PGSS == 1)) && echo "; pg_stat_statements loaded (track = all)")"
    echo "- load: wrk \`-t$THREADS -c<conns> -d$DURATION --latency\` with bench/lua/send.lua (peer texts between random u1..u50), 2 s warm-up per run; rounds alternate a (no endpoint) and b (one endpoint, \`event_types: [\"message.*\"]\`, created before its run and deleted once its deliveries arrived), $BENCH_ROUNDS rounds per connection count; rates are the median round"
    ((PACED == 1)) && echo "- paced: bench/lua/paced_send.lua, \`-c$PACED_CONNECTIONS -d$PACED_DURATION\`, $PACED_RATE sends/s offered with the endpoint on; lag over every delivery of the phase (warm-up, run and the wait for the last deliveries)"
    echo "- receiver: bench/py/webhook_receiver.py ($(json_field "$RECEIVER_FINAL" loop), one process) on 127.0.0.1, 204 at once; lag = receipt time − body \`created_at\` (the server time the send was taken, a few ms before its batch commits: an upper bound of commit → receipt); the check compares the receiver's unique \`webhook-id\`s with the ids of the message.sent events stored from the endpoint's creation on (missing, extra), and counts repeated requests"
    echo "- cpu: seconds over the measured run (and over the wait for the deliveries), from /proc/<pid>/stat: parley / its PostgreSQL processes / receiver / machine busy of total ($(nproc) CPUs × the run; the busy rest is wrk and other sessions); ms per send = seconds / sends of the run"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    echo "| run | conns | req/s | p50 / p99 | non-2xx | cpu s: parley / pg / receiver / busy of total | cpu ms per send: parley / pg / receiver | message.sent stored | received (unique) | missing / extra / dup | lag p50 / p99 / max | wait | wait cpu s |"
    echo "|---|---:|---:|---|---:|---|---|---:|---:|---|---|---:|---|"
    for conns in $WH_CONNECTIONS; do
        for ((r = 1; r <= BENCH_ROUNDS; r++)); do
            k="a,$conns #$r"
            printf '| a #%s no endpoint | %s | %.0f | %s / %s | %s | %s | %s | | | | | | |\n' "$r" "$conns" "${RATE[parley,$k]:-0}" "${P50[$k]:-}" "${P99[$k]:-}" "${ERR[$k]:-}" "$(cpu_cell "$k")" "$(per_send "$k")"
            k="b,$conns #$r"
            printf '| b #%s message.* endpoint | %s | %.0f | %s / %s | %s | %s | %s | %s | %s | %s / %s / %s | %s / %s / %s ms | %s s | %s |\n' "$r" "$conns" "${RATE[parley,$k]:-0}" "${P50[$k]:-}" "${P99[$k]:-}" "${ERR[$k]:-}" "$(cpu_cell "$k")" "$(per_send "$k")" \
                "${SENT[$k]}" "${GOT[$k]}" "${MISSING[$k]}" "${EXTRA[$k]}" "${DUP[$k]}" "${P50L[$k]}" "${P99L[$k]}" "${MAXL[$k]}" "${DRAIN_S[$k]}" "$(cpu_cell "$k, drain")"
        done
    done
    if ((PACED == 1)); then
        k=paced
        printf '| e paced, message.* endpoint | %s | %.0f | %s / %s | %s | %s | %s | %s | %s | %s / %s / %s | %s / %s / %s ms | %s s | %s |\n' "$PACED_CONNECTIONS" "${RATE[parley,$k]:-0}" "${P50[$k]:-}" "${P99[$k]:-}" "${ERR[$k]:-}" "$(cpu_cell "$k")" "$(SECS=$PACED_SECS per_send "$k")" \
            "${SENT[$k]}" "${GOT[$k]}" "${MISSING[$k]}" "${EXTRA[$k]}" "${DUP[$k]}" "${P50L[$k]}" "${P99L[$k]}" "${MAXL[$k]}" "${DRAIN_S[$k]}" "$(cpu_cell "$k, drain")"
    fi
    if [[ $HOOKS == yes ]]; then
        for ((r = 1; r <= BENCH_ROUNDS; r++)); do
            for k in "nohook #$r" "hook 1 ms #$r" "hook 50 ms #$r"; do
                printf '| %s | %s | %.0f | %s / %s | %s | %s | %s | | %s hook calls | | | | |\n' "$k" "$HOOK_CONNECTIONS" "${RATE[parley,$k]:-0}" "${P50[$k]:-}" "${P99[$k]:-}" "${ERR[$k]:-}" "$(cpu_cell "$k")" "$(per_send "$k")" "${HOOKCALLS[$k]:-}"
            done
        done
    fi
    echo
    for line in "${SUMMARY[@]}"; do echo "- $line"; done
    if ((PGSS == 1)); then
        echo
        echo "pg_stat_statements of the first a and b rounds (the 5 with the most time, and every one on a webhook table; track = all, so the outbox trigger's statement counts where there is one):"
        echo
        echo "| run | calls | total ms | ms per call | rows | statement |"
        echo "|---|---:|---:|---:|---:|---|"
        for conns in $WH_CONNECTIONS; do echo "${PGSS_TOP[a,$conns #1]:-}"; echo "${PGSS_TOP[b,$conns #1]:-}"; done
    fi
)
record_section "$SECTION"
