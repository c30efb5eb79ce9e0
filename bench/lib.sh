#!/usr/bin/env bash
# Shared helpers of the bench/ scripts: logging, tool installation, processes started by PID (cleaned up on
# exit), free loopback ports, readiness waits and memory readings. Source it after setting ROOT.

# The settings every script shares (each script sets its own CONNECTIONS / DURATION defaults before sourcing).
THREADS=${BENCH_THREADS:-2}
RESULTS=${BENCH_RESULTS:-$ROOT/bench/RESULTS.md}
SCRATCH=${BENCH_SCRATCH_PATH:-$ROOT/.build}
READY_TIMEOUT=60

log() { printf '[bench] %s\n' "$*" >&2; }
die() { printf '[bench] error: %s\n' "$*" >&2; exit 1; }

# --- tools ------------------------------------------------------------------------------------------------

install_package() {  # apt package for a missing tool, when we may
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        log "installing $1 with apt-get"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null; }
    else
        die "$1 is missing; install it (apt-get install $*)"
    fi
}

require_tools() {  # wrk and curl always; nginx when asked ("nginx" argument)
    command -v wrk >/dev/null || install_package wrk
    command -v curl >/dev/null || install_package curl
    if [[ ${1:-} == nginx ]]; then
        NGINX=${NGINX:-$(command -v nginx || true)}
        [[ -z $NGINX && -x /usr/sbin/nginx ]] && NGINX=/usr/sbin/nginx
        if [[ -z $NGINX ]]; then
            install_package nginx-light || install_package nginx
            NGINX=$(command -v nginx || echo /usr/sbin/nginx)
        fi
    fi
    return 0
}

require_pgbench() {  # pgbench, and psql for the reference tables
    command -v pgbench >/dev/null && command -v psql >/dev/null || install_package postgresql-contrib postgresql-client
}

# --- processes and cleanup --------------------------------------------------------------------------------

TMP=$(mktemp -d -t parley-bench.XXXXXX)
chmod 755 "$TMP"  # parley running as root hands its data directory to an unprivileged PostgreSQL user
PIDS=()
SAMPLER_PID=

stop_pid() {  # TERM, wait up to 15 s, then KILL; only processes this script started
    local pid=$1
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        log "process $pid did not stop after SIGTERM; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

forget_pid() {  # pid: a process that has ended is no longer ours to stop (its PID may be reused)
    local pid=$1 kept=() p
    for p in "${PIDS[@]}"; do [[ $p == "$pid" ]] || kept+=("$p"); done
    PIDS=("${kept[@]}")
}

parley_log_problems() {  # before the logs go with $TMP: Parley's warnings and errors and its PostgreSQL's ERROR,
                         # FATAL and PANIC lines during the run (from the scripts' SQL as well as the server's), if any
    local name pattern logfile count
    for name in parley pg; do
        if [[ $name == parley ]]; then logfile=$TMP/parley.log pattern=' level=(warn|error) '
        else logfile=${DATA:-$TMP/parley-data}/pg.log pattern=' (ERROR|FATAL|PANIC): '; fi
        [[ -f $logfile ]] || continue
        # Not a problem: connections refused while the cluster starts (Parley's own start) or stops (cleanup).
        count=$(grep -E "$pattern" "$logfile" | grep -cvE 'the database system is (starting up|shutting down)' || true)
        ((count > 0)) || continue
        log "warning: ${logfile#"$TMP"/} has $count warning/error lines; the first ones:"
        grep -E "$pattern" "$logfile" | grep -vE 'the database system is (starting up|shutting down)' | head -n 5 | cut -c1-400 >&2
    done
}

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    [[ -n $SAMPLER_PID ]] && stop_pid "$SAMPLER_PID"
    for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
    parley_log_problems
    rm -rf "$TMP"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    if command -v python3 >/dev/null; then
        python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
    else
        local port
        while :; do
            port=$((20000 + RANDOM % 40000))
            ss -Htln "sport = :$port" | grep -q . || { echo "$port"; return; }
        done
    fi
}

