#!/usr/bin/env bash
# Calls (API.md §13): BENCH_CALLS (2,000) call invitations timing out together. Per round, on one server run with the
# test clock on (PARLEY_TEST_CLOCK=1):
#   - empty advance: POST /v1/test/clock/advance with nothing due (what every other timer kind costs an advance);
#   - for each invitee count of BENCH_CALL_INVITEES (1 3; the order alternates between rounds): BENCH_CALLS general calls,
#     each from its own caller to its own invitees, `timeout_s` BENCH_CALL_TIMEOUT_S (60), created over HTTP
#     (bench/py/call_driver.py, BENCH_CALL_THREADS keep-alive connections), then one advance of BENCH_CALL_ADVANCE_MS
#     (61,000) with the server admin key: the server fires every due timer before it answers (§17). Measured: the
#     advance's duration; `SELECT count(*) FROM calls WHERE state = 'started'` right after it answered (must be 0) and,
#     if not 0, the time until it is; the `call.user_state_changed` and `call.ended` events written (events and
#     pending_events, = BENCH_CALLS each), the calls ended `resolved` and the invitees in `timeout`; CPU seconds of parley
#     and of its PostgreSQL over the advance (/proc, bench/py/cpu_snapshot.py), and all of it per call
#     (target: every call `ended` within 5 s of the advance);
#   - background path (no clock move): BENCH_CALLS one-invitee calls with `timeout_s` BENCH_CALL_BG_TIMEOUT_S (1) created in
#     one burst; polls (psql) until none is `started`; the time from the last call's due time (its created_at + timeout on
#     the server clock, minus the clock's offset) to that moment, and the per-call lag ended_at − due on the server clock
#     (ended_at is the `now` the sweep started with, 4 sweeps/s);
#   - physical limit: pgbench on the same cluster, a durable one-row UPDATE per transaction (-M prepared,
#     synchronous_commit=on, a table of its own: 2,000 rows, random row), BENCH_CALL_PGBENCH_SECONDS (10) s at each client
#     count of BENCH_CALL_PGBENCH_CLIENTS (1 4), for the timer's transactions (200 calls each) and statements per second.
# Then, unless BENCH_CALL_DIAG=0, a diagnostic pass that is not one of the rounds: the server restarted on the same data
# with pg_stat_statements loaded, EXPLAIN (ANALYZE, BUFFERS) of CallStore.due with BENCH_CALLS calls due, and one
# one-invitee advance with the statements' counts and times.
# Appends a section to bench/RESULTS.md.
#
# usage:
#   bench/calls.sh                                            # build release, 3 rounds, append to bench/RESULTS.md
#   BENCH_SKIP_BUILD=1 BENCH_ROUNDS=1 BENCH_CALLS=200 BENCH_CALL_DIAG=0 BENCH_NO_RECORD=1 bench/calls.sh   # smoke run
#
# Environment (defaults): BENCH_CALLS=2000  BENCH_CALL_INVITEES="1 3"  BENCH_ROUNDS=3  BENCH_CALL_THREADS=8
#   BENCH_CALL_TIMEOUT_S=60  BENCH_CALL_ADVANCE_MS=61000  BENCH_CALL_BG=1 (0: no background path)  BENCH_CALL_BG_TIMEOUT_S=1
#   BENCH_CALL_WAIT=60 (s to wait for calls to end, bounds every poll)  BENCH_CALL_PGBENCH_SECONDS=10
#   BENCH_CALL_PGBENCH_CLIENTS="1 4"  BENCH_CALL_DIAG=1
#   BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_RESULTS=path, BENCH_NO_RECORD=1, BENCH_NOTE="…" (as bench/http.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
for arg in "$@"; do
    case $arg in
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $arg (see --help)" >&2; exit 2 ;;
    esac
