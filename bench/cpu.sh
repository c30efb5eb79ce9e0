#!/usr/bin/env bash
# What a message costs: CPU per send of Parley and of its PostgreSQL (from /proc), for peer texts between random users
# ("spread") and for one hot pair (every connection sends u1 -> u2), each beside its physical limit in the same rounds:
# pgbench's single-row durable INSERT beside the spread sends, the naive hot counter beside the hot pair (same clients,
# same duration, synchronous_commit on). BENCH_ROUNDS (3) alternating rounds, each: INSERT, spread sends, counter, hot
# pair. The rows show every round; the summary the median. For the median spread and hot rounds it also prints where
# the CPU went, by Parley thread and by PostgreSQL backend (bench/py/cpu_breakdown.py), and the top statements of
# pg_stat_statements when BENCH_STATEMENTS=1 (the server's PostgreSQL restarted once with the extension loaded).
# Appends the section to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_CONNECTIONS=32, BENCH_DURATION=10s, BENCH_WARMUP=10
#              (seconds of sends before the first round, then ANALYZE), BENCH_ROUNDS=3, BENCH_THREADS=2,
#              BENCH_STATEMENTS=0, BENCH_RESULTS=path, BENCH_NO_RECORD=1, BENCH_NOTE="…"
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONNECTIONS=${BENCH_CONNECTIONS:-32}
DURATION=${BENCH_DURATION:-10s}
WARMUP=${BENCH_WARMUP:-10}
STATEMENTS=${BENCH_STATEMENTS:-0}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
require_pgbench
build_parley
SECS=$(seconds_of "$DURATION")

psql_run() { psql -h "$DATA/run" -p 5432 -U parley -d postgres -X -qtA "$@"; }

start_parley
if [[ $STATEMENTS == 1 ]]; then
    # pg_stat_statements must be preloaded: a second start of the same data directory with it in the cluster's config.
    log "restarting with pg_stat_statements loaded"
    stop_pid "$PARLEY_PID"
    forget_pid "$PARLEY_PID"
    printf "shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track = 'all'\n" \
        >>"$(readlink -f "$DATA/pg")/postgresql.auto.conf"
    PARLEY_LOG_LEVEL=error "$SCRATCH/release/parley" serve --listen "127.0.0.1:$PORT" --data-dir "$DATA" >>"$TMP/parley.log" 2>&1 &
    PARLEY_PID=$!
    PIDS=("$PARLEY_PID" "${PIDS[@]}")
    wait_ready parley "$PARLEY_PID" "$PORT" "$TMP/parley.log"
    psql_run -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
fi
import_users 50
reference_tables create
log "warm-up: ${WARMUP} s of sends, then ANALYZE"
timeout $((WARMUP + 30)) wrk -t"$THREADS" -c"$CONNECTIONS" -d"${WARMUP}s" -s "$ROOT/bench/lua/send.lua" "$BASE" >/dev/null 2>&1 || true
psql_run -c "ANALYZE" >/dev/null

declare -A OPS CPU_P CPU_G BUSY BREAKDOWN
# cpu_phase key: snapshots (totals and breakdown) for the measured window, started beside the load
cpu_phase() {
    local key=$1 before after
    before=$(cpu_snapshot)
    python3 "$ROOT/bench/py/cpu_breakdown.py" snapshot "$PARLEY_PID" "$DATA/run" >"$TMP/bd-$key-a.json"
    sleep "$SECS"
    after=$(cpu_snapshot)
    python3 "$ROOT/bench/py/cpu_breakdown.py" snapshot "$PARLEY_PID" "$DATA/run" >"$TMP/bd-$key-b.json"
    cpu_delta "$before" "$after" >"$TMP/cpu-$key"
}