wait_ready() {  # name pid port log: waits until GET /healthz answers 200
    local name=$1 pid=$2 port=$3 logfile=$4 deadline=$((SECONDS + READY_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 30 "$logfile" >&2 || true
            die "$name exited before answering /healthz"
        fi
        if curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null; then return 0; fi
        sleep 0.25
    done
    tail -n 30 "$logfile" >&2 || true
    die "$name did not answer http://127.0.0.1:$port/healthz within ${READY_TIMEOUT}s"
}

check_body() {  # name port: the answer must be the same fixed JSON for both servers
    local body
    body=$(curl -fsS --max-time 5 "http://127.0.0.1:$2/healthz")
    [[ $body == '{"status":"ok","database":"running"}' ]] || die "$1 answered /healthz with unexpected body: $body"
}

rss_kib() { awk -v key="$2:" '$1 == key { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'; }


record_section() {  # text: prints a results section and appends it to $RESULTS unless BENCH_NO_RECORD=1
    echo
    echo "$1"
    if [[ ${BENCH_NO_RECORD:-0} != 1 ]]; then
        [[ -f $RESULTS ]] || printf '# Benchmark results\n\nAppended by the scripts in bench/ (see bench/README.md); newest last.\n' >"$RESULTS"
        printf '\n%s\n' "$1" >>"$RESULTS"
        log "appended to ${RESULTS#"$ROOT"/}"
    fi
}

machine_lines() {  # the "machine" and "commit" lines every results section starts with
    local cpu commit
    cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
    commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    git diff --quiet HEAD 2>/dev/null || commit="$commit (uncommitted changes)"
    echo "- machine: $(nproc) CPUs, ${cpu:-unknown CPU}, Linux $(uname -r)"
    echo "- commit: $commit"
}

# --- parley -----------------------------------------------------------------------------------------------

build_parley() {  # release build into $SCRATCH, unless BENCH_SKIP_BUILD=1
    [[ ${BENCH_SKIP_BUILD:-0} == 1 ]] && return 0
    log "building parley (release)"
    swift build -c release --product parley --scratch-path "$SCRATCH" >"$TMP/build.log" 2>&1 \
        || { tail -n 40 "$TMP/build.log" >&2; die "release build failed"; }
}

start_parley() {  # the release binary on a fresh data dir (embedded PostgreSQL), app rate limit lifted;
                  # sets PORT, DATA, PARLEY_PID, PARLEY_KEY (exported) and BASE
    PORT=$(free_port)
    DATA="$TMP/parley-data"
    mkdir -p "$DATA"
    : >"$TMP/parley.log"
    launch_parley
    export PARLEY_KEY
    PARLEY_KEY=$(grep '^PARLEY_KEY=' "$TMP/parley.log" | head -1 | cut -d= -f2-)
    [[ -n $PARLEY_KEY ]] || die "no PARLEY_KEY in the server output"
    BASE="http://127.0.0.1:$PORT"
    api -X PATCH "$BASE/v1/settings" -d '{"rate_limit_app_rps":100000}' >/dev/null
}

launch_parley() {  # the release binary on $PORT and $DATA, its output appended to $TMP/parley.log; sets PARLEY_PID
    PARLEY_LOG_LEVEL=error "$SCRATCH/release/parley" serve --listen "127.0.0.1:$PORT" --data-dir "$DATA" >>"$TMP/parley.log" 2>&1 &
    PARLEY_PID=$!
    PIDS=("$PARLEY_PID" "${PIDS[@]}")
    wait_ready parley "$PARLEY_PID" "$PORT" "$TMP/parley.log"
}

restart_with_pg_stat_statements() {  # sql-function: loads pg_stat_statements (a restart of the server and its
                                     # embedded PostgreSQL) and creates the extension, through the script's psql function
    "$1" "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'" >/dev/null
    stop_pid "$PARLEY_PID"
    forget_pid "$PARLEY_PID"
    launch_parley
    "$1" "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
}

api() {  # curl with the app key and a JSON body type; fails on HTTP errors
    curl -fsS -H "Authorization: Bearer $PARLEY_KEY" -H 'Content-Type: application/json' "$@"
}

# --- Parley beside pgbench (send.sh, group.sh) ---------------------------------------------------------------------
# Globals the callers set: ROOT, BASE, DATA (start_parley), CONNECTIONS, DURATION, THREADS. Results land in the
# associative arrays RATE[pgbench|parley,<name>], P50/P99/LAT/ERR[<name>]; with a reference script (run_pair's
# fifth argument) also RATE[reference|parley-vs-reference,<name>], LAT[reference,<name>], REF_SQL[<name>].
declare -A RATE P50 P99 LAT ERR REF_SQL DURING_WRK
seconds_of() { local d=$1; case $d in *s) echo "${d%s}" ;; *) echo "$d" ;; esac; }