done
CALLS=${BENCH_CALLS:-2000}
INVITEES=${BENCH_CALL_INVITEES:-1 3}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
THREADS_HTTP=${BENCH_CALL_THREADS:-8}
TIMEOUT_S=${BENCH_CALL_TIMEOUT_S:-60}
ADVANCE_MS=${BENCH_CALL_ADVANCE_MS:-61000}
BG=${BENCH_CALL_BG:-1}
BG_TIMEOUT_S=${BENCH_CALL_BG_TIMEOUT_S:-1}
WAIT=${BENCH_CALL_WAIT:-60}
PGB_SECS=${BENCH_CALL_PGBENCH_SECONDS:-10}
PGB_CLIENTS=${BENCH_CALL_PGBENCH_CLIENTS:-1 4}
DIAG=${BENCH_CALL_DIAG:-1}
TARGET_S=5
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
command -v curl >/dev/null || install_package curl
command -v python3 >/dev/null || install_package python3
require_pgbench
((CALLS >= 1 && BENCH_ROUNDS >= 1)) || die "BENCH_CALLS and BENCH_ROUNDS must be ≥ 1"
((ADVANCE_MS > TIMEOUT_S * 1000)) || die "BENCH_CALL_ADVANCE_MS must pass BENCH_CALL_TIMEOUT_S"
MAX_INV=1
for n in $INVITEES; do ((n >= 1 && n <= 9)) || die "invitee counts are 1..9"; ((n > MAX_INV)) && MAX_INV=$n; done
USERS=$((CALLS * (1 + MAX_INV)))
DRIVER="$ROOT/bench/py/call_driver.py"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# The server: test clock on, an admin key of ours (start_parley reads the app key from the log).
export PARLEY_TEST_CLOCK=1
PARLEY_ADMIN_KEY=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
export PARLEY_ADMIN_KEY
build_parley
start_parley
PSQL=(psql -h "$DATA/run" -p 5432 -U parley -d postgres -X -qtA -v ON_ERROR_STOP=1)
q() { PGOPTIONS="-c client_min_messages=warning" "${PSQL[@]}" -c "$1"; }
admin() { curl -fsS -H "Authorization: Bearer $PARLEY_ADMIN_KEY" -H 'Content-Type: application/json' "$@"; }
server_clock() { admin "$BASE/v1/test/clock" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["now"], d["offset_ms"])'; }
now_s() { date +%s.%N; }
fsub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }
jget() { python3 -c 'import json,sys; v=json.loads(sys.argv[1]); [v := v[k] for k in sys.argv[2:]]; print(json.dumps(v) if isinstance(v,(dict,list)) else v)' "$@"; }
import_users "$USERS"

# Calls still started, and the call events stored so far (events + pending_events).
started() { q "SELECT count(*) FROM calls WHERE state = 'started'"; }
pending() { q "SELECT count(*) FROM pending_events"; }
event_counts() {  # "user_state_changed ended" stored so far, sequenced or not
    q "SELECT count(*) FILTER (WHERE type = 'call.user_state_changed'), count(*) FILTER (WHERE type = 'call.ended')
       FROM (SELECT type FROM events WHERE type IN ('call.user_state_changed', 'call.ended')
             UNION ALL SELECT type FROM pending_events WHERE type IN ('call.user_state_changed', 'call.ended')) e" | tr '|' ' '
}
wait_until_zero() {  # what (started|pending) t0: polls every 0.1 s until 0 (at most $WAIT s); prints "<s since t0> <left>"
    local what=$1 t0=$2 n deadline=$((SECONDS + WAIT))
    while :; do
        n=$($what)
        if ((n == 0)) || ((SECONDS >= deadline)); then echo "$(fsub "$(now_s)" "$t0") $n"; return; fi
        sleep 0.1
    done
}

# --- the physical limit: pgbench, one durable one-row UPDATE per transaction ---------------------------------------
q "DROP TABLE IF EXISTS bench_call_ref; CREATE TABLE bench_call_ref (id int PRIMARY KEY, n bigint NOT NULL);
   INSERT INTO bench_call_ref SELECT g, 0 FROM generate_series(1, 2000) g" >/dev/null
q "VACUUM ANALYZE bench_call_ref" >/dev/null
printf '\\set id random(1, 2000)\nUPDATE bench_call_ref SET n = n + 1 WHERE id = :id;\n' >"$TMP/call_ref_update.sql"
declare -A PGB
pgbench_ref() {  # round: one run per client count into PGB[<round>,<clients>] = "tps latency_ms"
    local r=$1 c out tps lat
    for c in $PGB_CLIENTS; do
        out=$(env PGOPTIONS="-c synchronous_commit=on" timeout $((PGB_SECS + 60)) pgbench -h "$DATA/run" -p 5432 -U parley -n -M prepared \
            -j "$((c < 2 ? 1 : 2))" -c "$c" -T "$PGB_SECS" -f "$TMP/call_ref_update.sql" postgres 2>&1) || { echo "$out" >&2; die "pgbench failed"; }
        grep -qE 'ERROR:|aborted|number of failed transactions: [1-9]' <<<"$out" && { echo "$out" >&2; die "pgbench failed: errors in its output"; }
        tps=$(awk '/^tps = / { printf "%.0f", $3; exit }' <<<"$out")
        lat=$(awk '/^latency average = / { print $4; exit }' <<<"$out")
        PGB[$r,$c]="$tps $lat"
        log "  pgbench one-row durable UPDATE, -c$c -T$PGB_SECS: $tps tps (latency $lat ms)"
    done
}

