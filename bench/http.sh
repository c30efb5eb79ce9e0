#!/usr/bin/env bash
# Measures `parley serve` against nginx answering GET /healthz ({"status":"ok","database":"running"}) on loopback with wrk,
# in the same run, and appends the results to bench/RESULTS.md. See bench/README.md.
#
# Environment:
#   BENCH_SKIP_BUILD=1        do not run `swift build -c release --product parley`
#   BENCH_SCRATCH_PATH=dir    SwiftPM scratch path for that build (default .build; the binary is <dir>/release/parley)
#   PARLEY_CMD="…"            command that runs the server in the foreground (default: .build/release/parley serve);
#                             it runs under `bash -c "exec …"`, so it must exec the server itself (its PID is the
#                             one measured); PARLEY_PORT and PARLEY_LISTEN are exported to it
#   BENCH_TARGETS="nginx parley"   which servers to measure (e.g. "nginx" to try the nginx half alone)
#   BENCH_CONNECTIONS="64 256"     wrk connection counts
#   BENCH_DURATION=10s        length of each measured wrk run (a 2 s warm-up precedes each server's first run)
#   BENCH_THREADS=2           wrk threads
#   BENCH_RESULTS=path        results file (default bench/RESULTS.md); BENCH_NO_RECORD=1 prints only
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

TARGETS=${BENCH_TARGETS:-"nginx parley"}
CONNECTIONS=${BENCH_CONNECTIONS:-"64 256"}
DURATION=${BENCH_DURATION:-10s}

wants() { [[ " $TARGETS " == *" $1 "* ]]; }
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
if wants nginx; then require_tools nginx; else require_tools; fi

# --- nginx --------------------------------------------------------------------------------------------------

NGINX_PORT=
if wants nginx; then
    mkdir -p "$TMP/nginx"
    NGINX_PORT=$(free_port)
    user_line=""
    [[ $(id -u) -eq 0 ]] && user_line="user root root;"
    sed -e "s|@DIR@|$TMP/nginx|g" -e "s|@PORT@|$NGINX_PORT|g" -e "s|@USER_LINE@|$user_line|" \
        "$ROOT/bench/nginx-http.conf" >"$TMP/nginx/nginx.conf"
    "$NGINX" -t -q -p "$TMP/nginx" -e "$TMP/nginx/error.log" -c "$TMP/nginx/nginx.conf" \
        || die "nginx rejected the generated configuration"
    "$NGINX" -p "$TMP/nginx" -e "$TMP/nginx/error.log" -c "$TMP/nginx/nginx.conf" >"$TMP/nginx/stdout.log" 2>&1 &
    PIDS+=($!)
    wait_ready nginx "$!" "$NGINX_PORT" "$TMP/nginx/error.log"
    check_body nginx "$NGINX_PORT"
    log "nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///') listening on 127.0.0.1:$NGINX_PORT (pid $!)"
fi

# --- parley -------------------------------------------------------------------------------------------------

PARLEY_PID=
PARLEY_PORT=
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
    PARLEY_PORT=$(free_port)
    mkdir -p "$TMP/parley-data"
    export PARLEY_PORT PARLEY_LISTEN="127.0.0.1:$PARLEY_PORT" PARLEY_LOG_LEVEL=${PARLEY_LOG_LEVEL:-error}
    export PARLEY_DATA_DIR="$TMP/parley-data"
    bash -c "exec $PARLEY_CMD" >"$TMP/parley.log" 2>&1 &
    PARLEY_PID=$!
    PIDS=("$PARLEY_PID" "${PIDS[@]}")  # stopped first, so it can stop its embedded PostgreSQL in peace
    log "waiting for parley on 127.0.0.1:$PARLEY_PORT (pid $PARLEY_PID, up to ${READY_TIMEOUT}s)"
    wait_ready parley "$PARLEY_PID" "$PARLEY_PORT" "$TMP/parley.log"
    check_body parley "$PARLEY_PORT"
    sleep 1
    RSS_IDLE=$(rss_kib "$PARLEY_PID" VmRSS)
    log "parley idle RSS: $(mib "$RSS_IDLE")"
fi

# --- load ---------------------------------------------------------------------------------------------------

seconds_of() { local d=$1; case $d in *m) echo $((${d%m} * 60)) ;; *s) echo "${d%s}" ;; *) echo "$d" ;; esac; }
WRK_LIMIT=$(($(seconds_of "$DURATION") + 30))