# send_round key: wrk with send.lua (HOT from the environment) and the CPU window
send_round() {
    local key=$1 window
    window() { cpu_phase "$key"; }
    DURING_WRK["$key"]=window
    [[ $STATEMENTS == 1 ]] && psql_run -c "SELECT pg_stat_statements_reset()" >/dev/null
    run_wrk "$key" send.lua "$CONNECTIONS"
    [[ $STATEMENTS == 1 ]] && psql_run -F ' | ' -c "SELECT calls, round(total_exec_time::numeric, 1), rows,
        left(regexp_replace(query, '\s+', ' ', 'g'), 100) FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 12" \
        >"$TMP/statements-$key"
    read -r p g _ busy total <"$TMP/cpu-$key"
    OPS[$key]=$(awk -v r="${RATE[parley,$key]}" -v s="$SECS" 'BEGIN { printf "%.0f", r * s }')
    CPU_P[$key]=$(awk -v c="$p" -v n="${OPS[$key]}" 'BEGIN { printf "%.4f", 1000 * c / n }')
    CPU_G[$key]=$(awk -v c="$g" -v n="${OPS[$key]}" 'BEGIN { printf "%.4f", 1000 * c / n }')
    BUSY[$key]="$busy of $total"
    log "  cpu per send: parley ${CPU_P[$key]} ms, postgres ${CPU_G[$key]} ms (machine busy $busy of $total s)"
}

# reference_round key sql: pgbench on a reference script, with its PostgreSQL CPU per transaction
reference_round() {
    local key=$1 sql=$2 before after out txs
    local pgb=(env PGOPTIONS="-c synchronous_commit=on" pgbench -h "$DATA/run" -p 5432 -U parley -n -M prepared
        -j "$THREADS" -c "$CONNECTIONS" -f "$ROOT/bench/sql/$sql" postgres)
    log "$key: pgbench -c$CONNECTIONS -T$SECS ($sql)"
    "${pgb[@]}" -T 2 >/dev/null 2>&1 || true
    before=$(cpu_snapshot)
    out=$("${pgb[@]}" -T "$SECS" 2>&1) || { echo "$out" >&2; die "pgbench failed"; }
    after=$(cpu_snapshot)
    grep -qE 'ERROR:|aborted' <<<"$out" && { echo "$out" >&2; die "pgbench failed ($sql)"; }
    RATE[pgbench,$key]=$(awk '/^tps = / { print $3; exit }' <<<"$out")
    txs=$(awk '/number of transactions actually processed/ { split($NF, a, "/"); print a[1]; exit }' <<<"$out")
    read -r _ g _ busy total <<<"$(cpu_delta "$before" "$after")"
    OPS[$key]=$txs
    CPU_G[$key]=$(awk -v c="$g" -v n="$txs" 'BEGIN { printf "%.4f", 1000 * c / n }')
    BUSY[$key]="$busy of $total"
    log "  pgbench: ${RATE[pgbench,$key]} tps, postgres ${CPU_G[$key]} ms per transaction"
}

for ((r = 1; r <= ROUNDS; r++)); do
    reference_round "insert #$r" floor_insert.sql
    unset HOT
    send_round "spread #$r"
    reference_round "counter #$r" hot_counter.sql
    export HOT=1
    send_round "hot #$r"
    unset HOT
