#!/usr/bin/env bash
# Rooms under load (API.md §10, §11.1, §14): one room of BENCH_ROOM_MEMBERS (2,000) members, each holding one user stream
# (GET /v1/users/u<i>/events, app key, presence=false), BENCH_ROOM_RATE (200) unstored priority-2 room texts per second
# from u1 for BENCH_ROOM_SECONDS (20) s, open loop (message i due at start + i/rate), while BENCH_ROOM_CHURN (1,000)
# other users, without streams, enter and leave the room (BENCH_ROOM_CHURN_CYCLES (1) enter+leave each, every other
# one entering once more and staying; ops spread evenly over the same seconds, one user's ops in order).
# Measures (targets from the issue):
#   - deliveries: message.sent frames of the bench's messages across all streams, against sends answered 201 × streams
#     (target: every delivery made), duplicates; deliveries/s (first send → last arrival, and per second);
#   - send → last stream latency per message: from just before the POST is written to the read that brought the
#     message to the last of the streams, p50/p99/max (target p99 < 200 ms); send → first stream as well;
#   - churn: enter/leave errors (target: none), and at the end online_count, the room's member_count and the member
#     list against the stream holders plus the churn users the driver's own bookkeeping has in (target: exact);
#     room.member_joined/left frames on the streams against the churn ops answered 200 × streams;
#   - CPU seconds over the load and the drain: parley, its PostgreSQL, the reader, the driver, machine busy of total,
#     and which side was the bottleneck (the reader is one thread: near 1.0 core means the client limited the figures).
# With BENCH_ROOM_GROUP=1 the same run measures a big group's fan-out instead: the members are a group's (created with
# the app key, max_group_members raised to fit), the texts ordinary stored group messages, no churn; the end check is the
# group's member count and member list. `BENCH_ROOM_GROUP=1 BENCH_ROOM_MEMBERS=10000 BENCH_ROOM_RATE=20 bench/rooms.sh`
# is the 10,000-member group at 20 messages/s (target p99 < 200 ms).
# Pieces: bench/rooms_reader.c (the streams: C, epoll, one thread; compiled here with `cc -O2`), bench/py/room_driver.py
# (room setup, paced sends, churn, member checks, the analysis; stdlib asyncio). bench/py/room_fake_server.py is a
# stand-in server to check those two without Parley (see bench/README.md); this script does not use it.
#
# usage:
#   bench/rooms.sh                      # build release, the full run (2,000 streams, 200 msg/s for 20 s, churn 1,000),
#                                       # append to bench/RESULTS.md; about 2 minutes after the build
#   bench/rooms.sh --quick              # small first try: 200 streams, 20 msg/s for 5 s, churn 100; prints, records nothing
#   BENCH_SKIP_BUILD=1 BENCH_ROOM_MEMBERS=500 BENCH_ROOM_RATE=50 BENCH_NO_RECORD=1 bench/rooms.sh
#
# Environment (defaults; --quick changes the first four and BENCH_NO_RECORD, explicit values still win):
#   BENCH_ROOM_MEMBERS=2000 (stream holders u1..uN, the room's permanent members; u1 creates the room and sends)
#   BENCH_ROOM_RATE=200 (messages/s)   BENCH_ROOM_SECONDS=20   BENCH_ROOM_CHURN=1000 (users u<N+1>..u<N+CHURN>, 0: none)
#   BENCH_ROOM_GROUP=0 (1: a group instead of a room, see above; BENCH_ROOM_CHURN then defaults to, and must be, 0)
#   BENCH_ROOM_STALLED=0 (slow consumers: that many of the members' streams, the last ones, stop reading once open,
#       with a 4 KiB receive buffer; the server must cut them and the others must not slow down; Parley's RSS before
#       and after the load is recorded)
#   BENCH_ROOM_CHURN_CYCLES=1          BENCH_ROOM_TEXT_BYTES=64 (text size, "rbm:<i>:" + padding)
#   BENCH_ROOM_TYPES= (the streams' `types` filter; empty = every event, as a client would)
#   BENCH_ROOM_DRAIN_TIMEOUT=60 (s to wait for the last deliveries)   BENCH_ROOM_STALL=5 (s without progress = done)
#   BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_RESULTS=path, BENCH_NO_RECORD=1, BENCH_NOTE="…" (as bench/http.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
QUICK=0
for arg in "$@"; do
    case $arg in
        --quick) QUICK=1 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $arg (see --help)" >&2; exit 2 ;;
    esac