# send_sql template: the pgbench script of a send, generated by bench/py/send_sql.py from bench/sql/<template> and the
# statements the release binary prints (`parley sql send <parts>`, `parley sql events`) into $TMP/sql/<template>, where
# run_pgbench finds it. Call it after build_parley. The bench keeps no copy of the send's SQL: each run pastes the
# current one, and stops here when it no longer fits.
send_sql() {
    mkdir -p "$TMP/sql"
    python3 "$ROOT/bench/py/send_sql.py" "$ROOT/bench/sql/$1" "$TMP/sql/$1" "$ROOT" "$SCRATCH/release/parley" \
        || die "could not generate the pgbench script of bench/sql/$1 (bench/py/send_sql.py)"
}

run_pgbench() {  # key sql [connections] [extra PGOPTIONS]: pgbench -M prepared with bench/sql/<sql> (or the script send_sql
                 # generated from it) on the embedded PostgreSQL, 2 s warm-up
    local key=$1 sql=$2 connections=${3:-$CONNECTIONS} extra=${4:-} out secs file=$ROOT/bench/sql/$2 origin=
    [[ -f $TMP/sql/$sql ]] && { file=$TMP/sql/$sql; origin=", generated"; }
    secs=$(seconds_of "$DURATION")
    # Same plan mode as Parley's pool (ParleyApp: plan_cache_mode=force_generic_plan), so both run the statement the
    # same way; under "auto" pgbench's parameterised statements would be planned again on every execution.
    local pgb=(env PGOPTIONS="-c plan_cache_mode=force_generic_plan${extra:+ $extra}" pgbench -h "$DATA/run" -p 5432 -U parley -n -M prepared
        -j "$THREADS" -c "$connections" -f "$file" postgres)
    log "$key: pgbench -c$connections -T$secs -M prepared ($sql$origin)"
    "${pgb[@]}" -T 2 >/dev/null 2>&1 || true
    out=$("${pgb[@]}" -T "$secs" 2>&1) || { echo "$out" >&2; die "pgbench failed"; }
    # A client that hits an SQL error stops and the others go on: whatever the exit status, such a rate is not the SQL's.
    if grep -qE 'ERROR:|aborted|number of failed transactions: [1-9]' <<<"$out"; then
        echo "$out" >&2
        die "pgbench failed: errors in its output ($sql)"
    fi
    RATE[pgbench,$key]=$(awk '/^tps = / { print $3; exit }' <<<"$out")
    LAT[$key]=$(awk '/^latency average = / { print $4 " ms (avg)"; exit }' <<<"$out")
    log "  pgbench: ${RATE[pgbench,$key]} tps"
}

