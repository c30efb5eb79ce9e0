#!/usr/bin/env bash
# Measures `parley serve` against nginx answering GET /healthz ({"status":"ok","database":"running"}) on loopback with
# wrk, in alternating rounds of one run, with the CPU each server used per request (from /proc), and appends the
# results to bench/RESULTS.md. Optionally also GET /v1/users/{id} with an app key (a handler on a pool worker thread,
# answered back through the event loop) on each Parley. See bench/README.md.
#
# Environment:
#   BENCH_SKIP_BUILD=1        do not run `swift build -c release --product parley`
#   BENCH_SCRATCH_PATH=dir    SwiftPM scratch path for that build (default .build; the binary is <dir>/release/parley)
#   PARLEY_CMD="…"            command that runs the server in the foreground (default: .build/release/parley serve);
#                             it runs under `bash -c "exec …"`, so it must exec the server itself (its PID is the
#                             one measured); PARLEY_PORT, PARLEY_LISTEN and PARLEY_DATA_DIR are exported to it
#   PARLEY_BASE_CMD="…"       a second Parley, measured as `parley-base` in the same rounds (e.g. the binary of the
#                             commit before a change: "/tmp/parley-before serve"); same rules as PARLEY_CMD
#   BENCH_TARGETS="nginx1 nginx parley"   servers to measure: nginx1 is nginx with worker_processes 1, nginx with
#                             worker_processes auto; parley-base is added when PARLEY_BASE_CMD is set
#   BENCH_CONNECTIONS="64 256"     wrk connection counts
#   BENCH_ROUNDS=3            rounds; each runs every target once per connection count, the order reversed every
#                             other round
#   BENCH_DURATION=10s        length of each measured wrk run (a 2 s warm-up precedes each server's first run)
#   BENCH_THREADS=2           wrk threads
#   BENCH_USERS=1             also measure GET /v1/users/{id} with an app key on each Parley (1000 users imported),
#                             at BENCH_USERS_CONNECTIONS (64); 0 skips it
#   BENCH_RESULTS=path        results file (default bench/RESULTS.md); BENCH_NO_RECORD=1 prints only
#   BENCH_NOTE="…"            a free-text line added to the recorded section
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

TARGETS=${BENCH_TARGETS:-"nginx1 nginx parley"}
[[ -n ${PARLEY_BASE_CMD:-} && " $TARGETS " != *" parley-base "* ]] && TARGETS="$TARGETS parley-base"
CONNECTIONS=${BENCH_CONNECTIONS:-"64 256"}
DURATION=${BENCH_DURATION:-10s}
ROUNDS=${BENCH_ROUNDS:-3}
USERS=${BENCH_USERS:-1}
USERS_CONNECTIONS=${BENCH_USERS_CONNECTIONS:-64}

wants() { [[ " $TARGETS " == *" $1 "* ]]; }
is_parley() { [[ $1 == parley* ]]; }
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
if wants nginx || wants nginx1; then require_tools nginx; else require_tools; fi

declare -A PORT_OF PID_OF KEY_OF

# --- nginx --------------------------------------------------------------------------------------------------

start_nginx() {  # name workers: nginx from nginx-http.conf with worker_processes <workers>
    local name=$1 workers=$2 dir="$TMP/$1" user_line=""
    mkdir -p "$dir"
    PORT_OF[$name]=$(free_port)
    [[ $(id -u) -eq 0 ]] && user_line="user root root;"
    sed -e "s|@DIR@|$dir|g" -e "s|@PORT@|${PORT_OF[$name]}|g" -e "s|@USER_LINE@|$user_line|" -e "s|@WORKERS@|$workers|" \
        "$ROOT/bench/nginx-http.conf" >"$dir/nginx.conf"
    "$NGINX" -t -q -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" || die "nginx rejected the generated configuration"
    "$NGINX" -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" >"$dir/stdout.log" 2>&1 &
    PID_OF[$name]=$!
    PIDS+=("$!")
    wait_ready "$name" "$!" "${PORT_OF[$name]}" "$dir/error.log"
    check_body "$name" "${PORT_OF[$name]}"
    log "$name: nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///') with worker_processes $workers on 127.0.0.1:${PORT_OF[$name]} (pid $!)"
}
wants nginx1 && start_nginx nginx1 1
wants nginx && start_nginx nginx auto

# --- parley -------------------------------------------------------------------------------------------------

