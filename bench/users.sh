#!/usr/bin/env bash
# GET /v1/users/{id} with an app key (wrk) beside pgbench running the same SELECT (-M prepared, same number
# of clients) on the same embedded PostgreSQL, in one run; appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_CONNECTIONS="64", BENCH_DURATION=10s,
#              BENCH_THREADS=2, BENCH_RESULTS=path, BENCH_NO_RECORD=1, BENCH_NOTE="…"
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONNECTIONS=${BENCH_CONNECTIONS:-64}
DURATION=${BENCH_DURATION:-10s}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
require_pgbench

build_parley
start_parley
import_users 1000
[[ $(api "$BASE/v1/users/u1000" -o /dev/null -w '%{http_code}') == 200 ]] || die "user u1000 missing"

for conns in $CONNECTIONS; do run_pair "$conns connections" get_user.sql get_user.lua "$conns"; done

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — GET /v1/users/{id} (app key) vs pgbench, same SELECT"
    echo
    machine_lines
    echo "- parley: release build, embedded PostgreSQL 15, default pool (2 per core, ≥ 4), log level error; 1000 users; wrk picks a random user per request"
    echo "- pgbench: \`-M prepared -j $THREADS\`, bench/sql/get_user.sql (the SELECT the route runs) over the same Unix socket; wrk and pgbench alternate for $ROUNDS rounds of $DURATION, the row shows the round with the median ratio"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    echo "$PAIR_HEADER"
    for conns in $CONNECTIONS; do pair_row "$conns connections"; done
)
record_section "$SECTION"