wrk_target() {  # name port conns duration -> prints "reqs p50 p99 errors"
    local out="$TMP/wrk-$1-$3-$4.txt"
    timeout "$WRK_LIMIT" wrk -t"$THREADS" -c"$3" -d"$4" --latency --timeout 5s "http://127.0.0.1:$2/healthz" >"$out" 2>&1 \
        || { cat "$out" >&2; die "wrk against $1 failed"; }
    awk '
        /^Requests\/sec:/ { rps = $2 }
        $1 == "50%" { p50 = $2 }
        $1 == "99%" { p99 = $2 }
        /Non-2xx or 3xx responses:/ { errors += $NF }
        /Socket errors:/ { gsub(",", ""); errors += $4 + $6 + $8 + $10 }
        END { printf "%s %s %s %d\n", (rps == "" ? "0" : rps), (p50 == "" ? "?" : p50), (p99 == "" ? "?" : p99), errors }
    ' "$out"
}

sample_rss() {  # background: keeps the largest VmRSS of parley in $TMP/rss-max
    local max=0 now
    while kill -0 "$PARLEY_PID" 2>/dev/null; do
        now=$(rss_kib "$PARLEY_PID" VmRSS)
        ((now > max)) && { max=$now; echo "$max" >"$TMP/rss-max"; }
        sleep 0.2
    done
}

if [[ -n $PARLEY_PID ]]; then
    sample_rss &
    SAMPLER_PID=$!
fi

declare -A RPS P50 P99 ERR
for target in nginx parley; do
    wants "$target" || continue
    port=$([[ $target == nginx ]] && echo "$NGINX_PORT" || echo "$PARLEY_PORT")
    log "warm-up: $target"
    wrk_target "$target" "$port" 64 2s >/dev/null
done
for conns in $CONNECTIONS; do
    for target in nginx parley; do
        wants "$target" || continue
        port=$([[ $target == nginx ]] && echo "$NGINX_PORT" || echo "$PARLEY_PORT")
        log "wrk -t$THREADS -c$conns -d$DURATION against $target"
        result=$(wrk_target "$target" "$port" "$conns" "$DURATION")
        read -r rps p50 p99 errors <<<"$result"
        RPS[$target,$conns]=$rps P50[$target,$conns]=$p50 P99[$target,$conns]=$p99 ERR[$target,$conns]=$errors
        log "  $target: $rps req/s, p50 $p50, p99 $p99"
        [[ $errors == 0 ]] || log "  warning: $target had $errors errors or non-2xx responses at $conns connections"
    done
done

# --- report -------------------------------------------------------------------------------------------------

RSS_PEAK=0
RSS_SAMPLED=0
if [[ -n $PARLEY_PID ]]; then
    RSS_PEAK=$(rss_kib "$PARLEY_PID" VmHWM)
    RSS_SAMPLED=$(cat "$TMP/rss-max" 2>/dev/null || echo 0)
    kill -0 "$PARLEY_PID" 2>/dev/null || die "parley exited during the benchmark"
fi

cell() { if [[ -n ${1:-} ]]; then printf '%s' "$1"; else printf '—'; fi; }
ratio() { awk -v p="${1:-}" -v n="${2:-}" 'BEGIN { if (p == "" || n == "" || n == 0) print "—"; else printf "%.2f×", p / n }'; }
fmt_rps() { if [[ -n ${1:-} ]]; then awk -v r="$1" 'BEGIN { printf "%.0f", r }'; else printf '—'; fi; }

table() {
    echo "| conns | nginx req/s | parley req/s | parley/nginx | nginx p50 / p99 | parley p50 / p99 | errors (nginx / parley) |"
    echo "|---:|---:|---:|---:|---|---|---|"
    for conns in $CONNECTIONS; do
        local n=${RPS[nginx,$conns]:-} p=${RPS[parley,$conns]:-}
        printf '| %s | %s | %s | %s | %s | %s | %s / %s |\n' "$conns" "$(fmt_rps "$n")" "$(fmt_rps "$p")" "$(ratio "$p" "$n")" \
            "$(cell "${P50[nginx,$conns]:-}")${P99[nginx,$conns]:+ / ${P99[nginx,$conns]}}" \
            "$(cell "${P50[parley,$conns]:-}")${P99[parley,$conns]:+ / ${P99[parley,$conns]}}" \
            "$(cell "${ERR[nginx,$conns]:-}")" "$(cell "${ERR[parley,$conns]:-}")"
    done
    echo
    if [[ -n $PARLEY_PID ]]; then
        echo "Parley RSS: idle $(mib "$RSS_IDLE"), peak $(mib "$RSS_PEAK") (VmHWM), largest sampled under load $(mib "$RSS_SAMPLED")."
    fi
}

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — GET /healthz, parley vs nginx"
    echo
    machine_lines
    echo "- load: \`wrk -t$THREADS -c<conns> -d$DURATION --latency\` on the same machine, loopback; nginx ${NGINX:+$("$NGINX" -v 2>&1 | sed 's/.*nginx\///')} with worker_processes auto; servers: $TARGETS"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    table
)

record_section "$SECTION"