done
if ((QUICK)); then
    MEMBERS=${BENCH_ROOM_MEMBERS:-200} MSG_RATE=${BENCH_ROOM_RATE:-20} RUN_SECS=${BENCH_ROOM_SECONDS:-5} CHURN=${BENCH_ROOM_CHURN:-100}
    export BENCH_NO_RECORD=${BENCH_NO_RECORD:-1}
else
    MEMBERS=${BENCH_ROOM_MEMBERS:-2000} MSG_RATE=${BENCH_ROOM_RATE:-200} RUN_SECS=${BENCH_ROOM_SECONDS:-20} CHURN=${BENCH_ROOM_CHURN:-1000}
fi
GROUP=${BENCH_ROOM_GROUP:-0}
if ((GROUP)); then
    CHURN=${BENCH_ROOM_CHURN:-0}
    ((CHURN == 0)) || { echo "BENCH_ROOM_GROUP=1 runs without churn (BENCH_ROOM_CHURN=0)" >&2; exit 2; }
    export ROOM_DRIVER_GROUP=1
fi
CYCLES=${BENCH_ROOM_CHURN_CYCLES:-1}
STALLED=${BENCH_ROOM_STALLED:-0}
export READER_STALLED=$STALLED
TEXT_BYTES=${BENCH_ROOM_TEXT_BYTES:-64}
TYPES=${BENCH_ROOM_TYPES:-}
DRAIN_TIMEOUT=${BENCH_ROOM_DRAIN_TIMEOUT:-60}
STALL=${BENCH_ROOM_STALL:-5}
ROOM=bench
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
command -v curl >/dev/null || install_package curl
command -v python3 >/dev/null || install_package python3
command -v cc >/dev/null || install_package gcc
((MEMBERS >= 1 && CHURN >= 0 && CYCLES >= 1)) || die "BENCH_ROOM_MEMBERS must be ≥ 1, BENCH_ROOM_CHURN ≥ 0, BENCH_ROOM_CHURN_CYCLES ≥ 1"
MESSAGES=$(awk -v r="$MSG_RATE" -v s="$RUN_SECS" 'BEGIN { printf "%d", r * s + 0.5 }')
((MESSAGES >= 1)) || die "BENCH_ROOM_RATE × BENCH_ROOM_SECONDS must be at least 1 message"
# One socket per stream on each side, the driver's pools, PostgreSQL: raise the descriptor limit before anything starts
# (the server inherits it).
want=$((MEMBERS * 2 + 4096))
if (($(ulimit -n) < want)); then ulimit -n "$want" 2>/dev/null || ulimit -n "$(ulimit -Hn)"; fi
(($(ulimit -n) >= MEMBERS + 1024)) || die "ulimit -n is $(ulimit -n): too low for $MEMBERS streams (raise the hard limit)"

