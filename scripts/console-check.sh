#!/usr/bin/env bash
# The admin console in a real browser: starts the release binary on a fresh data directory and drives Debian's
# Chromium, headless, through playwright (scripts/console_check.py). Builds nothing: CI's README smoke step built
# .build/release/parley (PARLEY_BIN overrides it). Screenshots of every screen go to
# ${CONSOLE_SCREENSHOTS:-/tmp/parley-console}. Every step has a timeout; the whole check stays under 3 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${PARLEY_BIN:-.build/release/parley}
shots=${CONSOLE_SCREENSHOTS:-/tmp/parley-console}
venv=${CONSOLE_VENV:-.build/console-venv}
[ -x "$bin" ] || { echo "no server binary at $bin (swift build -c release --product parley, or set PARLEY_BIN)"; exit 1; }
command -v "${CHROMIUM:-chromium}" >/dev/null || { echo "no chromium (apt-get install chromium, or set CHROMIUM)"; exit 1; }

# playwright only as the DevTools driver: the system Chromium is the browser, so no `playwright install`.
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import playwright' 2>/dev/null; then
  python3 -m venv "$venv"
  timeout 120 "$venv/bin/pip" install -q playwright==1.65.2
fi

# The console files of this checkout, whatever the binary would find on its own.
# shellcheck source=scripts/serve-fresh.sh
source scripts/serve-fresh.sh
serve_fresh "$bin" console PARLEY_CONSOLE_DIR="$PWD/console"

app_key=$(grep '^PARLEY_KEY=' "$log" | head -1 | cut -d= -f2-)
[ -n "$app_key" ] || { cat "$log"; echo "no PARLEY_KEY in the start-up log"; exit 1; }
admin_key=$(cat "$data/admin_key")

set +e
timeout 150 "$venv/bin/python" scripts/console_check.py "http://127.0.0.1:$port" "$app_key" "$admin_key" "$shots"
status=$?
[ "$status" -ne 0 ] || { timeout 150 "$venv/bin/python" scripts/console_check_ops.py "http://127.0.0.1:$port" "$app_key" "$admin_key" "$shots"; status=$?; }
set -e
if [ "$status" -ne 0 ]; then
  echo "== server log (last 40 lines)"; tail -n 40 "$log"
  echo "the console check failed (exit $status)"; exit "$status"
fi
echo "console-check: both browser checks passed in ${SECONDS} s of wall time (server start included; the target is under 180 s)"