start_parley_server() {  # name command: a Parley on a fresh data directory; its log is $TMP/<name>.log
    local name=$1 cmd=$2 pid
    PORT_OF[$name]=$(free_port)
    mkdir -p "$TMP/$name-data"
    (
        export PARLEY_PORT=${PORT_OF[$name]} PARLEY_LISTEN="127.0.0.1:${PORT_OF[$name]}" PARLEY_DATA_DIR="$TMP/$name-data"
        export PARLEY_LOG_LEVEL=${PARLEY_LOG_LEVEL:-error}
        exec bash -c "exec $cmd" >"$TMP/$name.log" 2>&1
    ) &
    pid=$!
    PID_OF[$name]=$pid
    PIDS=("$pid" "${PIDS[@]}")  # stopped first, so it can stop its embedded PostgreSQL in peace
    log "waiting for $name on 127.0.0.1:${PORT_OF[$name]} (pid $pid, up to ${READY_TIMEOUT}s)"
    wait_ready "$name" "$pid" "${PORT_OF[$name]}" "$TMP/$name.log"
    check_body "$name" "${PORT_OF[$name]}"
    KEY_OF[$name]=$(grep '^PARLEY_KEY=' "$TMP/$name.log" | head -1 | cut -d= -f2- || true)
}

RSS_IDLE=0
if wants parley; then
    if [[ -z ${PARLEY_CMD:-} ]]; then
        if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
            log "building parley (release)"
            swift build -c release --product parley --scratch-path "$SCRATCH" >"$TMP/build.log" 2>&1 \
                || { tail -n 40 "$TMP/build.log" >&2; die "release build failed"; }
        fi
        [[ -x $SCRATCH/release/parley ]] || die "$SCRATCH/release/parley is missing (unset BENCH_SKIP_BUILD or build it)"
        PARLEY_CMD="$SCRATCH/release/parley serve"
    fi
    start_parley_server parley "$PARLEY_CMD"
    PARLEY_PID=${PID_OF[parley]}
    DATA="$TMP/parley-data"  # lib.sh's log check reads its pg.log
    sleep 1
    RSS_IDLE=$(rss_kib "$PARLEY_PID" VmRSS)
    log "parley idle RSS: $(mib "$RSS_IDLE")"
fi
wants parley-base && start_parley_server parley-base "$PARLEY_BASE_CMD"

# --- load ---------------------------------------------------------------------------------------------------

seconds_of() { local d=$1; case $d in *m) echo $((${d%m} * 60)) ;; *s) echo "${d%s}" ;; *) echo "$d" ;; esac; }
WRK_LIMIT=$(($(seconds_of "$DURATION") + 30))

# run_load target conns duration [path lua]: one wrk run with the CPU the target used over it, from /proc
# (bench/py/cpu_snapshot.py: the process's own CPU, all threads, and that of its descendants: nginx's workers,
# Parley's PostgreSQL). Prints "rps p50 p99 errors requests server_cpu_s descendants_cpu_s busy_pct".
run_load() {
    local target=$1 conns=$2 duration=$3 path=${4:-/healthz} lua=${5:-} out="$TMP/wrk-$1-$2.txt" before after
    local args=(-t"$THREADS" -c"$conns" -d"$duration" --latency --timeout 5s)
    [[ -n $lua ]] && args+=(-s "$ROOT/bench/lua/$lua")
    before=$(python3 "$ROOT/bench/py/cpu_snapshot.py" "${PID_OF[$target]}" 0)
    PARLEY_KEY=${KEY_OF[$target]:-} timeout "$WRK_LIMIT" wrk "${args[@]}" "http://127.0.0.1:${PORT_OF[$target]}$path" >"$out" 2>&1 \
        || { cat "$out" >&2; die "wrk against $target failed"; }
    after=$(python3 "$ROOT/bench/py/cpu_snapshot.py" "${PID_OF[$target]}" 0)
    awk -v a="$before" -v b="$after" -v target="$target" '
        /requests in/ { requests = $1 }
        /^Requests\/sec:/ { rps = $2 }
        $1 == "50%" { p50 = $2 }
        $1 == "99%" { p99 = $2 }
        /Non-2xx or 3xx responses:/ { errors += $NF }
        /Socket errors:/ { gsub(",", ""); errors += $4 + $6 + $8 + $10 }
        END {
            split(a, x, " "); split(b, y, " ")
            own = y[1] - x[1]; desc = y[2] - x[2]
            # nginx: the master and its workers are one server; Parley: its own process (its PostgreSQL apart).
            if (target !~ /^parley/) { own += desc; desc = 0 }
            printf "%s %s %s %d %d %.2f %.2f %.0f\n", (rps == "" ? "0" : rps), (p50 == "" ? "?" : p50), (p99 == "" ? "?" : p99),
                errors, requests, own, desc, 100 * (y[4] - x[4]) / ((y[5] - x[5]) > 0 ? (y[5] - x[5]) : 1)
        }' "$out"
}

if wants parley; then
    sample_rss() {  # background: keeps the largest VmRSS of parley in $TMP/rss-max
        local max=0 now
        while kill -0 "$PARLEY_PID" 2>/dev/null; do
            now=$(rss_kib "$PARLEY_PID" VmRSS)
            ((now > max)) && { max=$now; echo "$max" >"$TMP/rss-max"; }
            sleep 0.2
        done
    }
    sample_rss &
    SAMPLER_PID=$!