done
stored=$(api "$BASE/v1/users/u1/conversations/peer/u2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["last_seq"])')
reference_tables drop

median_round() {  # prefix: the round whose Parley+PostgreSQL CPU per send is the median
    local r
    for ((r = 1; r <= ROUNDS; r++)); do
        awk -v p="${CPU_P[$1 #$r]}" -v g="${CPU_G[$1 #$r]}" -v r="$r" 'BEGIN { printf "%.6f %d\n", p + g, r }'
    done | sort -n | awk -v m=$(((ROUNDS + 1) / 2)) 'NR == m { print $2 }'
}
median_value() {  # array-name prefix: the median of that array over the rounds
    local -n values=$1
    local r
    for ((r = 1; r <= ROUNDS; r++)); do echo "${values[$2 #$r]}"; done | sort -g | awk -v m=$(((ROUNDS + 1) / 2)) 'NR == m'
}
ratio_median() {  # parley-prefix reference-prefix: the median over rounds of parley rate / reference tps
    local r
    for ((r = 1; r <= ROUNDS; r++)); do
        awk -v p="${RATE[parley,$1 #$r]}" -v n="${RATE[pgbench,$2 #$r]}" 'BEGIN { printf "%.2f\n", p / n }'
    done | sort -g | awk -v m=$(((ROUNDS + 1) / 2)) 'NR == m'
}
spread=$(median_round spread)
hot=$(median_round hot)
P_SPREAD=$(median_value CPU_P spread)
G_SPREAD=$(median_value CPU_G spread)
P_HOT=$(median_value CPU_P hot)
G_HOT=$(median_value CPU_G hot)
R_SPREAD=$(ratio_median spread insert)
R_HOT=$(ratio_median hot counter)
SUMMARY="spread sends: Parley $P_SPREAD ms, PostgreSQL $G_SPREAD ms of CPU per send (targets ≤ 0.06, ≤ 0.12: $(awk -v x="$P_SPREAD" 'BEGIN { print (x <= 0.06 ? "met" : "**not met**") }'), $(awk -v x="$G_SPREAD" 'BEGIN { print (x <= 0.12 ? "met" : "**not met**") }')); sends / durable INSERT **${R_SPREAD}×** (target ≥ 0.6×: $(met "$R_SPREAD" 0.6)); hot pair: Parley $P_HOT ms, PostgreSQL $G_HOT ms per send; hot pair / naive hot counter **${R_HOT}×** (target ≥ 5×: $(met "$R_HOT" 5))"
log "$SUMMARY"

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — CPU per send (bench/cpu.sh), spread and hot, beside the physical limits"
    echo
    machine_lines
    echo "- parley: release build, embedded PostgreSQL 15, default pool, log level error; 50 users; ${WARMUP} s of sends and an ANALYZE before the rounds"
    echo "- load: wrk \`-t$THREADS -c$CONNECTIONS -d$DURATION\` (bench/lua/send.lua: peer texts between random users, or u1 -> u2 with HOT=1, a fresh client_msg_id each); pgbench \`-M prepared -c$CONNECTIONS -T$SECS\`, synchronous_commit on: bench/sql/floor_insert.sql (single-row durable INSERT) and bench/sql/hot_counter.sql (naive hot counter); $ROUNDS rounds, each INSERT, spread, counter, hot"
    echo "- CPU: /proc over the measured window (user + system); Parley = its process, PostgreSQL = every process under it (backends, walwriter, checkpointer, autovacuum and reaped backends); the hot pair held $stored messages at the end"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    echo "| round | workload | rate /s | Parley ms/op | PostgreSQL ms/op | p50 / p99 | machine busy s |"
    echo "|---:|---|---:|---:|---:|---|---|"
    for ((r = 1; r <= ROUNDS; r++)); do
        printf '| %d | durable INSERT (pgbench) | %.0f | — | %s | — | %s |\n' "$r" "${RATE[pgbench,insert #$r]}" "${CPU_G[insert #$r]}" "${BUSY[insert #$r]}"
        printf '| %d | spread sends | %.0f | %s | %s | %s / %s | %s |\n' "$r" "${RATE[parley,spread #$r]}" "${CPU_P[spread #$r]}" \
            "${CPU_G[spread #$r]}" "${P50[spread #$r]}" "${P99[spread #$r]}" "${BUSY[spread #$r]}"
        printf '| %d | naive hot counter (pgbench) | %.0f | — | %s | — | %s |\n' "$r" "${RATE[pgbench,counter #$r]}" "${CPU_G[counter #$r]}" "${BUSY[counter #$r]}"
        printf '| %d | hot pair sends | %.0f | %s | %s | %s / %s | %s |\n' "$r" "${RATE[parley,hot #$r]}" "${CPU_P[hot #$r]}" \
            "${CPU_G[hot #$r]}" "${P50[hot #$r]}" "${P99[hot #$r]}" "${BUSY[hot #$r]}"
    done
    echo
    echo "$SUMMARY"
    echo
    echo "Where the CPU of the median spread round ($spread) went, per send:"
    echo
    python3 "$ROOT/bench/py/cpu_breakdown.py" diff "$TMP/bd-spread #$spread-a.json" "$TMP/bd-spread #$spread-b.json" "${OPS[spread #$spread]}"
    echo
    echo "Where the CPU of the median hot round ($hot) went, per send:"
    echo
    python3 "$ROOT/bench/py/cpu_breakdown.py" diff "$TMP/bd-hot #$hot-a.json" "$TMP/bd-hot #$hot-b.json" "${OPS[hot #$hot]}"
    if [[ $STATEMENTS == 1 ]]; then
        echo
        echo "Top statements of the median spread round (pg_stat_statements: calls | total ms | rows | query):"
        echo
        echo '```'
        cat "$TMP/statements-spread #$spread"
        echo '```'
    fi
)
record_section "$SECTION"
