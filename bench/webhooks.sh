#!/usr/bin/env bash
# Webhooks under the send load (API.md §15), on one server run with a loopback receiver (bench/py/webhook_receiver.py):
#   (a) peer sends/s through POST /v1/messages without webhooks (wrk, bench/lua/send.lua, u1..u50);
#   (b) the same with one endpoint subscribed to `message.*` (created before its round, deleted after it), alternating
#       A/B per round for each connection count; then the queue drains (GET /v1/stats `webhook_pending` = 0) and the
#       receiver's unique webhook-ids are checked against the message.sent events stored in the round, with the lag
#       now_ms - body.created_at (commit to receipt) p50/p99;
#   (c)/(d) at 256 connections, alternating with the no-hook rate: a `message.before_send` hook answering
#       {"action":"allow"} after 1 ms and after 50 ms — only when the server calls that hook on a send (checked with one
#       send first; the hook integration lands separately), otherwise the section says they were not run.
# Per measured run (and per drain) it reads the CPU seconds of Parley, its PostgreSQL processes and the receiver from
# /proc/<pid>/stat, and the machine's busy CPU from /proc/stat (the rest is wrk and other sessions).
# Appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_WH_CONNECTIONS="32 256" (the A/B connection counts),
#              BENCH_HOOK_CONNECTIONS=256, BENCH_DURATION=10s, BENCH_ROUNDS=2, BENCH_THREADS=2, BENCH_RESULTS=path,
#              BENCH_NO_RECORD=1, BENCH_NOTE="…", BENCH_DRAIN_TIMEOUT=180 (s), BENCH_HOOKS=auto|0
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONNECTIONS=32
DURATION=${BENCH_DURATION:-10s}
export BENCH_ROUNDS=${BENCH_ROUNDS:-2}
WH_CONNECTIONS=${BENCH_WH_CONNECTIONS:-32 256}
HOOK_CONNECTIONS=${BENCH_HOOK_CONNECTIONS:-256}
DRAIN_TIMEOUT=${BENCH_DRAIN_TIMEOUT:-180}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
command -v psql >/dev/null || install_package postgresql-client
SECS=$(seconds_of "$DURATION")

build_parley
# The receiver is on loopback: private destinations must be allowed (API.md §15, OutboundPolicy).
export PARLEY_WEBHOOK_ALLOW_PRIVATE=1
start_parley
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

psql_value() { psql -h "$DATA/run" -p 5432 -U parley -d postgres -X -qtA -c "$1"; }
max_event_id() { psql_value "SELECT coalesce(max(id), 0) FROM events"; }

# CPU accounting: bench/lib.sh (cpu_snapshot, measure, cpu_cell) with the receiver as the peer process.
CPU_PEER_PID=$RECV_PID
CPU_PEER_NAME=receiver

webhook_pending() { api "$BASE/v1/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["webhook_pending"])'; }
declare -A DRAIN_S SENT GOT DUP P50L P99L MAXL SUCC HOOKCALLS
drain() {  # key: waits (bounded) for webhook_pending = 0; DRAIN_S[key] seconds after the run, CPU[key, drain]
    local key=$1 start=$SECONDS before pending
    before=$(cpu_snapshot)
    while :; do
        pending=$(webhook_pending)
        ((pending == 0)) && break
        ((SECONDS - start < DRAIN_TIMEOUT)) || { log "  warning: $pending deliveries still pending after ${DRAIN_TIMEOUT}s"; break; }
        sleep 0.5
    done
    DRAIN_S[$key]=$((SECONDS - start))
    CPU[$key, drain]=$(cpu_delta "$before" "$(cpu_snapshot)")
    log "  drained in ~${DRAIN_S[$key]} s (pending $pending); cpu s ${CPU[$key, drain]}"
}

create_endpoint() {  # url types_json: prints the webhook_id
    api -X POST "$BASE/v1/webhooks" -d "{\"url\":\"$1\",\"event_types\":$2}" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["webhook_id"])'
}
delete_endpoint() { api -X DELETE "$BASE/v1/webhooks/$1" >/dev/null; }

