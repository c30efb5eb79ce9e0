#!/usr/bin/env bash
# Fuzzes Parley from outside, with tools someone else wrote; CI runs it with a small budget.
#
#   1. The HTTP/1.1 request parser under libFuzzer (fuzz/, built with --sanitize=fuzzer): no crash, no trap, and
#      the same outcome whatever the bytes' arrival (fuzz/Sources/HTTPParserFuzz). Seeds: fuzz/corpus/http-parser.
#   2. The API under schemathesis (from PyPI), generated from the server's own /openapi.json, against the release
#      server on a fresh embedded PostgreSQL: once with an app key (every app route), then with the server admin key
#      (the /v1/apps and /v1/test routes). Fails on any 5xx, any answer outside the document (status, content type,
#      body schema) and any crash. scripts/fuzz_hooks.py keeps the fuzzer from throttling or reconfiguring its own app
#      (fresh Idempotency-Keys, settings put back after each PATCH /v1/settings) and counts how many requests reached
#      a handler; more than 5 % answered 429 or 422 idempotency_key_reused before one fails the run.
#
# usage: scripts/fuzz.sh [parser|api|all]      (default all)
# Environment: FUZZ_PARSER_RUNS (1000000), FUZZ_PARSER_SECONDS (120), FUZZ_API_EXAMPLES (cases per operation and
#              credential, 30), FUZZ_API_SECONDS (time budget per credential, 300), FUZZ_SEED, FUZZ_SKIP_BUILD=1 (use
#              the release binary already in .build), FUZZ_VENV (where schemathesis is installed; .build/fuzz-venv).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BENCH_SKIP_BUILD=${FUZZ_SKIP_BUILD:-0}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
log() { printf '[fuzz] %s\n' "$*" >&2; }

WHAT=${1:-all}
PARSER_RUNS=${FUZZ_PARSER_RUNS:-1000000}
PARSER_SECONDS=${FUZZ_PARSER_SECONDS:-120}
API_EXAMPLES=${FUZZ_API_EXAMPLES:-30}
API_SECONDS=${FUZZ_API_SECONDS:-300}
SEED=${FUZZ_SEED:-$RANDOM}
VENV=${FUZZ_VENV:-$ROOT/.build/fuzz-venv}
# Logs and reports stay here after the run (the server's own log too).
OUT=${FUZZ_OUT:-$ROOT/.build/fuzz}
rm -rf "$OUT" && mkdir -p "$OUT"
# The schemathesis release this script was written against (its CLI and checks change between majors).
SCHEMATHESIS=schemathesis==4.32.5

fuzz_parser() {
    log "building the parser fuzz target (libFuzzer)"
    swift build --package-path fuzz -c release --sanitize=fuzzer --product HTTPParserFuzz >"$TMP/fuzz-build.log" 2>&1 \
        || { tail -n 40 "$TMP/fuzz-build.log" >&2; die "fuzz target build failed"; }
    # New inputs go to a scratch directory; the seeds in the repository are read only.
    mkdir -p "$TMP/corpus"
    log "parser: up to $PARSER_RUNS runs or ${PARSER_SECONDS}s, seed $SEED"
    "$ROOT/fuzz/.build/release/HTTPParserFuzz" "$TMP/corpus" "$ROOT/fuzz/corpus/http-parser" \
        -runs="$PARSER_RUNS" -max_total_time="$PARSER_SECONDS" -max_len=2048 -timeout=10 -seed="$SEED" \
        -artifact_prefix="$OUT/" -print_final_stats=1 >"$OUT/parser.log" 2>&1 || {
        tail -n 60 "$OUT/parser.log" >&2
        for crash in "$OUT"/crash-* "$OUT"/timeout-* "$OUT"/oom-*; do [[ -e $crash ]] && log "input: $(od -c "$crash" | head -20)"; done
        die "the parser fuzzer found a failure"
    }
    log "parser: $(grep -E '^stat::number_of_executed_units' "$OUT/parser.log" | awk '{print $2}') inputs, no failure;" \
        "corpus $(find "$TMP/corpus" -type f | wc -l) new + $(find "$ROOT/fuzz/corpus/http-parser" -type f | wc -l) seeds"
}

install_schemathesis() {
    if ! "$VENV/bin/schemathesis" --version 2>/dev/null | grep -q "${SCHEMATHESIS#*==}"; then
        log "installing $SCHEMATHESIS into $VENV"
        python3 -m venv "$VENV" 2>/dev/null || { install_package python3-venv && python3 -m venv "$VENV"; }
        "$VENV/bin/pip" install -q "$SCHEMATHESIS" >"$TMP/pip.log" 2>&1 || { tail -n 20 "$TMP/pip.log" >&2; die "pip install failed"; }
    fi
}

