#!/usr/bin/env bash
# Idle SSE streams to the machine's limit (docs/scaling.md#idle-streams-at-scale): one node at 5,000, 10,000 and 19,000
# user streams, then five nodes on one PostgreSQL holding 95,000 together, then a reconnect storm of all of them.
# Each part runs on a fresh scripts/cluster.sh cluster (its own PostgreSQL; the clients connect to the nodes directly,
# nginx is idle) with bench/py/sse_scale.py driving bench/py/sse_scale_client.py processes (asyncio, each under the
# 20,000 open files cap, from loopback source addresses 127.0.<client>.<1-250>). Figures per step: Parley's RSS per
# stream, the kernel's TCP memory, CPU of the nodes / PostgreSQL / the clients at idle (heartbeats only, plus a probe of
# 20 requests/s), time to accept the streams, presence writes per stream open, /readyz and the probe's p99. The storm:
# every client process ends at once, new ones reconnect every stream with its Last-Event-ID while sends go on, and every
# stream's events are compared with its user's log. Appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_SSE_STEPS=5000,10000,19000, BENCH_SSE_NODES=5,
#              BENCH_SSE_STREAMS=95000 (over all nodes), BENCH_SSE_CLIENTS=5, BENCH_SSE_WINDOW=30 (idle seconds per
#              step), BENCH_SSE_PARTS="steps cluster", BENCH_RESULTS=path, BENCH_NO_RECORD=1, BENCH_NOTE="…"
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
STEPS=${BENCH_SSE_STEPS:-5000,10000,19000}
NODES=${BENCH_SSE_NODES:-5}
TOTAL=${BENCH_SSE_STREAMS:-95000}
CLIENTS=${BENCH_SSE_CLIENTS:-5}
PARTS=${BENCH_SSE_PARTS:-steps cluster}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
cluster_bench_setup
: >"$TMP/steps.jsonl"
: >"$TMP/cluster.jsonl"
for part in $PARTS; do
    CLUSTER_DIR=$TMP/cluster-$part
    nodes=1
    [[ $part == cluster ]] && nodes=$NODES
    CLUSTER_LOG_LEVEL=error bash scripts/cluster.sh up "$nodes" 2>/dev/null
    wait_quiet
    if [[ $part == steps ]]; then
        log "one node: streams up to $STEPS"
        timeout 3600 python3 bench/py/sse_scale.py "$CLUSTER_DIR" steps "$STEPS" | tee "$TMP/steps.jsonl" >&2 \
            || die "the one-node steps failed"
    else
        log "$nodes nodes: $TOTAL streams from $CLIENTS client processes, then the reconnect storm"
        timeout 3600 python3 bench/py/sse_scale.py "$CLUSTER_DIR" cluster "$TOTAL" "$CLIENTS" | tee "$TMP/cluster.jsonl" >&2 \
            || die "the cluster part failed"
    fi
    bash scripts/cluster.sh down 2>/dev/null
    CLUSTER_DIR=
done

table() {  # jsonl files: one row per step
    python3 - "$@" <<'EOF'
import json, sys
print("| nodes | streams | accepted in | retried / failed | Parley RSS | per stream (over the RSS before any stream / over the previous step) | TCP sockets | kernel TCP buffers | kernel slab per stream (both ends) | CPU idle: nodes / PG / clients | writes per stream open: rows / WAL bytes / WAL flushes | /readyz | probe p50 / p99 / max (failed) |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---|")
for path in sys.argv[1:]:
    previous = None
    for line in open(path):
        r = json.loads(line)
        if "rss_mib" not in r:
            continue
        marginal = "–"
        if previous and r["streams"] > previous["streams"]:
            marginal = f"{(r['rss_mib'] - previous['rss_mib']) * 1024 / (r['streams'] - previous['streams']):.2f} KiB"
        previous = r
        print(f"| {r['nodes']} | {r['streams']:,} | {r['open_seconds']} s ({r.get('step_streams', r['streams']):,} new) | {r['retried']} / {r['failed']} "
              f"| {r['rss_mib']} MiB | {r['rss_per_stream_kib']} KiB / {marginal} | {r['tcp_inuse']:,} | {r['tcp_mem_mib']} MiB | {r['slab_per_stream_kib']} KiB "
              f"| {r['cpu_nodes_pct']} % / {r['cpu_pg_pct']} % / {r['cpu_clients_pct']} % of a core | {r['rows_per_stream']} / {r['wal_bytes_per_stream']} B / {r['wal_flushes_per_stream']} "
              f"| {r['readyz_ms']} ms | {r['probe_p50_ms']} / {r['probe_p99_ms']} / {r['probe_max_ms']} ms ({r['probe_failures']} of {r['probe_requests']}) |")
EOF
}
storm() {
    python3 - "$TMP/cluster.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "reconnect_seconds" not in r:
        continue
    print("| streams dropped | all reconnected in | reopens retried / failed | sends during the storm (failed) | streams checked | exact at the first comparison | exact at the last (seconds after presence settled) | log reads per comparison | replay reads by the nodes | presence rows / users online of | settled after the reconnect | /readyz after |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    print(f"| {r['streams']:,} | {r['reconnect_seconds']} s | {r['reopen_retried']} / {r['reopen_failed']} | {r['sent_during']} ({r['send_failures']}) | {r['checked_streams']:,} | {r['exact_at_first_check']:,} | {r['exact']:,} ({r['checked_after_seconds']} s) "
          f"| {r['log_reads']:,} | {r['replay_queries']} | {r['presence_rows']:,} / {r['presence_online_users']:,} of {r['users']:,} | {r['presence_settled_seconds']} s | {r['readyz_ms']} ms |")
    if r["inexact"]:
        print()
        print("Inexact streams (first ones): `" + json.dumps(r["inexact"])[:600] + "`")
    if r["reopen_failures"]:
        print()
        print("Reopen failures (first ones): `" + json.dumps(r["reopen_failures"])[:400] + "`")
EOF
}

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — SSE streams at scale: one node to 19,000, $NODES nodes holding $TOTAL, a reconnect storm"
    echo
    machine_lines
    echo "- parley: release build, log level error, scripts/cluster.sh (PostgreSQL 15 of its own, synchronous_commit on); user streams with the app key and \`presence=true\`, 10 per user, opened 500 at a time per client process (a refused open retried after 1–3 s, as EventSource would) (bench/py/sse_scale_client.py, asyncio, reading every frame) from 127.0.<client>.<1–250>; idle window ${BENCH_SSE_WINDOW:-30} s per step with a probe of 20 requests/s (a user read and a 1:1 send in turn, round robin over the nodes)"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    table "$TMP/steps.jsonl" "$TMP/cluster.jsonl"
    if [[ -s $TMP/cluster.jsonl ]]; then
        echo
        echo "Reconnect storm: every client process ended at once (each wrote its streams' last event ids and exited; the kernel closed all of their sockets), new processes reconnected every stream with its \`Last-Event-ID\` while 1:1 sends went on at 50/s; once presence had settled (every stream's row, every user online) and 5 s passed, every stream's events since its resume point were compared with its user's log, and again up to three times 20 s apart while some were not exact yet (late is not lost):"
        echo
        storm
    fi
)
record_section "$SECTION"
