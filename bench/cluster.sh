#!/usr/bin/env bash
# One node and three behind nginx (issue 24; figures in docs/scaling.md): sends/s and SSE delivery latency through
# nginx, with 200 user streams open. Each round starts a fresh cluster (scripts/cluster.sh: its own PostgreSQL, the
# nodes, nginx), runs `scripts/cluster_check.py DIR measure` (wrk with bench/lua/send.lua over 200 users and 16
# connections, a probe of 20 sends/s timed to the recipient's stream, CPU of every part) and stops it. Each round runs
# the setups of BENCH_CLUSTER_SETUPS ("1 3 3a") in turn, so a drift of the machine hits all: 1 node, 3 nodes round
# robin, and 3a = 3 nodes with `POST /v1/messages` pinned by app key (scripts/cluster.sh CLUSTER_SEND_AFFINITY=1).
# Appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_ROUNDS=3 (bench/lib.sh), BENCH_SECONDS=20, BENCH_WARMUP=15 (seconds of sends, then
#              ANALYZE, before the measured window; 0 measures a fresh database's first seconds), BENCH_RESULTS=path,
#              BENCH_NO_RECORD=1, BENCH_NOTE="…"
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

SECONDS_EACH=${BENCH_SECONDS:-20}
WARMUP=${BENCH_WARMUP:-15}
SETUPS=${BENCH_CLUSTER_SETUPS:-1 3 3a}
SENDERS=${CLUSTER_SENDERS:-16}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
cluster_bench_setup
declare -A RESULT
for round in $(seq "$ROUNDS"); do
    for setup in $SETUPS; do
        CLUSTER_DIR=$TMP/cluster-$setup-$round
        affinity=0
        [[ $setup == *a ]] && affinity=1
        CLUSTER_SEND_AFFINITY=$affinity CLUSTER_LOG_LEVEL=error bash scripts/cluster.sh up "${setup%a}" 2>/dev/null
        wait_quiet
        RESULT[$setup,$round]=$(timeout $((SECONDS_EACH + WARMUP + 120)) python3 scripts/cluster_check.py "$CLUSTER_DIR" measure "$SECONDS_EACH" "$WARMUP") \
            || die "the measurement of setup $setup, round $round, failed"
        log "setup $setup, round $round: ${RESULT[$setup,$round]}"
        if [[ $setup == "${SETUPS%% *}" ]]; then
            # The physical limit in the same run: pgbench's single-row durable INSERT on this cluster's PostgreSQL
            # (bench/sql/floor_insert.sql), as many clients as wrk has connections, the nodes idle.
            DATA=$CLUSTER_DIR DURATION=${SECONDS_EACH}s
            wait_quiet
            reference_tables create
            run_pgbench "floor #$round" floor_insert.sql "$SENDERS"
            reference_tables drop
        fi
        bash scripts/cluster.sh down 2>/dev/null
    done
done

row() {  # setup round: a table row from the JSON figures
    python3 - "${RESULT[$1,$2]}" "$2" "$1" <<'EOF'
import json, sys
r, c = json.loads(sys.argv[1]), json.loads(sys.argv[1])["cpu_s"]
busy = c["machine_busy"] / c["machine_total"] * 100 if c["machine_total"] else 0
setup = str(r["nodes"]) + (", sends by app key" if sys.argv[3].endswith("a") else "")
print(f'| {setup} | {sys.argv[2]} | {r["sends_per_s"]:,.0f} | {r["send_p50"]} | {r["send_p99"]} | {r["send_errors"]} '
      f'| {r["delivery_ms_p50"]} ms | {r["delivery_ms_p99"]} ms | {r["probes_delivered"]}/{r["probes"]} | {r["frames_per_s"]:,} '
      f'| {c["nodes"]} / {c["postgres"]} / {c["nginx"]} / {c["wrk"]} / {c["client"]} | {busy:.0f} % |')
EOF
}

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — one node and three behind nginx: sends and SSE delivery (bench/cluster.sh)"
    echo
    machine_lines
    echo "- each round a fresh cluster (scripts/cluster.sh): one PostgreSQL 15 (Unix socket), 1 or 3 \`parley serve\` release nodes (log level error, default pool), Debian's nginx (1 worker, round robin, keep-alive upstreams, no buffering) in front; setups in each round: $SETUPS (3a: \`POST /v1/messages\` hashed by Authorization, i.e. one app key to one node); everything on the same 2 cores"
    echo "- warm-up: ${WARMUP} s of the same sends, then \`ANALYZE\` (a fresh database's generic plans are made on empty tables and last until the first ANALYZE; 0 = none)"
    echo "- load through nginx for ${SECONDS_EACH} s: wrk \`-t2 -c$SENDERS\` peer texts between random pairs of 200 users (bench/lua/send.lua, USERS=200); 200 user streams (one per user) open through nginx by one asyncio client; a probe sends 20 peer texts/s on its own connection, each timed from writing its POST to its arrival on the recipient's stream"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    echo "| setup | round | sends/s | send p50 | send p99 | errors | delivery p50 | delivery p99 | probes delivered | frames/s to streams | CPU s: nodes / PostgreSQL / nginx / wrk / client | machine busy |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"
    for round in $(seq "$ROUNDS"); do for setup in $SETUPS; do row "$setup" "$round"; done; done
    echo
    echo "The physical limit in the same run, on the PostgreSQL of each round's first setup (${SETUPS%% *} node(s)) with its nodes idle: pgbench \`-M prepared -c$SENDERS -T$SECONDS_EACH\`, one single-row durable INSERT per transaction (bench/sql/floor_insert.sql); sends/s of that round's setups against it:"
    echo
    echo "| round | floor tps | $(for setup in $SETUPS; do printf '%s / floor | ' "$setup"; done)"
    echo "|---:|---:|$(for _ in $SETUPS; do printf -- '---:|'; done)"
    for round in $(seq "$ROUNDS"); do
        printf '| %s | %.0f | ' "$round" "${RATE[pgbench,floor #$round]}"
        for setup in $SETUPS; do
            printf '%s | ' "$(python3 -c 'import json,sys; print("%.2f×" % (json.loads(sys.argv[1])["sends_per_s"] / float(sys.argv[2])))' "${RESULT[$setup,$round]}" "${RATE[pgbench,floor #$round]}")"
        done
        echo
    done
)
record_section "$SECTION"