# schemathesis_run label credential [filters…]: one run against $BASE; its log and report land in $OUT.
# One worker: with two, schemathesis' coverage phase calls Python's `ast` from two threads at once, which CPython 3.11
# can fail with "AST constructor recursion depth mismatch" (a runtime error of the tool, not an answer of Parley's;
# CI stopped on it twice). The request timeout is well above Parley's own bounds (2 s per statement, 5 s per ping).
# scripts/fuzz_hooks.py gives every valid Idempotency-Key a fresh value, puts the app's settings back after each
# PATCH /v1/settings (FUZZ_RESTORE_SETTINGS=1) and counts the answers by where the request ended ($OUT/<label>-counts.json).
schemathesis_run() {
    local label=$1 credential=$2
    shift 2
    log "api ($label): $API_EXAMPLES cases per operation, at most ${API_SECONDS}s, seed $SEED"
    PYTHONPATH="$ROOT/scripts" SCHEMATHESIS_HOOKS=fuzz_hooks FUZZ_BASE="$BASE" FUZZ_KEY="$credential" \
        FUZZ_COUNTS="$OUT/$label-counts.json" FUZZ_RESTORE_SETTINGS=${RESTORE_SETTINGS:-0} \
        "$VENV/bin/schemathesis" run "$BASE/openapi.json" --url "$BASE" \
        -H "Authorization: Bearer $credential" \
        --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
        --max-examples "$API_EXAMPLES" --max-time "$API_SECONDS" --seed "$SEED" --workers 1 \
        --request-timeout 20 --suppress-health-check all --no-color \
        --report junit --report-dir "$OUT/$label" "$@" >"$OUT/$label.log" 2>&1
    local status=$?
    # The run's summary, and the failures in full when there are any.
    # (An exit without a FAILURES section is an ERRORS one — network errors, timeouts, schema problems — or a crash
    # of schemathesis itself: the log's end says which.)
    if [[ $status == 0 ]]; then
        sed -n '/= SUMMARY =/,$p' "$OUT/$label.log" >&2
    elif grep -qE '= (FAILURES|ERRORS) =' "$OUT/$label.log"; then
        sed -n '/= \(FAILURES\|ERRORS\) =/,$p' "$OUT/$label.log" >&2
    else
        tail -n 80 "$OUT/$label.log" >&2
    fi
    log "api ($label): exit $status; full log $OUT/$label.log"
    report_reach "$label" || status=1
    return "$status"
}

# report_reach label: how many requests got past the checks before a handler, from the hooks' counts. A run whose
# requests mostly bounce off the rate limit or a reused Idempotency-Key tests those two checks, not the API: more than
# 5 % of them fails the run.
report_reach() {
    python3 - "$OUT/$1-counts.json" "$1" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
n = c["requests"] or 1
bounced = c["rate_limited_429"] + c["idempotency_key_reused_422"]
print(f"[fuzz] api ({sys.argv[2]}): {c['requests']} requests: {c['reached_handler']} reached a route's handler "
      f"({100 * c['reached_handler'] / n:.1f} %); before one: {c['rate_limited_429']} × 429, "
      f"{c['idempotency_key_reused_422']} × 422 idempotency_key_reused, {c['credentials_401_403']} × 401/403; "
      f"{c['server_error_5xx']} × 5xx; settings restored {c['settings_restored']} times", file=sys.stderr)
if bounced > 0.05 * n:
    print(f"[fuzz] api ({sys.argv[2]}): {bounced} of {c['requests']} requests were throttled or refused as key reuse", file=sys.stderr)
    sys.exit(1)
PY
}

fuzz_api() {
    install_schemathesis
    build_parley
    start_parley
    local admin_key failed=0
    admin_key=$(cat "$DATA/admin_key")
    # The app run goes first: the admin run may revoke keys and delete apps.
    # importMessages takes application/x-ndjson, and the tus creation and PATCH application/offset+octet-stream, which
    # schemathesis cannot serialise (it stops with an error rather than skipping); MessageTransferTests and
    # TusUploadsTests try their bad inputs instead, and scripts/tus-check.sh runs a real tus client. downloadFile
    # answers a file's bytes with the type its uploader claimed (docs/files.md#the-file-object): schemathesis decodes a
    # claimed text/* as UTF-8 and fails on the random bytes it uploaded itself; FilesTests and big-file-check.sh try
    # downloads (ranges, conditional requests, signed URLs) instead.
    RESTORE_SETTINGS=1 schemathesis_run app "$PARLEY_KEY" --exclude-path-regex '^/v1/(apps|test)(/|$)' --exclude-operation-id importMessages \
        --exclude-operation-id createUpload --exclude-operation-id appendToUpload --exclude-operation-id downloadFile || failed=1
    schemathesis_run admin "$admin_key" --include-path-regex '^/v1/(apps|test)(/|$)' || failed=1
    cp "$TMP/parley.log" "$OUT/parley.log"
    kill -0 "$PARLEY_PID" 2>/dev/null || die "the server died during the run (see $OUT/parley.log)"
    [[ $failed == 0 ]] || die "schemathesis found failures (above)"
}

case $WHAT in
parser) fuzz_parser ;;
api) fuzz_api ;;
all) fuzz_parser && fuzz_api ;;
*) die "usage: scripts/fuzz.sh [parser|api|all]" ;;
esac
log "no failure"