run_wrk() {  # key lua [connections]: wrk --latency with bench/lua/<lua> against $BASE, 2 s warm-up (unless NO_WARMUP=1)
    local key=$1 lua=$2 connections=${3:-$CONNECTIONS} threads=$THREADS out errors secs
    secs=$(seconds_of "$DURATION")
    ((connections >= threads)) || threads=$connections
    log "$key: wrk -t$threads -c$connections -d$DURATION ($lua)"
    # NO_WARMUP=1: scripts whose requests may each be made once (bench/lua/revoke.lua) skip the warm-up.
    [[ ${NO_WARMUP:-0} == 1 ]] || timeout 60 wrk -t"$threads" -c"$connections" -d2s -s "$ROOT/bench/lua/$lua" "$BASE" >/dev/null 2>&1 || true
    # DURING_WRK[<key>]: a command (function name) started in the background with the measured run, waited for after it.
    local during=${DURING_WRK[$key]:-} during_pid=
    if [[ -n $during ]]; then
        $during &
        during_pid=$!
        PIDS=("$during_pid" "${PIDS[@]}")
    fi
    out=$(timeout $((secs + 30)) wrk -t"$threads" -c"$connections" -d"$DURATION" --latency -s "$ROOT/bench/lua/$lua" "$BASE" 2>&1)
    if [[ -n $during_pid ]]; then
        wait "$during_pid" || log "  warning: '$during' (during $key) exited with status $?"
        forget_pid "$during_pid"
    fi
    RATE[parley,$key]=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
    P50[$key]=$(awk '$1 == "50%" { print $2 }' <<<"$out")
    P99[$key]=$(awk '$1 == "99%" { print $2 }' <<<"$out")
    errors=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' <<<"$out")
    ERR[$key]=${errors:-0}
    [[ -z $errors ]] || log "  warning: $errors non-2xx responses"
    log "  parley: ${RATE[parley,$key]} req/s, p50 ${P50[$key]}, p99 ${P99[$key]}"
}