log "compiling bench/rooms_reader.c"
cc -O2 -Wall -o "$TMP/rooms_reader" "$ROOT/bench/rooms_reader.c" || die "could not compile bench/rooms_reader.c"
build_parley
start_parley
import_users $((MEMBERS + CHURN))
declare -A R AN  # the driver's run and the analysis: top-level JSON fields
# shellcheck disable=SC2034 # (into is a nameref: the caller's array)
load_json() {  # array json: the top-level fields into the associative array (null: n/a; objects as compact JSON)
    local -n into=$1
    local k v
    while IFS=$'\t' read -r k v; do into["$k"]=$v; done < <(python3 -c '
import json, sys
for k, v in json.loads(sys.argv[1]).items():
    v = "n/a" if v is None else (json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list)) else v)
    print(f"{k}\t{v}")' "$2")
}
rf() { echo "${R[$1]:-n/a}"; }
af() { echo "${AN[$1]:-n/a}"; }

# --- the room (or group) and its members ------------------------------------------------------------------------------
if ((GROUP)); then
    log "group $ROOM: u1 creates it with u2..u$MEMBERS"
    api -X PATCH "$BASE/v1/settings" -d "{\"max_group_members\":$((MEMBERS > 2000 ? MEMBERS : 2000))}" >/dev/null
    setup_started=$SECONDS
    create_group "$ROOM" "$MEMBERS"
    SETUP="{\"seconds\": $((SECONDS - setup_started))}"
else
    log "room $ROOM: u1 creates it, u2..u$MEMBERS enter"
    SETUP=$(timeout 600 python3 "$ROOT/bench/py/room_driver.py" setup "$PORT" "$ROOM" "$MEMBERS" 2>"$TMP/setup.err") \
        || { cat "$TMP/setup.err" >&2; die "room setup failed (does this build have the room routes of API.md §10?)"; }
    log "  $SETUP"
fi
KIND=$( ((GROUP)) && echo group || echo room)

# --- the streams ----------------------------------------------------------------------------------------------------
QUERY="presence=false${TYPES:+&types=$TYPES}"
log "opening $MEMBERS user streams (/v1/users/u1..u$MEMBERS/events?$QUERY) with bench/rooms_reader.c"
"$TMP/rooms_reader" "$PORT" "$PARLEY_KEY" 1 "$MEMBERS" "$MESSAGES" "$QUERY" "$TMP/ready" "$TMP/progress" "$TMP/reader.result" \
    $((RUN_SECS + DRAIN_TIMEOUT + 900)) >"$TMP/reader.out" 2>&1 &
READER_PID=$!
PIDS=("$READER_PID" "${PIDS[@]}")
STARTED=$SECONDS
for _ in $(seq 1200); do [[ -s $TMP/ready ]] && break; kill -0 "$READER_PID" 2>/dev/null || break; sleep 0.25; done
[[ -s $TMP/ready ]] || { cat "$TMP/reader.out" >&2; die "the streams did not open within 300 s"; }
read -r OPENED FAILED FIRST_FAILURE <"$TMP/ready"
READING=$((OPENED - STALLED))  # the streams expected to receive every message
OPEN_SECONDS=$((SECONDS - STARTED))
log "  open $OPENED, failed $FAILED in ~${OPEN_SECONDS}s$( ((FAILED == 0)) || echo " (first failure: $FIRST_FAILURE)")"
((OPENED == MEMBERS)) || die "only $OPENED of $MEMBERS streams opened: $FIRST_FAILURE"
sleep 2  # the hub settles before the clock starts

# --- the load -------------------------------------------------------------------------------------------------------
CPU_PEER_PID=$READER_PID
CPU_PEER_NAME=reader
progress() { tail -n 1 "$TMP/progress" 2>/dev/null || echo "0 0 0 0 0"; }  # "<ns> <message frames> <member frames> <open> <closed>"
if ((GROUP)); then
    log "load: $MSG_RATE group messages/s from u1 for ${RUN_SECS}s ($MESSAGES messages, stored, ${TEXT_BYTES}-byte texts)"
else
    log "load: $MSG_RATE room messages/s from u1 for ${RUN_SECS}s ($MESSAGES messages, priority 2, unstored, ${TEXT_BYTES}-byte texts); churn: $CHURN users × $CYCLES enter/leave"