fi

# Per run (key "<phase>,<target>,<conns>,<round>"): rate, latency, errors, CPU ms per request, machine busy %.
declare -A RPS P50 P99 ERR CPUMS PGMS BUSY
ORDER=()
for t in nginx1 nginx parley parley-base; do wants "$t" && ORDER+=("$t"); done

measure_round() {  # phase conns round path lua targets...: one run per target, the order reversed on even rounds
    local phase=$1 conns=$2 round=$3 path=$4 lua=$5 targets=("${@:6}") t k result rps p50 p99 errors requests own desc busy
    ((round % 2 == 0)) && targets=($(printf '%s\n' "${targets[@]}" | tac))
    for t in "${targets[@]}"; do
        k="$phase,$t,$conns,$round"
        result=$(run_load "$t" "$conns" "$DURATION" "$path" "$lua")
        read -r rps p50 p99 errors requests own desc busy <<<"$result"
        RPS[$k]=$rps P50[$k]=$p50 P99[$k]=$p99 ERR[$k]=$errors BUSY[$k]=$busy
        CPUMS[$k]=$(awk -v c="$own" -v n="$requests" 'BEGIN { printf "%.4f", (n > 0 ? 1000 * c / n : 0) }')
        PGMS[$k]=$(awk -v c="$desc" -v n="$requests" 'BEGIN { printf "%.4f", (n > 0 ? 1000 * c / n : 0) }')
        log "  #$round $t c$conns: $rps req/s, p50 $p50, p99 $p99, CPU ${CPUMS[$k]} ms/req$(is_parley "$t" && echo " (its PostgreSQL ${PGMS[$k]})"), machine ${busy}% busy"
        [[ $errors == 0 ]] || log "  warning: $t had $errors errors or non-2xx responses at $conns connections"
    done
}

for t in "${ORDER[@]}"; do
    log "warm-up: $t"
    run_load "$t" 64 2s >/dev/null
done
for ((r = 1; r <= ROUNDS; r++)); do
    for conns in $CONNECTIONS; do
        log "round $r, $conns connections: wrk -t$THREADS -c$conns -d$DURATION /healthz"
        measure_round healthz "$conns" "$r" /healthz "" "${ORDER[@]}"
    done
done

USER_TARGETS=()
if [[ $USERS == 1 ]]; then
    for t in parley parley-base; do wants "$t" && USER_TARGETS+=("$t"); done
fi
for t in "${USER_TARGETS[@]}"; do
    [[ -n ${KEY_OF[$t]} ]] || die "no PARLEY_KEY in $t's output"
    BASE="http://127.0.0.1:${PORT_OF[$t]}" PARLEY_KEY=${KEY_OF[$t]}
    api -X PATCH "$BASE/v1/settings" -d '{"rate_limit_app_rps":100000}' >/dev/null
    import_users 1000
    [[ $(api "$BASE/v1/users/u1000" -o /dev/null -w '%{http_code}') == 200 ]] || die "user u1000 missing on $t"
    log "warm-up: $t, GET /v1/users/{id}"
    run_load "$t" "$USERS_CONNECTIONS" 2s / get_user.lua >/dev/null