# run_pair name sql lua [connections] [reference]: BENCH_ROUNDS (3) rounds of pgbench then wrk, same clients and
# duration. pgbench's own rate swings by ±40% between runs on these machines, so one pair proves little: the round
# with the median Parley/pgbench ratio stands for the pair, and ROUND_RATIOS[name] keeps every round's ratio.
# With a reference (a bench/sql file: floor_insert.sql, hot_counter.sql), each round also runs pgbench on it between
# the same-SQL pgbench and wrk (same clients and duration, synchronous_commit=on): the physical limit next to the same
# SQL. Its ratio (Parley / reference) gets its own median round and REF_ROUND_RATIOS[name].
ROUNDS=${BENCH_ROUNDS:-3}
declare -A ROUND_RATIOS REF_ROUND_RATIOS
run_pair() {
    local name=$1 sql=$2 lua=$3 connections=${4:-$CONNECTIONS} reference=${5:-} r ratios=() ref_ratios=() median
    for ((r = 1; r <= ROUNDS; r++)); do
        run_pgbench "$name #$r" "$sql" "$connections"
        if [[ -n $reference ]]; then
            run_pgbench "$name, reference #$r" "$reference" "$connections" "-c synchronous_commit=on"
        fi
        run_wrk "$name #$r" "$lua" "$connections"
        ratios+=("$(awk -v p="${RATE[parley,$name #$r]}" -v n="${RATE[pgbench,$name #$r]}" 'BEGIN { printf "%.2f", p / n }') $r")
        if [[ -n $reference ]]; then
            ref_ratios+=("$(awk -v p="${RATE[parley,$name #$r]}" -v n="${RATE[pgbench,$name, reference #$r]}" 'BEGIN { printf "%.2f", p / n }') $r")
        fi
    done
    median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk -v m=$(((ROUNDS + 1) / 2)) 'NR == m { print $2 }')
    RATE[pgbench,$name]=${RATE[pgbench,$name #$median]}
    RATE[parley,$name]=${RATE[parley,$name #$median]}
    LAT[$name]=${LAT[$name #$median]}
    P50[$name]=${P50[$name #$median]}
    P99[$name]=${P99[$name #$median]}
    ERR[$name]=${ERR[$name #$median]}
    ROUND_RATIOS[$name]=$(printf '%s\n' "${ratios[@]}" | sort -k2 -n | awk '{ printf "%s%s×", (NR > 1 ? ", " : ""), $1 }')
    log "$name: median round $median; ratios ${ROUND_RATIOS[$name]}"
    if [[ -n $reference ]]; then
        REF_SQL[$name]=$reference
        median=$(printf '%s\n' "${ref_ratios[@]}" | sort -n | awk -v m=$(((ROUNDS + 1) / 2)) 'NR == m { print $2 }')
        RATE[reference,$name]=${RATE[pgbench,$name, reference #$median]}
        RATE[parley-vs-reference,$name]=${RATE[parley,$name #$median]}
        LAT[reference,$name]=${LAT[$name, reference #$median]}
        REF_ROUND_RATIOS[$name]=$(printf '%s\n' "${ref_ratios[@]}" | sort -k2 -n | awk '{ printf "%s%s×", (NR > 1 ? ", " : ""), $1 }')
        log "$name vs $reference: median round $median; ratios ${REF_ROUND_RATIOS[$name]}"
    fi
}

PAIR_HEADER="| workload | pgbench tps | parley req/s | parley/pgbench | every round | parley p50 / p99 | pgbench latency | parley non-2xx |
|---|---:|---:|---:|---|---|---|---:|"

pair_row() {  # name: the row of a run_pair under PAIR_HEADER (figures of the median round)
    local name=$1 ratio
    ratio=$(awk -v p="${RATE[parley,$name]}" -v n="${RATE[pgbench,$name]}" 'BEGIN { printf "%.2f×", p / n }')
    printf '| %s | %.0f | %.0f | %s | %s | %s / %s | %s | %s |\n' "$name" "${RATE[pgbench,$name]}" "${RATE[parley,$name]}" "$ratio" \
        "${ROUND_RATIOS[$name]:-}" "${P50[$name]}" "${P99[$name]}" "${LAT[$name]}" "${ERR[$name]}"
}

# The physical-limit references: pgbench on the scripts' own tables, next to the same-SQL comparison.
REF_HEADER="| workload | reference (pgbench, synchronous_commit=on) | reference tps | parley req/s | parley/reference | every round | target | reference latency |
|---|---|---:|---:|---:|---|---:|---|"

ref_ratio() {  # name: Parley / reference of the median reference round ("0.84×")
    awk -v p="${RATE[parley-vs-reference,$1]}" -v n="${RATE[reference,$1]}" 'BEGIN { printf "%.2f×", p / n }'
}

ref_row() {  # name label target: the row of a run_pair's reference under REF_HEADER (figures of its median round)
    local name=$1 label=$2 target=$3
    printf '| %s | %s (bench/sql/%s) | %.0f | %.0f | %s | %s | %s | %s |\n' "$name" "$label" "${REF_SQL[$name]}" \
        "${RATE[reference,$name]}" "${RATE[parley-vs-reference,$name]}" "$(ref_ratio "$name")" "${REF_ROUND_RATIOS[$name]:-}" \
        "$target" "${LAT[reference,$name]}"
}

reference_tables() {  # create|drop: the tables of bench/sql/floor_insert.sql and hot_counter.sql (psql, Unix socket)
    local sql
    if [[ $1 == create ]]; then
        sql="DROP TABLE IF EXISTS bench_floor_rows, bench_counter, bench_counter_rows;
CREATE TABLE bench_floor_rows (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text NOT NULL);
CREATE TABLE bench_counter (id int PRIMARY KEY, n bigint NOT NULL);
INSERT INTO bench_counter VALUES (1, 0);
CREATE TABLE bench_counter_rows (seq bigint PRIMARY KEY, body text NOT NULL);"
    else
        sql="DROP TABLE IF EXISTS bench_floor_rows, bench_counter, bench_counter_rows;"
    fi
    PGOPTIONS="-c client_min_messages=warning" psql -h "$DATA/run" -p 5432 -U parley -d postgres -X -q -v ON_ERROR_STOP=1 -c "$sql" >/dev/null \
        || die "could not $1 the reference tables"
}

# --- Clusters of scripts/cluster.sh (cluster.sh, sse-scale.sh) --------------------------------------------------------

cluster_bench_setup() {  # the tools, an open files limit for many connections, and at exit the cluster of $CLUSTER_DIR
                         # (if one is up) stopped before the usual cleanup; then the release build
    require_tools nginx
    require_pgbench
    command -v python3 >/dev/null || install_package python3
    ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
    trap stop_cluster_then_cleanup EXIT
    build_parley
    export CLUSTER_BINARY=$SCRATCH/release/parley NGINX CLUSTER_DIR
}

stop_cluster_then_cleanup() {
    local status=$?
    [[ -n ${CLUSTER_DIR:-} ]] && bash "$ROOT/scripts/cluster.sh" down >/dev/null 2>&1
    (exit "$status")
    cleanup
}

# --- Fixtures through the API ----------------------------------------------------------------------------------------
import_users() {  # count: users u1..u<count> (name "User <i>"), 100 per request
    local count=$1 first last
    log "importing $count users"
    for ((first = 1; first <= count; first += 100)); do
        last=$((first + 99 < count ? first + 99 : count))
        api -X POST "$BASE/v1/users/import" \
            -d "$(python3 -c "import json,sys; a,b=int(sys.argv[1]),int(sys.argv[2]); print(json.dumps({'users':[{'user_id':f'u{i}','name':f'User {i}'} for i in range(a,b+1)]}))" "$first" "$last")" >/dev/null
    done
}

create_group() {  # id size: owner u1, members u2..u<size> (499 at creation, the rest invited by the app, 100 per call)
    local id=$1 size=$2 from count
    api -X POST "$BASE/v1/groups" \
        -d "$(python3 -c "import json,sys; print(json.dumps({'group_id':sys.argv[1],'operator':'u1','members':[f'u{i}' for i in range(2,min(int(sys.argv[2]),500)+1)]}))" "$id" "$size")" >/dev/null
    for ((from = 501; from <= size; from += 100)); do
        api -X POST "$BASE/v1/groups/$id/members/invite" \
            -d "$(python3 -c "import json,sys; f=int(sys.argv[1]); print(json.dumps({'user_ids':[f'u{i}' for i in range(f, min(f+100, int(sys.argv[2])+1))]}))" "$from" "$size")" >/dev/null
    done
    count=$(api "$BASE/v1/groups/$id/member_count" | python3 -c 'import json,sys; print(json.load(sys.stdin)["member_count"])')
    [[ $count == "$size" ]] || die "group $id has $count members, expected $size"
    log "group $id: $count members"
}

# --- CPU accounting (scripts with a loopback peer process: webhooks.sh, push.sh) ------------------------------------
# cpu_snapshot: "parley pg peer machine_busy machine_total" in seconds (bench/py/cpu_snapshot.py); the peer is the
# process $CPU_PEER_PID (the receiver or gateway), named $CPU_PEER_NAME in the log lines.
cpu_snapshot() { python3 "$ROOT/bench/py/cpu_snapshot.py" "$PARLEY_PID" "${CPU_PEER_PID:-0}"; }
declare -A CPU  # CPU[<key>] = "parley pg peer busy total" deltas, seconds
cpu_delta() {  # before after: the differences, rounded
    awk -v a="$1" -v b="$2" 'BEGIN { n = split(a, x, " "); split(b, y, " "); for (i = 1; i <= n; i++) printf "%s%.2f", (i > 1 ? " " : ""), y[i] - x[i]; print "" }'
}
cpu_window() {  # DURING_WRK: CPU over the measured wrk run, into $CPU_FILE
    local before
    before=$(cpu_snapshot)
    sleep "$SECS"
    cpu_delta "$before" "$(cpu_snapshot)" >"$CPU_FILE"
}
wait_quiet() {  # before a measured phase: until the machine's CPU is ≤ 25% busy over a second (at most
    # BENCH_QUIET_MAX, 120 s), so background work a previous phase left (the push bridge planning its sends' events) is
    # not charged to this one
    local waited=0 busy
    while ((waited < ${BENCH_QUIET_MAX:-120})); do
        busy=$(python3 -c 'import time
def snap():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(f) - f[3] - f[4], sum(f)
b0, t0 = snap(); time.sleep(1); b1, t1 = snap()
print(int(100 * (b1 - b0) / max(1, t1 - t0)))')
        ((busy > 25)) || break
        waited=$((waited + 1))
    done
    ((waited == 0)) || log "  waited ${waited} s for the machine to go quiet (last: ${busy}% busy)"
}
cpu_ms_per_request() {  # key: (Parley + its PostgreSQL) CPU ms per request of a measure'd run, or n/a
    local v=${CPU[$1]:-} rate=${RATE[parley,$1]:-0}
    [[ -n $v ]] || { echo "n/a"; return; }
    awk -v v="$v" -v r="$rate" -v s="$SECS" 'BEGIN { split(v, c, " "); n = r * s; printf "%.2f", (n > 0 ? 1000 * (c[1] + c[2]) / n : 0) }'
}
cpu_cell() {  # key: "parley / pg / peer / machine busy of total" or n/a
    local v=${CPU[$1]:-}
    [[ -n $v ]] || { echo "n/a"; return; }
    awk -v v="$v" 'BEGIN { split(v, c, " "); printf "%.1f / %.1f / %.2f / %.1f of %.1f", c[1], c[2], c[3], c[4], c[5] }'
}
measure() {  # key lua connections: run_wrk with the CPU window
    CPU_FILE="$TMP/cpu.$RANDOM"
    DURING_WRK["$1"]=cpu_window
    run_wrk "$1" "$2" "$3"
    CPU[$1]=$(cat "$CPU_FILE" 2>/dev/null || true)
    log "  cpu s (parley pg ${CPU_PEER_NAME:-peer} busy total): ${CPU[$1]}"
}

# --- A/B summaries (webhooks.sh, push.sh) ---------------------------------------------------------------------------
median_of() {  # prefix [parley|pgbench]: the median (lower middle) rate of "<prefix> #1..#ROUNDS"
    local r vals=()
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do vals+=("${RATE[${2:-parley},$1 #$r]:-0}"); done
    printf '%s\n' "${vals[@]}" | sort -g | awk -v m=$(((BENCH_ROUNDS + 1) / 2)) 'NR == m { print }'
}
ab_ratio() { awk -v b="$1" -v a="$2" 'BEGIN { printf "%.2f×", (a > 0 ? b / a : 0) }'; }  # b a: "b/a×"
met() { awk -v x="$1" -v t="$2" 'BEGIN { print (x + 0 >= t + 0 ? "met" : "**not met**") }'; }  # value target

# paced key: paced hot sends u1 -> u2 (bench/lua/paced_send.lua, HOT=1) at $PACE/s over $CONNECTIONS connections for
# $DURATION ($SECS s); with DURING set, that command runs beside them, its output in $TMP/during-<key>. Sets
# RATE[parley,<key>], P50, P99 and ERR[<key>] (bench/bulk-removal.sh, bench/purge.sh).
paced() {
    local key=$1 out during_pid=
    if [[ -n ${DURING:-} ]]; then
        $DURING >"$TMP/during-$key" &
        during_pid=$!
        PIDS=("$during_pid" "${PIDS[@]}")
    fi
    out=$(HOT=1 PACE_RATE=$PACE PACE_THREADS=$THREADS BENCH_LUA_DIR="$ROOT/bench/lua" timeout $((SECS + 30)) \
        wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s "$ROOT/bench/lua/paced_send.lua" "$BASE" 2>&1)
    if [[ -n $during_pid ]]; then
        wait "$during_pid" || die "'$DURING' failed beside $key"
        forget_pid "$during_pid"
    fi
    RATE[parley,$key]=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
    P50[$key]=$(awk '$1 == "50%" { print $2 }' <<<"$out")
    P99[$key]=$(awk '$1 == "99%" { print $2 }' <<<"$out")
    ERR[$key]=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' <<<"$out")
    ERR[$key]=${ERR[$key]:-0}
    log "  $key: ${RATE[parley,$key]} sends/s, p50 ${P50[$key]}, p99 ${P99[$key]}, errors ${ERR[$key]}"
}

to_ms() {  # wrk latency ("812.00us", "1.20ms", "2.01s") in ms
    awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /s$/) n *= 1000; printf "%.2f", n }'
}

# await_job answer: the job_id of a 202 Job answer, followed until it finishes; prints the finished Job's JSON, or dies
# unless it succeeded (bench/bulk-removal.sh, bench/user-export.sh).
await_job() {
    local id body state
    id=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])' <<<"$1")
    while :; do
        body=$(api "$BASE/v1/jobs/$id")
        state=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' <<<"$body")
        [[ $state == succeeded || $state == failed || $state == cancelled ]] && break
        sleep 0.05
    done
    [[ $state == succeeded ]] || die "job $id ended $state: $body"
    echo "$body"
}