# --- one test-clock phase: create, advance, check ------------------------------------------------------------------------
declare -A RES  # RES[<key>,<field>]
clock_phase() {  # key invitees
    local key=$1 inv=$2 out adv mark cpu0 cpu1 t0 rest left ended_s ev0 ev1 check
    read -r mark _ <<<"$(server_clock)"
    ev0=$(event_counts)
    log "$key: $CALLS calls × $inv invitee(s), timeout_s $TIMEOUT_S, $THREADS_HTTP connections"
    out=$(timeout 600 python3 "$DRIVER" create "$PORT" "$CALLS" "$inv" "$TIMEOUT_S" "$THREADS_HTTP" 1) \
        || { echo "$out" >&2; die "$key: not every call was created"; }
    RES[$key,create]=$out
    log "  created $(jget "$out" created) in $(jget "$out" seconds) s ($(jget "$out" calls_per_s)/s, POST p50 $(jget "$out" post_p50_ms) / p99 $(jget "$out" post_p99_ms) ms)"
    (($(started) == CALLS)) || die "$key: $(started) calls started, expected $CALLS"
    wait_until_zero pending "$(now_s)" >/dev/null  # call.created / call.invited sequenced before the clock moves
    sleep 1
    cpu0=$(cpu_snapshot)
    adv=$(python3 "$DRIVER" advance "$PORT" "$ADVANCE_MS") || { echo "$adv" >&2; die "$key: the advance failed"; }
    t0=$(jget "$adv" wall_start)
    left=$(started)
    read -r ended_s rest <<<"$(wait_until_zero started "$t0")"
    ((rest == 0)) || log "  warning: $rest calls still started ${WAIT}s after the advance"
    wait_until_zero pending "$t0" >/dev/null
    cpu1=$(cpu_snapshot)
    ev1=$(event_counts)
    check=$(q "SELECT count(*) FILTER (WHERE state = 'ended' AND end_reason = 'resolved'),
                      (SELECT count(*) FROM call_users u JOIN calls c2 USING (app_id, call_id) WHERE c2.created_at >= $mark AND u.state = 'timeout')
               FROM calls c WHERE created_at >= $mark" | tr '|' ' ')
    RES[$key,advance_s]=$(jget "$adv" seconds)
    RES[$key,left]=$left
    RES[$key,ended_s]=$( ((left == 0)) && echo "${RES[$key,advance_s]}" || echo "$ended_s")
    RES[$key,rest]=$rest
    RES[$key,usc]=$(($(cut -d' ' -f1 <<<"$ev1") - $(cut -d' ' -f1 <<<"$ev0")))
    RES[$key,ended_ev]=$(($(cut -d' ' -f2 <<<"$ev1") - $(cut -d' ' -f2 <<<"$ev0")))
    RES[$key,resolved]=$(cut -d' ' -f1 <<<"$check")
    RES[$key,timeouts]=$(cut -d' ' -f2 <<<"$check")
    RES[$key,cpu]=$(cpu_delta "$cpu0" "$cpu1")
    RES[$key,load]=$(cut -d' ' -f1 /proc/loadavg)
    log "  advance ${ADVANCE_MS} ms answered in ${RES[$key,advance_s]} s; started right after: $left; every call ended after ${RES[$key,ended_s]} s; events: call.user_state_changed ${RES[$key,usc]}, call.ended ${RES[$key,ended_ev]}; resolved ${RES[$key,resolved]}, invitees in timeout ${RES[$key,timeouts]}; cpu s (parley pg other-peer busy total): ${RES[$key,cpu]}"
}

# --- the background path: timeout_s 1, no clock move -------------------------------------------------------------------------------
bg_phase() {  # key
    local key=$1 out mark offset cpu0 cpu1 t_end rest firstdue lastdue lag50 lag99 lagmax lastend resolved stats
    read -r mark offset <<<"$(server_clock)"
    log "$key: $CALLS calls × 1 invitee, timeout_s $BG_TIMEOUT_S, in one burst; then the background sweep (4×/s)"
    cpu0=$(cpu_snapshot)
    out=$(timeout 600 python3 "$DRIVER" create "$PORT" "$CALLS" 1 "$BG_TIMEOUT_S" "$THREADS_HTTP" 1) \
        || { echo "$out" >&2; die "$key: not every call was created"; }
    RES[$key,create]=$out
    read -r _ rest <<<"$(wait_until_zero started "$(jget "$out" wall_start)")"
    t_end=$(now_s)
    ((rest == 0)) || log "  warning: $rest calls still started ${WAIT}s after the burst"
    wait_until_zero pending "$t_end" >/dev/null
    cpu1=$(cpu_snapshot)
    # Due times on the server clock → wall clock (offset); ended_at is the now the firing sweep started with.
    stats=$(q "SELECT min(created_at + timeout_s * 1000), max(created_at + timeout_s * 1000),
                      percentile_disc(0.5) WITHIN GROUP (ORDER BY ended_at - created_at - timeout_s * 1000),
                      percentile_disc(0.99) WITHIN GROUP (ORDER BY ended_at - created_at - timeout_s * 1000),
                      max(ended_at - created_at - timeout_s * 1000), max(ended_at), count(*) FILTER (WHERE end_reason = 'resolved')
               FROM calls WHERE created_at >= $mark AND timeout_s = $BG_TIMEOUT_S" | tr '|' ' ')
    read -r firstdue lastdue lag50 lag99 lagmax lastend resolved <<<"$stats"
    RES[$key,spread_s]=$(awk -v a="$firstdue" -v b="$lastdue" 'BEGIN { printf "%.2f", (b - a) / 1000 }')
    RES[$key,due_to_end_s]=$(awk -v e="$t_end" -v d="$lastdue" -v o="$offset" 'BEGIN { printf "%.2f", e - (d - o) / 1000 }')
    RES[$key,due_to_lastend_ms]=$((lastend - lastdue))
    RES[$key,lag]="$lag50 / $lag99 / $lagmax"
    RES[$key,resolved]=$resolved
    RES[$key,rest]=$rest
    RES[$key,cpu]=$(cpu_delta "$cpu0" "$cpu1")
    RES[$key,load]=$(cut -d' ' -f1 /proc/loadavg)
    log "  created in $(jget "$out" seconds) s (due times spread over ${RES[$key,spread_s]} s); last due → none started (poll): ${RES[$key,due_to_end_s]} s; ended_at − due p50/p99/max ${RES[$key,lag]} ms; resolved $resolved; cpu s over burst + sweep: ${RES[$key,cpu]}"
}

# --- idle: what the sweep costs with nothing due ----------------------------------------------------------------------------
sleep 2
cpu0=$(cpu_snapshot)
sleep 5
IDLE_CPU=$(cpu_delta "$cpu0" "$(cpu_snapshot)")
log "idle 5 s (4 sweeps/s, nothing due): cpu s (parley pg other-peer busy total) $IDLE_CPU"

# --- the rounds ------------------------------------------------------------------------------------------------------
read -ra INV_LIST <<<"$INVITEES"
for ((r = 1; r <= BENCH_ROUNDS; r++)); do
    log "round $r of $BENCH_ROUNDS (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    RES[$r,load_start]=$(cut -d' ' -f1-3 /proc/loadavg)
    adv=$(python3 "$DRIVER" advance "$PORT" "$ADVANCE_MS") || die "the empty advance failed"
    RES[$r,empty_s]=$(jget "$adv" seconds)
    log "  empty advance (nothing due): ${RES[$r,empty_s]} s"
    order=("${INV_LIST[@]}")
    if ((r % 2 == 0)); then order=(); for ((i = ${#INV_LIST[@]} - 1; i >= 0; i--)); do order+=("${INV_LIST[$i]}"); done; fi
    for inv in "${order[@]}"; do clock_phase "$r,inv$inv" "$inv"; done
    ((BG == 1)) && bg_phase "$r,bg"
    log "  physical limit"
    pgbench_ref "$r"
done

# --- diagnostics: pg_stat_statements and the due query's plan ---------------------------------------------------------------
if ((DIAG == 1)); then
    log "diagnostic pass: restarting the server with pg_stat_statements"
    restart_with_pg_stat_statements q
    declare -A DIAG_ADV DIAG_CPU DIAG_LEFT PGSS_TOTAL
    for inv in "${INV_LIST[@]}"; do
        log "  $CALLS calls × $inv invitee(s)"
        timeout 600 python3 "$DRIVER" create "$PORT" "$CALLS" "$inv" "$TIMEOUT_S" "$THREADS_HTTP" 1 >/dev/null || die "diagnostic: not every call was created"
        wait_until_zero pending "$(now_s)" >/dev/null
        if [[ $inv == "${INV_LIST[0]}" ]]; then
            read -r now_ms _ <<<"$(server_clock)"
            # CallStore.due as the timer runs it (LIMIT 200), at the time the advance will move to.
            q "EXPLAIN (ANALYZE, BUFFERS, TIMING ON)
               SELECT app_id, call_id FROM (
                   SELECT app_id, call_id, timeout_at AS due FROM call_users WHERE timeout_at <= $((now_ms + ADVANCE_MS))
                   UNION ALL
                   SELECT app_id, call_id, check_at FROM call_users WHERE check_at <= $((now_ms + ADVANCE_MS))
               ) d GROUP BY app_id, call_id ORDER BY min(due), app_id, call_id LIMIT 200" >"$TMP/due_plan.txt"
            log "  EXPLAIN ANALYZE CallStore.due with $CALLS calls due:"
            sed 's/^/    /' "$TMP/due_plan.txt" >&2
            DUE_EXEC=$(awk '/Execution Time/ { print $3 }' "$TMP/due_plan.txt")
        fi
        q "SELECT pg_stat_statements_reset()" >/dev/null
        sleep 1
        cpu0=$(cpu_snapshot)
        adv=$(python3 "$DRIVER" advance "$PORT" "$ADVANCE_MS") || die "diagnostic: the advance failed"
        DIAG_LEFT[$inv]=$(started)
        wait_until_zero started "$(jget "$adv" wall_start)" >/dev/null
        wait_until_zero pending "$(now_s)" >/dev/null
        DIAG_CPU[$inv]=$(cpu_delta "$cpu0" "$(cpu_snapshot)")
        DIAG_ADV[$inv]=$(jget "$adv" seconds)
        log "  advance with pg_stat_statements: ${DIAG_ADV[$inv]} s, started right after ${DIAG_LEFT[$inv]}, cpu ${DIAG_CPU[$inv]}"
        q "SELECT calls, round(total_exec_time::numeric, 1), round((total_exec_time / calls)::numeric, 3), rows,
                  regexp_replace(left(query, 110), '\s+', ' ', 'g')
           FROM pg_stat_statements WHERE query NOT ILIKE '%pg_stat_statements%'
           ORDER BY total_exec_time DESC LIMIT 12" >"$TMP/pgss.$inv.txt"
        PGSS_TOTAL[$inv]=$(q "SELECT round(sum(total_exec_time)::numeric, 1), sum(calls) FROM pg_stat_statements WHERE query NOT ILIKE '%pg_stat_statements%'" | tr '|' ' ')
        log "  pg_stat_statements (calls | total ms | mean ms | rows | query), all statements ${PGSS_TOTAL[$inv]% *} ms in ${PGSS_TOTAL[$inv]#* }:"
        sed 's/^/    /' "$TMP/pgss.$inv.txt" >&2
    done
fi
q "DROP TABLE IF EXISTS bench_call_ref" >/dev/null

# --- summary ---------------------------------------------------------------------------------------------------------
cpu_f() { cut -d' ' -f"$2" <<<"$1"; }
per_call_us() { awk -v s="$1" -v n="$CALLS" 'BEGIN { printf "%.0f", 1e6 * s / n }'; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ROWS=()
declare -A WORST
for inv in "${INV_LIST[@]}"; do WORST[$inv]=0; done
for ((r = 1; r <= BENCH_ROUNDS; r++)); do
    for inv in "${INV_LIST[@]}"; do
        k="$r,inv$inv" c=${RES[$r,inv$inv,cpu]}
        ROWS+=("$(printf '| %s | %s | %s | %s | %s | **%s** | %s | %s | %s / %s | %s / %s | %s / %s | %s µs | %s / %s ms | %s |' \
            "$r" "$inv" "$(jget "${RES[$k,create]}" seconds) s ($(jget "${RES[$k,create]}" calls_per_s)/s)" "${RES[$r,empty_s]} s" \
            "${RES[$k,advance_s]} s" "${RES[$k,ended_s]} s" "${RES[$k,left]}" \
            "$(awk -v s="${RES[$k,ended_s]}" -v n="$CALLS" 'BEGIN { printf "%.0f", n / s }')" \
            "${RES[$k,usc]}" "${RES[$k,ended_ev]}" "${RES[$k,resolved]}" "${RES[$k,timeouts]}" \
            "$(printf '%.2f' "$(cpu_f "$c" 1)")" "$(printf '%.2f' "$(cpu_f "$c" 2)")" "$(per_call_us "${RES[$k,advance_s]}")" \
            "$(awk -v v="$(cpu_f "$c" 1)" -v n="$CALLS" 'BEGIN { printf "%.3f", 1000 * v / n }')" \
            "$(awk -v v="$(cpu_f "$c" 2)" -v n="$CALLS" 'BEGIN { printf "%.3f", 1000 * v / n }')" "${RES[$k,load]}")")
        awk -v a="${RES[$k,ended_s]}" -v b="${WORST[$inv]}" 'BEGIN { exit !(a > b) }' && WORST[$inv]=${RES[$k,ended_s]}
    done
done
PGB_COLS=""
for c in $PGB_CLIENTS; do PGB_COLS+=" -c$c tps (latency ms) |"; done
BG_ROWS=()
if ((BG == 1)); then
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        k="$r,bg" c=${RES[$r,bg,cpu]}
        BG_ROWS+=("$(printf '| %s | %s s (%s/s) | %s s | **%s s** | %s ms | %s ms | %s | %.2f / %.2f | %s |' "$r" \
            "$(jget "${RES[$k,create]}" seconds)" "$(jget "${RES[$k,create]}" calls_per_s)" "${RES[$k,spread_s]}" "${RES[$k,due_to_end_s]}" \
            "${RES[$k,due_to_lastend_ms]}" "${RES[$k,lag]}" "${RES[$k,resolved]}" "$(cpu_f "$c" 1)" "$(cpu_f "$c" 2)" "${RES[$k,load]}")")
    done
fi
VERDICTS=()
for inv in "${INV_LIST[@]}"; do
    VERDICTS+=("$inv invitee(s): slowest round every call ended after **${WORST[$inv]} s**; target < ${TARGET_S} s: $(awk -v w="${WORST[$inv]}" -v t="$TARGET_S" 'BEGIN { if (w < t) printf "met"; else printf "**not met** (%.1f× the target)", w / t }')")
done
# The timer commits one transaction per batch of 200 calls (CallTimers.batchSize): its rate beside pgbench's.
first_c=${PGB_CLIENTS%% *}
pgb_vals=()
for ((r = 1; r <= BENCH_ROUNDS; r++)); do pgb_vals+=("${PGB[$r,$first_c]%% *}"); done
PGB_MED=$(median "${pgb_vals[@]}")
for inv in "${INV_LIST[@]}"; do
    vals=()
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do vals+=("${RES[$r,inv$inv,ended_s]}"); done
    med=$(median "${vals[@]}")
    VERDICTS+=("$inv invitee(s), median round: $(awk -v s="$med" -v n="$CALLS" -v p="$PGB_MED" 'BEGIN { b = int((n + 199) / 200); printf "%.0f calls/s, %d batch transactions of ≤ 200 calls in %.2f s = %.1f transactions/s, %.0f µs a call (pgbench one-row durable UPDATE -c'"$first_c"', median round: %.0f tps, %.0f µs a transaction)", n / s, b, s, b / s, 1e6 * s / n, p, 1e6 / p }')")
done
for v in "${VERDICTS[@]}"; do log "$v"; done

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — Calls: $(python3 -c 'import sys; print(f"{int(sys.argv[1]):,}")' "$CALLS") invitations timing out together"
    echo
    machine_lines
    echo "- load average: $LOAD_START at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end (2 shared vCPUs; other sessions' builds ran at times: read the CPU columns)"
    echo "- parley: release build, embedded PostgreSQL 15, log level error, \`PARLEY_TEST_CLOCK=1\`, app rate limit 100000/s, default pool; $USERS users; one server run for every round"
    echo "- calls: bench/py/call_driver.py (http.client, $THREADS_HTTP keep-alive connections), \`POST /v1/calls\` with the app key, general mode, call i from u<1+i·(1+n)> to the next n users, \`timeout_s\` $TIMEOUT_S; then \`POST /v1/test/clock/advance {\"ms\":$ADVANCE_MS}\` with the admin key (every due timer fires before the answer). \"ended after\" = the advance's duration when \`SELECT count(*) FROM calls WHERE state = 'started'\` was 0 right after it answered, else the time until it was (psql polls every 0.1 s); events counted in events + pending_events"
    echo "- cpu: /proc utime+stime of parley and of its PostgreSQL processes (bench/py/cpu_snapshot.py) from 1 s before the advance to every call ended and pending_events empty (one or two psql look-ups inside); per call = / $CALLS"
    echo "- idle (nothing due, 4 sweeps/s, 5 s): parley $(cpu_f "$IDLE_CPU" 1) s, PostgreSQL $(cpu_f "$IDLE_CPU" 2) s"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    echo "| round | invitees per call | created in | empty advance | advance answered in | every call ended after | started right after | calls/s | call.user_state_changed / call.ended | resolved / invitees in timeout | cpu s parley / pg | advance per call | cpu per call parley / pg | load (1 min) |"
    echo "|---:|---:|---|---:|---:|---:|---:|---:|---|---|---|---:|---|---:|"
    printf '%s\n' "${ROWS[@]}"
    echo
    for v in "${VERDICTS[@]}"; do echo "- $v"; done
    if ((BG == 1)); then
        echo
        echo "Background path (no clock move): $CALLS one-invitee calls with \`timeout_s\` $BG_TIMEOUT_S created in one burst, the timer sweep (every 250 ms) times them out. \"last due → none started\" = when psql (every 0.1 s) first saw no call started, minus the last call's due time (created_at + timeout on the server clock, less the clock's offset); ended_at − due is per call, on the server clock (ended_at = the now the firing sweep started with)."
        echo
        echo "| round | created in | due times spread over | last due → none started | last due → last ended_at | ended_at − due p50 / p99 / max | resolved | cpu s parley / pg (burst + sweep) | load (1 min) |"
        echo "|---:|---|---:|---:|---:|---|---:|---|---:|"
        printf '%s\n' "${BG_ROWS[@]}"
    fi
    echo
    echo "Physical limit, same cluster, in each round after the calls: pgbench \`-M prepared\`, \`synchronous_commit=on\`, \`\\set id random(1, 2000)\` + \`UPDATE bench_call_ref SET n = n + 1 WHERE id = :id\` (one durable one-row UPDATE per transaction), ${PGB_SECS} s each."
    echo
    echo "| round |$PGB_COLS"
    echo "|---:|$(for _ in $PGB_CLIENTS; do printf -- '---:|'; done)"
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        printf '| %s |' "$r"
        for c in $PGB_CLIENTS; do read -r tps lat <<<"${PGB[$r,$c]}"; printf ' %s (%s) |' "$tps" "$lat"; done
        echo
    done
    if ((DIAG == 1)); then
        echo
        echo "Diagnostic pass (not a round): the server restarted on the same data with pg_stat_statements (top-level statements), then per invitee count $CALLS calls and one advance, the statistics reset just before it. CallStore.due with $CALLS calls due (EXPLAIN ANALYZE, LIMIT 200, before the first advance): ${DUE_EXEC:-n/a} ms."
        for inv in "${INV_LIST[@]}"; do
            echo
            echo "$inv invitee(s): advance answered in ${DIAG_ADV[$inv]} s (started right after: ${DIAG_LEFT[$inv]}), cpu s parley $(cpu_f "${DIAG_CPU[$inv]}" 1) / pg $(cpu_f "${DIAG_CPU[$inv]}" 2); all statements together ${PGSS_TOTAL[$inv]% *} ms of execution in ${PGSS_TOTAL[$inv]#* } statements (the background sweep's and the sequencer's included)."
            echo
            echo "| statements | total ms | mean ms | rows | query (first 110 characters) |"
            echo "|---:|---:|---:|---:|---|"
            awk -F'|' '{ q = $5; for (i = 6; i <= NF; i++) q = q "|" $i; gsub(/\|/, "\\|", q); printf "| %s | %s | %s | %s | `%s` |\n", $1, $2, $3, $4, q }' "$TMP/pgss.$inv.txt"
        done
    fi
)
record_section "$SECTION"