fi
CPU_BEFORE=$(cpu_snapshot)
RSS_BEFORE=$(rss_kib "$PARLEY_PID" VmRSS)
T_LOAD=$(date +%s.%N)
RUN=$(timeout $((RUN_SECS + 300)) python3 "$ROOT/bench/py/room_driver.py" run "$PORT" "$ROOM" "$MEMBERS" "$MSG_RATE" "$RUN_SECS" "$CHURN" "$CYCLES" \
    "$TEXT_BYTES" "$TMP/sends" 2>"$TMP/run.err") || { cat "$TMP/run.err" >&2; die "the driver failed"; }
CPU_LOAD=$(cpu_delta "$CPU_BEFORE" "$(cpu_snapshot)")
LOAD_S=$(awk -v a="$T_LOAD" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
echo "$RUN" >"$TMP/run.json"
load_json R "$RUN"

# --- the drain: until every expected frame arrived, or nothing arrives for BENCH_ROOM_STALL s --------------------------
RSS_AFTER=$(rss_kib "$PARLEY_PID" VmRSS)
WANT_MSG=$(($(rf sends_ok) * READING))
WANT_MEMBER=$((($(rf churn_enter_ok) + $(rf churn_leave_ok)) * READING))
drain_start=$SECONDS last_change=$SECONDS prev=
while :; do
    read -r _ got_msg got_member _ _ <<<"$(progress)"
    ((got_msg >= WANT_MSG && got_member >= WANT_MEMBER)) && break
    [[ "$got_msg $got_member" == "$prev" ]] || { prev="$got_msg $got_member"; last_change=$SECONDS; }
    ((SECONDS - last_change < STALL)) || { log "  warning: no new frames for ${STALL}s: $got_msg of $WANT_MSG message frames, $got_member of $WANT_MEMBER member frames"; break; }
    ((SECONDS - drain_start < DRAIN_TIMEOUT)) || { log "  warning: not drained after ${DRAIN_TIMEOUT}s: $got_msg of $WANT_MSG message frames, $got_member of $WANT_MEMBER member frames"; break; }
    sleep 0.5
done
DRAIN_S=$((SECONDS - drain_start))
CPU_ALL=$(cpu_delta "$CPU_BEFORE" "$(cpu_snapshot)")
ALL_S=$(awk -v a="$T_LOAD" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
log "  sends: $(rf sends_ok) of $(rf sends) answered 201 (errors $(rf send_errors)), POST round trip p50 $(rf send_rtt_p50_ms) / p99 $(rf send_rtt_p99_ms) ms, at most $(rf send_late_max_ms) ms behind schedule, $(rf send_connections_peak) connections"
log "  churn: $(rf churn_enter_ok) enters + $(rf churn_leave_ok) leaves of $(rf churn_ops) ops (errors $(rf churn_errors)); members at the end: expected $(rf expected_members) (stream holders $MEMBERS + churn users in $(rf churn_in_room)), online_count $(rf online_count), member_count $(rf member_count), listed $(rf listed) (missing $(rf listed_missing), unexpected $(rf listed_unexpected), duplicates $(rf listed_duplicates))"
(($(rf anomaly_count) == 0)) || log "  warning: $(rf anomaly_count) unexpected answers, e.g. $(rf anomalies)"
stop_pid "$READER_PID"
forget_pid "$READER_PID"
[[ -s $TMP/reader.result ]] || { cat "$TMP/reader.out" >&2; die "the reader wrote no results"; }
A=$(python3 "$ROOT/bench/py/room_driver.py" analyze "$TMP/sends" "$TMP/reader.result" "$TMP/progress" "$TMP/run.json") \
    || die "the analysis failed"
load_json AN "$A"
log "  deliveries: $(af delivered) of $(af expected) (missing $(af missing), duplicates $(af duplicates), $(af incomplete_messages) messages not on every stream; streams closed early $(af closed_early)); $(af deliveries_per_s)/s over $(af span_s) s (offered $(af offered_per_s)/s; per second min $(af per_s_min) / median $(af per_s_median) / max $(af per_s_max)); drained ${DRAIN_S}s after the driver ended"
log "  send → last stream p50 $(af p50_ms) / p99 $(af p99_ms) / max $(af max_ms) ms; send → first stream p50 $(af first_p50_ms) / p99 $(af first_p99_ms) ms"
log "  member frames $(af member_frames) of $(af member_frames_expected) (per stream $(af per_stream_member_min)..$(af per_stream_member_max)); other frames $(af other_frames); message.sent without the marker $(af unmarked)"

# --- CPU: who was the bottleneck --------------------------------------------------------------------------------------
# CPU_* = "parley pg reader busy total" seconds; the driver's own from its getrusage over the load.
cpu_line() {  # deltas seconds: "parley X s (x.xx cores), pg …, reader …, driver …, machine busy B of T s"
    awk -v v="$1" -v s="$2" -v d="$(rf cpu_s)" 'BEGIN { split(v, c, " ");
        printf "parley %.1f s (%.2f cores), its PostgreSQL %.1f s (%.2f), reader %.1f s (%.2f), driver %.1f s, machine busy %.1f of %.1f s (%.0f%%)",
            c[1], c[1] / s, c[2], c[2] / s, c[3], c[3] / s, d, c[4], c[5], (c[5] > 0 ? 100 * c[4] / c[5] : 0) }'
}
BOTTLENECK=$(awk -v v="$CPU_ALL" -v s="$ALL_S" -v d="$(rf cpu_s)" -v n="$(nproc)" 'BEGIN { split(v, c, " ");
    reader = c[3] / s; busy = (c[5] > 0 ? c[4] / c[5] : 0); server = c[1] + c[2]; client = c[3] + d; other = c[4] - server - client;
    if (reader >= 0.9) printf "the reader (one thread) used %.2f of a core: the client side limited these figures", reader;
    else if (busy >= 0.9 && other > server) printf "the machine was CPU-bound (%.0f%% of %d CPUs busy) mostly by other processes (%.1f s, against parley + PostgreSQL %.1f s and the reader + driver %.1f s): these figures say little, run again on a quiet machine", 100 * busy, n, other, server, client;
    else if (busy >= 0.9) printf "the machine was CPU-bound (%.0f%% of %d CPUs busy): parley + PostgreSQL %.1f s against the reader + driver %.1f s (and %.1f s of other processes), so the server side is the bottleneck%s", 100 * busy, n, server, client, (other > 0 ? other : 0), (client > server ? " (though the client took more than the server: read with care)" : "");
    else printf "neither side saturated: the reader used %.2f of a core and the machine was %.0f%% busy; the latencies are the server'"'"'s own pace", reader, 100 * busy }')
log "  cpu over the load (${LOAD_S}s): $(cpu_line "$CPU_LOAD" "$LOAD_S")"
log "  cpu over load + drain (${ALL_S}s): $(cpu_line "$CPU_ALL" "$ALL_S")"
log "  bottleneck: $BOTTLENECK"

# --- verdicts ---------------------------------------------------------------------------------------------------------
yes_no() { if [[ $1 == 1 ]]; then echo met; else echo "**not met**"; fi; }
EVERY=$( [[ $(af missing) == 0 && $(af duplicates) == 0 && $(af closed_early) == 0 && $(rf sends_ok) == "$(rf sends)" && $(af member_frames) == "$(af member_frames_expected)" ]] && echo 1 || echo 0)
P99_OK=$(awk -v p="$(af p99_ms)" -v inc="$(af incomplete_messages)" 'BEGIN { print (p != "n/a" && p + 0 < 200 && inc == 0) ? 1 : 0 }')
CHURN_OK=$( [[ $(rf churn_errors) == "{}" && $(rf members_exact) == True ]] && echo 1 || echo 0)
SUMMARY=(
    "deliveries: $(af delivered) of $(af expected) expected ($(rf sends_ok) messages answered 201 of $(rf sends) × $(af streams) streams): missing $(af missing), duplicates $(af duplicates), streams closed early $(af closed_early), send errors $(rf send_errors); room.member_* frames $(af member_frames) of $(af member_frames_expected); every delivery made: $(yes_no "$EVERY")"
    "deliveries/s: **$(af deliveries_per_s)** (first send → last arrival, $(af span_s) s; offered $(af offered_per_s)/s; per second during the sends min $(af per_s_min) / median $(af per_s_median) / max $(af per_s_max))"
    "send → last stream: p50 **$(af p50_ms) ms**, p99 **$(af p99_ms) ms**, max $(af max_ms) ms over $(af complete_messages) messages (send → first stream p50 $(af first_p50_ms) / p99 $(af first_p99_ms) ms; POST round trip p50 $(rf send_rtt_p50_ms) / p99 $(rf send_rtt_p99_ms) ms); target p99 < 200 ms: $(yes_no "$P99_OK")"
    "$( ((GROUP)) && echo "members at the end: member_count $(rf member_count), member list $(rf listed) (missing $(rf listed_missing), unexpected $(rf listed_unexpected)) of $MEMBERS; exact: $(yes_no "$CHURN_OK")" || echo "churn: $(rf churn_users) users, $(rf churn_enter_ok) enters + $(rf churn_leave_ok) leaves answered 200 of $(rf churn_ops) ops, errors $(rf churn_errors); at the end $(rf expected_members) members expected ($MEMBERS stream holders + $(rf churn_in_room) churn users in by the driver's bookkeeping): online_count $(rf online_count), member_count $(rf member_count), member list $(rf listed) (missing $(rf listed_missing), unexpected $(rf listed_unexpected)); target no error and the count exact: $(yes_no "$CHURN_OK")")"
    "cpu over load + drain (${ALL_S} s): $(cpu_line "$CPU_ALL" "$ALL_S"); bottleneck: $BOTTLENECK"
)
SUMMARY+=("Parley RSS $(mib "$RSS_BEFORE") before the load (streams open), $(mib "$RSS_AFTER") at the end of the sends")
if ((STALLED)); then
    SUMMARY+=("slow consumers: $STALLED of the $OPENED streams stopped reading once open (4 KiB receive buffer): cut by the server $(af stalled_cut), still open at the end $(af stalled_still_open); the other $(af streams) streams are the figures above; every slow consumer cut: $(yes_no "$( [[ $(af stalled_cut) == "$STALLED" ]] && echo 1 || echo 0)")")
fi
for line in "${SUMMARY[@]}"; do log "$line"; done

# --- the physical limit (group runs): the same reader, frames and schedule against a server that only fans out -----
if ((GROUP)); then
    cc -O2 -Wall -o "$TMP/fanout_floor" "$ROOT/bench/fanout_floor.c" || die "could not compile bench/fanout_floor.c"
    FRAME_BYTES=$(awk -v b="$(af bytes)" -v f="$(af message_frames)" -v n="$OPENED" 'BEGIN { printf "%d", (f > 0 ? (b - 30 * n) / f : 700) }')
    FLOOR_PORT=$(free_port)
    log "physical limit: bench/fanout_floor.c (one thread, one write per stream per message, ${FRAME_BYTES}-byte frames as Parley's averaged) to $MEMBERS streams of the same reader"
    "$TMP/fanout_floor" "$FLOOR_PORT" "$MEMBERS" "$MSG_RATE" "$RUN_SECS" "$FRAME_BYTES" "$TMP/floor.sends" >"$TMP/floor.out" 2>&1 &
    FLOOR_PID=$!
    PIDS=("$FLOOR_PID" "${PIDS[@]}")
    sleep 0.3
    READER_STALLED=0 "$TMP/rooms_reader" "$FLOOR_PORT" - 1 "$MEMBERS" "$MESSAGES" - "$TMP/floor.ready" "$TMP/floor.progress" \
        "$TMP/floor.result" $((RUN_SECS + 600)) >"$TMP/floor.reader.out" 2>&1 &
    FLOOR_READER_PID=$!
    PIDS=("$FLOOR_READER_PID" "${PIDS[@]}")
    wait "$FLOOR_PID" || die "the fan-out floor failed: $(cat "$TMP/floor.out")"
    stop_pid "$FLOOR_READER_PID"
    forget_pid "$FLOOR_READER_PID"
    forget_pid "$FLOOR_PID"
    read -r _ FLOOR_SERVER_CPU _ FLOOR_WRITES _ FLOOR_SHORT <"$TMP/floor.out"
    floor_t0=$(head -n 1 "$TMP/floor.sends" | cut -d' ' -f2)
    echo "{\"t0_ns\": $floor_t0, \"t_schedule_end_ns\": $((floor_t0 + RUN_SECS * 1000000000)), \"send_rate\": $MSG_RATE, \"churn_enter_ok\": 0, \"churn_leave_ok\": 0}" >"$TMP/floor.run.json"
    declare -A FL
    load_json FL "$(python3 "$ROOT/bench/py/room_driver.py" analyze "$TMP/floor.sends" "$TMP/floor.result" "$TMP/floor.progress" "$TMP/floor.run.json")"
    fl() { echo "${FL[$1]:-n/a}"; }
    SUMMARY+=("physical limit in the same run (bench/fanout_floor.c: one thread writing ${FRAME_BYTES}-byte frames, one write per stream per message, no database; the same reader): $(fl delivered) of $(fl expected) delivered, $(fl deliveries_per_s)/s; due → last stream p50 $(fl p50_ms) / p99 $(fl p99_ms) / max $(fl max_ms) ms; its CPU $FLOOR_SERVER_CPU s ($(awk -v c="$FLOOR_SERVER_CPU" -v d="$(fl delivered)" 'BEGIN { printf "%.2f", (d > 0 ? c * 1e6 / d : 0) }') µs per delivery; Parley $(awk -v v="$CPU_ALL" -v d="$(af delivered)" 'BEGIN { split(v, c, " "); printf "%.2f", (d > 0 ? c[1] * 1e6 / d : 0) }') µs, its PostgreSQL $(awk -v v="$CPU_ALL" -v d="$(af delivered)" 'BEGIN { split(v, c, " "); printf "%.2f", (d > 0 ? c[2] * 1e6 / d : 0) }') µs), the reader $(fl reader_cpu_s) s; short writes $FLOOR_SHORT of $FLOOR_WRITES")
    log "${SUMMARY[-1]}"
fi

SECTION=$(
    if ((GROUP)); then
        echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — big group: $MEMBERS members with a user stream each, $MSG_RATE stored group messages/s for ${RUN_SECS} s (bench/rooms.sh, BENCH_ROOM_GROUP=1)"
    else
        echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — rooms: $MEMBERS members with a user stream each, $MSG_RATE unstored room messages/s for ${RUN_SECS} s, enter/leave churn of $CHURN users"
    fi
    echo
    machine_lines
    echo "- load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared with other sessions' builds: read the CPU line)"
    if ((GROUP)); then
        echo "- parley: release build, embedded PostgreSQL 15, log level error, app rate limit 100000/s; $MEMBERS users; group \`$ROOM\` created by u1 with u2..u$MEMBERS (up to 499 at creation, the rest invited 100 per call) before the streams opened (setup: $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["seconds"])' "$SETUP") s)"
    else
        echo "- parley: release build, embedded PostgreSQL 15, log level error, app rate limit 100000/s; $((MEMBERS + CHURN)) users; room \`$ROOM\` created by u1, u2..u$MEMBERS entered before the streams opened (setup: $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["seconds"])' "$SETUP") s)"
    fi
    echo "- streams: bench/rooms_reader.c (C, epoll, one thread, same machine), one per member, \`GET /v1/users/u<i>/events?$QUERY\` with the app key; $OPENED opened in ~${OPEN_SECONDS} s; a frame counts by its \`event:\` line, a message by the marker \`rbm:<i>:\` its text starts with; arrival = CLOCK_MONOTONIC after the read that completed the line"
    echo "- sends: bench/py/room_driver.py (asyncio, one process), \`POST /v1/messages\` from u1, \`conversation_type\` $KIND, type 1, ${TEXT_BYTES}-byte text, $( ((GROUP)) && echo "stored (an ordinary group message)" || echo "\`priority\` 2, no \`storage\` (unstored)"), open loop at $MSG_RATE/s for ${RUN_SECS} s on a pool of keep-alive connections (peak $(rf send_connections_peak), at most $(rf send_late_max_ms) ms behind schedule); latency = the last (first) stream's arrival − the moment just before the POST was written, same clock"
    ((CHURN == 0)) || echo "- churn: the same driver, u$((MEMBERS + 1))..u$((MEMBERS + CHURN)) (no streams), each $CYCLES × enter then leave, every other one entering once more and staying, $(rf churn_ops) ops spread evenly over the ${RUN_SECS} s, one user's ops in order (peak $(rf churn_connections_peak) connections); expected members at the end = $MEMBERS + the churn users its 200 answers leave in"
    echo "- cpu: seconds from /proc (parley, its PostgreSQL processes, the reader, machine busy of total, $(nproc) CPUs) and the driver's getrusage, over the load (${LOAD_S} s) and over load + drain (${ALL_S} s, drained ${DRAIN_S} s after the driver's end)"
    [[ -n $TYPES ]] && echo "- the streams filter \`types=$TYPES\`"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    echo "| streams | messages 201 / sent | deliveries expected | delivered | missing / dup | deliveries/s (offered) | per s min / median / max | send → last p50 / p99 / max | send → first p50 / p99 | POST p50 / p99 | churn ops ok / asked | churn errors | members expected / online_count / member_count / listed | cpu s: parley / pg / reader / driver / busy of total |"
    echo "|---:|---|---:|---:|---|---|---|---|---|---|---|---|---|---|"
    printf '| %s | %s / %s | %s | %s | %s / %s | %s (%s) | %s / %s / %s | %s / %s / %s ms | %s / %s ms | %s / %s ms | %s / %s | %s | %s / %s / %s / %s | %s |\n' \
        "$(af streams)" "$(rf sends_ok)" "$(rf sends)" "$(af expected)" "$(af delivered)" "$(af missing)" "$(af duplicates)" \
        "$(af deliveries_per_s)" "$(af offered_per_s)" "$(af per_s_min)" "$(af per_s_median)" "$(af per_s_max)" \
        "$(af p50_ms)" "$(af p99_ms)" "$(af max_ms)" "$(af first_p50_ms)" "$(af first_p99_ms)" "$(rf send_rtt_p50_ms)" "$(rf send_rtt_p99_ms)" \
        "$(($(rf churn_enter_ok) + $(rf churn_leave_ok)))" "$(rf churn_ops)" "$(rf churn_errors)" \
        "$(rf expected_members)" "$(rf online_count)" "$(rf member_count)" "$(rf listed)" \
        "$(awk -v v="$CPU_ALL" -v d="$(rf cpu_s)" 'BEGIN { split(v, c, " "); printf "%.1f / %.1f / %.1f / %.1f / %.1f of %.1f", c[1], c[2], c[3], d, c[4], c[5] }')"
    echo
    for line in "${SUMMARY[@]}"; do echo "- $line"; done
)
record_section "$SECTION"
