#!/usr/bin/env bash
# Idle SSE streams: how much server memory each open user stream costs. Opens BENCH_STREAMS user streams
# (10 per user, the per-user cap) with a Python asyncio client, reads Parley's RSS before and with them open,
# then fan-out: one stream for each member of a BENCH_FANOUT_MEMBERS (1,000) member group, group messages sent one at a
# time (time from each send's response to the last stream receiving it) and at a sustained rate (deliveries per
# second across all streams), with bench/py/sse_fanout.py. Appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_STREAMS=10000, BENCH_FANOUT_MEMBERS=1000,
#              BENCH_FANOUT_MESSAGES=100, BENCH_FANOUT_RATE=20 (messages/s), BENCH_FANOUT_SECONDS=10,
#              BENCH_RESULTS=path, BENCH_NO_RECORD=1, BENCH_NOTE="…"
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
STREAMS=${BENCH_STREAMS:-10000}
PER_USER=10
USERS=$(((STREAMS + PER_USER - 1) / PER_USER))
FANOUT_MEMBERS=${BENCH_FANOUT_MEMBERS:-1000}
FANOUT_MESSAGES=${BENCH_FANOUT_MESSAGES:-100}
FANOUT_RATE=${BENCH_FANOUT_RATE:-20}
FANOUT_SECONDS=${BENCH_FANOUT_SECONDS:-10}
IMPORTED=$((USERS > FANOUT_MEMBERS ? USERS : FANOUT_MEMBERS))
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
command -v python3 >/dev/null || install_package python3
ulimit -n $((STREAMS * 2 + 1024)) 2>/dev/null || ulimit -n "$(ulimit -Hn)"

build_parley
start_parley
import_users "$IMPORTED"
sleep 2
RSS_IDLE=$(rss_kib "$PARLEY_PID" VmRSS)
log "opening $STREAMS streams ($USERS users x $PER_USER)"
STARTED=$SECONDS
python3 "$ROOT/bench/py/sse_clients.py" "$PORT" "$PARLEY_KEY" "$USERS" "$PER_USER" 600 "$TMP/ready" &
CLIENT_PID=$!
PIDS=("$CLIENT_PID" "${PIDS[@]}")
for _ in $(seq 600); do [[ -s $TMP/ready ]] && break; sleep 0.5; done
[[ -s $TMP/ready ]] || die "the streams did not open in time"
OPEN_SECONDS=$((SECONDS - STARTED))
read -r OPENED FAILED _ <"$TMP/ready"
sleep 5  # let the hub settle (presence rows, first heartbeat pass)
RSS_OPEN=$(rss_kib "$PARLEY_PID" VmRSS)
FDS=$(ls "/proc/$PARLEY_PID/fd" | wc -l)
stop_pid "$CLIENT_PID"
PER_STREAM=$(awk -v a="$RSS_IDLE" -v b="$RSS_OPEN" -v n="$OPENED" 'BEGIN { if (n > 0) printf "%.1f", (b - a) / n; else print "n/a" }')
log "opened $OPENED (failed $FAILED) in ${OPEN_SECONDS}s; RSS ${RSS_IDLE} KiB -> ${RSS_OPEN} KiB: ${PER_STREAM} KiB per stream; ${FDS} fds"

sleep 3  # the idle streams' presence settles before the fan-out phase
api -X PATCH "$BASE/v1/settings" -d '{"max_group_members":10000,"user_send_rate_per_s":1000}' >/dev/null
create_group fan "$FANOUT_MEMBERS"
log "fan-out: $FANOUT_MEMBERS streams, $FANOUT_MESSAGES messages one at a time, then $FANOUT_RATE/s for ${FANOUT_SECONDS}s"
FANOUT=$(timeout 600 python3 "$ROOT/bench/py/sse_fanout.py" "$PORT" "$PARLEY_KEY" fan "$FANOUT_MEMBERS" "$FANOUT_MESSAGES" \
    "$FANOUT_RATE" "$FANOUT_SECONDS") || die "the fan-out client failed"
log "fan-out: $FANOUT"
fan() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$FANOUT" "$1"; }

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — SSE user streams: memory per idle stream, fan-out of group messages"
    echo
    machine_lines
    echo "- parley: release build, embedded PostgreSQL 15, log level error; streams opened with the app key, $PER_USER per user (the cap), by bench/py/sse_clients.py (asyncio, one process)"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    echo "| streams asked | open | failed | time to open | RSS before | RSS with them open | per stream | open fds |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
    echo "| $STREAMS | $OPENED | $FAILED | ${OPEN_SECONDS} s | $((RSS_IDLE / 1024)) MiB | $((RSS_OPEN / 1024)) MiB | ${PER_STREAM} KiB | $FDS |"
    echo
    echo "Fan-out to the members of a $FANOUT_MEMBERS-member group, each holding one \`types=message.sent\` user stream (bench/py/sse_fanout.py, one asyncio process on the same machine: its own reading time is part of the figures). Latency = from the send's HTTP response to the last of the $(fan streams) streams receiving the message, over $(fan messages) messages sent one at a time; then $(fan sustained_send_rate) messages/s for ${FANOUT_SECONDS} s:"
    echo
    echo "| streams | closed early | latency p50 | p99 | max | sustained sends | deliveries expected | delivered | deliveries/s |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    echo "| $(fan streams) | $(fan closed_early) | $(fan p50_ms) ms | $(fan p99_ms) ms | $(fan max_ms) ms | $(fan sustained_sent) | $(fan expected) | $(fan delivered) | $(fan deliveries_per_s) |"
)
record_section "$SECTION"
