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

require_pgbench() { command -v pgbench >/dev/null || install_package postgresql-contrib postgresql-client; }

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

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    [[ -n $SAMPLER_PID ]] && stop_pid "$SAMPLER_PID"
    for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
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
    [[ $body == '{"status":"ok"}' ]] || die "$1 answered /healthz with unexpected body: $body"
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
    PARLEY_LOG_LEVEL=error "$SCRATCH/release/parley" serve --listen "127.0.0.1:$PORT" --data-dir "$DATA" >"$TMP/parley.log" 2>&1 &
    PARLEY_PID=$!
    PIDS=("$PARLEY_PID" "${PIDS[@]}")
    wait_ready parley "$PARLEY_PID" "$PORT" "$TMP/parley.log"
    export PARLEY_KEY
    PARLEY_KEY=$(grep '^PARLEY_KEY=' "$TMP/parley.log" | head -1 | cut -d= -f2-)
    [[ -n $PARLEY_KEY ]] || die "no PARLEY_KEY in the server output"
    BASE="http://127.0.0.1:$PORT"
    api -X PATCH "$BASE/v1/settings" -d '{"rate_limit_app_rps":100000}' >/dev/null
}

api() {  # curl with the app key and a JSON body type; fails on HTTP errors
    curl -fsS -H "Authorization: Bearer $PARLEY_KEY" -H 'Content-Type: application/json' "$@"
}

# --- Parley beside pgbench (send.sh, group.sh) ---------------------------------------------------------------------
# Globals the callers set: ROOT, BASE, DATA (start_parley), CONNECTIONS, DURATION, THREADS. Results land in the
# associative arrays RATE[pgbench|parley,<name>], P50/P99/LAT/ERR[<name>].
declare -A RATE P50 P99 LAT ERR
seconds_of() { local d=$1; case $d in *s) echo "${d%s}" ;; *) echo "$d" ;; esac; }

run_pgbench() {  # key sql [connections]: pgbench -M prepared with bench/sql/<sql> on the embedded PostgreSQL, 2 s warm-up
    local key=$1 sql=$2 connections=${3:-$CONNECTIONS} out secs
    secs=$(seconds_of "$DURATION")
    # Same plan mode as Parley's pool (ParleyApp: plan_cache_mode=force_generic_plan), so both run the statement the
    # same way; under "auto" pgbench's parameterised statements would be planned again on every execution.
    local pgb=(env PGOPTIONS="-c plan_cache_mode=force_generic_plan" pgbench -h "$DATA/run" -p 5432 -U parley -n -M prepared
        -j "$THREADS" -c "$connections" -f "$ROOT/bench/sql/$sql" postgres)
    log "$key: pgbench -c$connections -T$secs -M prepared ($sql)"
    "${pgb[@]}" -T 2 >/dev/null 2>&1 || true
    out=$("${pgb[@]}" -T "$secs" 2>&1) || { echo "$out" >&2; die "pgbench failed"; }
    RATE[pgbench,$key]=$(awk '/^tps = / { print $3; exit }' <<<"$out")
    LAT[$key]=$(awk '/^latency average = / { print $4 " ms (avg)"; exit }' <<<"$out")
    log "  pgbench: ${RATE[pgbench,$key]} tps"
}

run_wrk() {  # key lua [connections]: wrk --latency with bench/lua/<lua> against $BASE, 2 s warm-up
    local key=$1 lua=$2 connections=${3:-$CONNECTIONS} threads=$THREADS out errors secs
    secs=$(seconds_of "$DURATION")
    ((connections >= threads)) || threads=$connections
    log "$key: wrk -t$threads -c$connections -d$DURATION ($lua)"
    timeout 60 wrk -t"$threads" -c"$connections" -d2s -s "$ROOT/bench/lua/$lua" "$BASE" >/dev/null 2>&1 || true
    out=$(timeout $((secs + 30)) wrk -t"$threads" -c"$connections" -d"$DURATION" --latency -s "$ROOT/bench/lua/$lua" "$BASE" 2>&1)
    RATE[parley,$key]=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
    P50[$key]=$(awk '$1 == "50%" { print $2 }' <<<"$out")
    P99[$key]=$(awk '$1 == "99%" { print $2 }' <<<"$out")
    errors=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' <<<"$out")
    ERR[$key]=${errors:-0}
    [[ -z $errors ]] || log "  warning: $errors non-2xx responses"
    log "  parley: ${RATE[parley,$key]} req/s, p50 ${P50[$key]}, p99 ${P99[$key]}"
}

# run_pair name sql lua [connections]: BENCH_ROUNDS (3) rounds of pgbench then wrk, same clients and duration.
# pgbench's own rate swings by ±40% between runs on these machines, so one pair proves little: the round with the
# median Parley/pgbench ratio stands for the pair, and ROUND_RATIOS[name] keeps every round's ratio.
ROUNDS=${BENCH_ROUNDS:-3}
declare -A ROUND_RATIOS
run_pair() {
    local name=$1 sql=$2 lua=$3 connections=${4:-$CONNECTIONS} r ratios=() median
    for ((r = 1; r <= ROUNDS; r++)); do
        run_pgbench "$name #$r" "$sql" "$connections"
        run_wrk "$name #$r" "$lua" "$connections"
        ratios+=("$(awk -v p="${RATE[parley,$name #$r]}" -v n="${RATE[pgbench,$name #$r]}" 'BEGIN { printf "%.2f", p / n }') $r")
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
}

PAIR_HEADER="| workload | pgbench tps | parley req/s | parley/pgbench | every round | parley p50 / p99 | pgbench latency | parley non-2xx |
|---|---:|---:|---:|---|---|---|---:|"

pair_row() {  # name: the row of a run_pair under PAIR_HEADER (figures of the median round)
    local name=$1 ratio
    ratio=$(awk -v p="${RATE[parley,$name]}" -v n="${RATE[pgbench,$name]}" 'BEGIN { printf "%.2f×", p / n }')
    printf '| %s | %.0f | %.0f | %s | %s | %s / %s | %s | %s |\n' "$name" "${RATE[pgbench,$name]}" "${RATE[parley,$name]}" "$ratio" \
        "${ROUND_RATIOS[$name]:-}" "${P50[$name]}" "${P99[$name]}" "${LAT[$name]}" "${ERR[$name]}"
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