# --- (a)/(b): without and with one message.* endpoint, alternating --------------------------------------------------
declare -A AB_ROUNDS
for conns in $WH_CONNECTIONS; do
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        measure "a,$conns #$r" send.lua "$conns"
        receiver_stats reset=1 >/dev/null
        wid=$(create_endpoint "$RECV/wh" '["message.*"]')
        first=$(max_event_id)
        key="b,$conns #$r"
        measure "$key" send.lua "$conns"
        drain "$key"
        last=$(max_event_id)
        SENT[$key]=$(psql_value "SELECT count(*) FROM events WHERE id > $first AND id <= $last AND type = 'message.sent'")
        SUCC[$key]=$(psql_value "SELECT count(*) FROM webhook_deliveries WHERE webhook_id = '$wid' AND status = 'succeeded'")
        stats=$(receiver_stats reset=1)
        GOT[$key]=$(json_field "$stats" unique_ids)
        DUP[$key]=$(json_field "$stats" duplicates)
        P50L[$key]=$(json_field "$stats" p50_ms)
        P99L[$key]=$(json_field "$stats" p99_ms)
        MAXL[$key]=$(json_field "$stats" max_ms)
        delete_endpoint "$wid"
        log "  message.sent stored ${SENT[$key]}, receiver unique ids ${GOT[$key]} (duplicates ${DUP[$key]}), succeeded rows ${SUCC[$key]}; lag p50 ${P50L[$key]} ms p99 ${P99L[$key]} ms max ${MAXL[$key]} ms"
        AB_ROUNDS[$conns]="${AB_ROUNDS[$conns]:-}${AB_ROUNDS[$conns]:+, }$(awk -v b="${RATE[parley,$key]}" -v a="${RATE[parley,a,$conns #$r]}" 'BEGIN { printf "%.2f×", b / a }')"
    done
done

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
    SUMMARY+=("$conns connections: with one message.* endpoint / without = **$rt** (median rates $(printf '%.0f' "$b") / $(printf '%.0f' "$a") req/s; rounds ${AB_ROUNDS[$conns]}); target ≥ 0.8×: $(met "${rt%×}" 0.8)")
    sent=0 got=0 lags=
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        k="b,$conns #$r"
        sent=$((sent + ${SENT[$k]:-0})) got=$((got + ${GOT[$k]:-0}))
        lags="$lags${lags:+, }p50 ${P50L[$k]} / p99 ${P99L[$k]} ms"
    done
    SUMMARY+=("$conns connections: deliveries $got unique webhook-ids received of $sent message.sent stored ($( ((got == sent)) && echo "every one" || echo "**$((sent - got)) missing**")); lag commit → receipt per round: $lags")
done
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
    echo "- parley: release build, embedded PostgreSQL 15, log level error, PARLEY_WEBHOOK_ALLOW_PRIVATE=1; 50 users; one server run"
    echo "- load: wrk \`-t$THREADS -c<conns> -d$DURATION --latency\` with bench/lua/send.lua (peer texts between random u1..u50), 2 s warm-up per run; rounds alternate a (no endpoint) and b (one endpoint, \`event_types: [\"message.*\"]\`, created before its run and deleted after the queue drained), $BENCH_ROUNDS rounds per connection count; rates are the median round"
    echo "- receiver: bench/py/webhook_receiver.py ($(json_field "$RECEIVER_FINAL" loop), stdlib, one process) on 127.0.0.1, 204 at once; lag = receipt time − body \`created_at\` (the event's server time), over every delivery of the round (warm-up, run and drain); the check counts unique \`webhook-id\`s against the message.sent events stored between the endpoint's creation and the drain's end (psql), after \`GET /v1/stats\` \`webhook_pending\` reached 0"
    echo "- cpu: seconds over the measured ${SECS} s of each run (and over the drain), from /proc/<pid>/stat: parley / its PostgreSQL processes / receiver / machine busy of total ($(nproc) CPUs × ${SECS} s; the busy rest is wrk and other sessions)"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    echo "| run | conns | req/s | p50 / p99 | non-2xx | cpu s: parley / pg / receiver / busy of total | message.sent stored | received (unique) | dup | lag p50 / p99 / max | drain | drain cpu s |"
    echo "|---|---:|---:|---|---:|---|---:|---:|---:|---|---:|---|"
    for conns in $WH_CONNECTIONS; do
        for ((r = 1; r <= BENCH_ROUNDS; r++)); do
            k="a,$conns #$r"
            printf '| a #%s no endpoint | %s | %.0f | %s / %s | %s | %s | | | | | | |\n' "$r" "$conns" "${RATE[parley,$k]:-0}" "${P50[$k]:-}" "${P99[$k]:-}" "${ERR[$k]:-}" "$(cpu_cell "$k")"
            k="b,$conns #$r"
            printf '| b #%s message.* endpoint | %s | %.0f | %s / %s | %s | %s | %s | %s | %s | %s / %s / %s ms | %s s | %s |\n' "$r" "$conns" "${RATE[parley,$k]:-0}" "${P50[$k]:-}" "${P99[$k]:-}" "${ERR[$k]:-}" "$(cpu_cell "$k")" \
                "${SENT[$k]}" "${GOT[$k]}" "${DUP[$k]}" "${P50L[$k]}" "${P99L[$k]}" "${MAXL[$k]}" "${DRAIN_S[$k]}" "$(cpu_cell "$k, drain")"
        done
    done
    if [[ $HOOKS == yes ]]; then
        for ((r = 1; r <= BENCH_ROUNDS; r++)); do
            for k in "nohook #$r" "hook 1 ms #$r" "hook 50 ms #$r"; do
                printf '| %s | %s | %.0f | %s / %s | %s | %s | | %s hook calls | | | | |\n' "$k" "$HOOK_CONNECTIONS" "${RATE[parley,$k]:-0}" "${P50[$k]:-}" "${P99[$k]:-}" "${ERR[$k]:-}" "$(cpu_cell "$k")" "${HOOKCALLS[$k]:-}"
            done
        done
    fi
    echo
    for line in "${SUMMARY[@]}"; do echo "- $line"; done
)
record_section "$SECTION"