done
if ((${#USER_TARGETS[@]} > 0)); then
    for ((r = 1; r <= ROUNDS; r++)); do
        log "round $r: wrk -t$THREADS -c$USERS_CONNECTIONS -d$DURATION GET /v1/users/{id} (bench/lua/get_user.lua)"
        measure_round users "$USERS_CONNECTIONS" "$r" / get_user.lua "${USER_TARGETS[@]}"
    done
fi

# --- report -------------------------------------------------------------------------------------------------

RSS_PEAK=0
RSS_SAMPLED=0
if wants parley; then
    RSS_PEAK=$(rss_kib "$PARLEY_PID" VmHWM)
    RSS_SAMPLED=$(cat "$TMP/rss-max" 2>/dev/null || echo 0)
    kill -0 "$PARLEY_PID" 2>/dev/null || die "parley exited during the benchmark"
fi

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
series() {  # array-name phase target conns: every round's value, "a, b, c"
    local -n values=$1
    local r out=()
    for ((r = 1; r <= ROUNDS; r++)); do out+=("${values[$2,$3,$4,$r]}"); done
    local IFS=,
    echo "${out[*]}" | sed 's/,/, /g'
}
stat_of() {  # array-name phase target conns: the median over the rounds
    local -n values=$1
    local r out=()
    for ((r = 1; r <= ROUNDS; r++)); do out+=("${values[$2,$3,$4,$r]}"); done
    median "${out[@]}"
}
median_round() {  # phase target conns: the round with the median rate (its latencies stand for the row)
    local r
    for ((r = 1; r <= ROUNDS; r++)); do echo "${RPS[$1,$2,$3,$r]} $r"; done | sort -g | awk -v m=$(((ROUNDS + 1) / 2)) 'NR == m { print $2 }'
}
errors_of() { local r sum=0; for ((r = 1; r <= ROUNDS; r++)); do sum=$((sum + ${ERR[$1,$2,$3,$r]})); done; echo "$sum"; }
ratio() { awk -v p="$1" -v n="$2" 'BEGIN { if (n == 0) print "—"; else printf "%.2f×", p / n }'; }

table() {  # phase conns-list targets...
    local phase=$1 conn_list=$2 targets=("${@:3}") conns t m
    echo "| conns | server | req/s (median) | every round | CPU ms/request (median) | every round | p50 / p99 (median round) | machine busy | errors |"
    echo "|---:|---|---:|---|---:|---|---|---|---:|"
    for conns in $conn_list; do
        for t in "${targets[@]}"; do
            m=$(median_round "$phase" "$t" "$conns")
            local cpu="$(stat_of CPUMS "$phase" "$t" "$conns")" every="$(series CPUMS "$phase" "$t" "$conns")"
            if is_parley "$t" && [[ $phase == users ]]; then
                cpu="$cpu + PG $(stat_of PGMS "$phase" "$t" "$conns")"
                every="$every (PG $(series PGMS "$phase" "$t" "$conns"))"
            fi
            printf '| %s | %s | %.0f | %s | %s | %s | %s / %s | %s %% | %s |\n' "$conns" "$t" "$(stat_of RPS "$phase" "$t" "$conns")" \
                "$(series RPS "$phase" "$t" "$conns" | awk -F', ' '{ for (i = 1; i <= NF; i++) printf "%s%.0f", (i > 1 ? ", " : ""), $i }')" \
                "$cpu" "$every" "${P50[$phase,$t,$conns,$m]}" "${P99[$phase,$t,$conns,$m]}" "$(series BUSY "$phase" "$t" "$conns")" \
                "$(errors_of "$phase" "$t" "$conns")"
        done
    done
}

ratios() {  # phase conns-list a b: "a / b" of the median CPU per request and req/s at each connection count
    local phase=$1 conn_list=$2 a=$3 b=$4 conns out=()
    wants "$a" && wants "$b" || return 0
    for conns in $conn_list; do
        out+=("$(ratio "$(stat_of CPUMS "$phase" "$a" "$conns")" "$(stat_of CPUMS "$phase" "$b" "$conns")") CPU per request and $(ratio "$(stat_of RPS "$phase" "$a" "$conns")" "$(stat_of RPS "$phase" "$b" "$conns")") req/s at $conns")
    done
    local IFS=';'
    echo "- $a / $b (medians): ${out[*]}" | sed 's/;/; /g'
}

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — GET /healthz, parley vs nginx, CPU per request"
    echo
    machine_lines
    echo "- load: \`wrk -t$THREADS -c<conns> -d$DURATION --latency\` on the same machine, loopback; $ROUNDS rounds, each running every server once per connection count (order reversed every other round); servers: ${ORDER[*]}"
    echo "- nginx${NGINX:+ $("$NGINX" -v 2>&1 | sed 's/.*nginx\///')}: nginx1 = worker_processes 1, nginx = worker_processes auto ($(nproc) workers); parley: PARLEY_LOG_LEVEL=${PARLEY_LOG_LEVEL:-error}${PARLEY_BASE_CMD:+; parley-base: \`${PARLEY_BASE_CMD}\`}"
    echo "- CPU per request: the server's user + system CPU over the wrk run (/proc, all threads; nginx's master and workers) over the requests wrk completed; machine busy = all CPUs over the run (the rest is wrk and other sessions)"
    echo "- load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    table healthz "$CONNECTIONS" "${ORDER[@]}"
    echo
    ratios healthz "$CONNECTIONS" parley nginx1
    ratios healthz "$CONNECTIONS" parley nginx
    ratios healthz "$CONNECTIONS" parley parley-base
    if wants parley; then
        echo "- Parley RSS: idle $(mib "$RSS_IDLE"), peak $(mib "$RSS_PEAK") (VmHWM), largest sampled under load $(mib "$RSS_SAMPLED")."
    fi
    if ((${#USER_TARGETS[@]} > 0)); then
        echo
        echo "GET /v1/users/{id} with the app key (bench/lua/get_user.lua, 1000 users; the handler runs on a pool worker thread and its answer goes back through the event loop); CPU of Parley's process + its PostgreSQL's:"
        echo
        table users "$USERS_CONNECTIONS" "${USER_TARGETS[@]}"
        echo
        ratios users "$USERS_CONNECTIONS" parley parley-base
    fi
)

record_section "$SECTION"
