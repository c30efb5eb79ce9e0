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

data=$(mktemp -d /tmp/parley-console-XXXXXX)
chmod 755 "$data"  # running as root, the embedded cluster runs as postgres and must enter it
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
log="$data.log"
# The console files of this checkout, whatever the binary would find on its own.
PARLEY_CONSOLE_DIR="$PWD/console" "$bin" serve --data-dir "$data" --listen "127.0.0.1:$port" >"$log" 2>&1 &
pid=$!
cleanup() { kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$data" "$log"; }
trap cleanup EXIT

for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "server exited"; exit 1; }
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || { cat "$log"; echo "server not ready"; exit 1; }

app_key=$(grep '^PARLEY_KEY=' "$log" | head -1 | cut -d= -f2-)
[ -n "$app_key" ] || { cat "$log"; echo "no PARLEY_KEY in the start-up log"; exit 1; }
admin_key=$(cat "$data/admin_key")

set +e
timeout 150 "$venv/bin/python" scripts/console_check.py "http://127.0.0.1:$port" "$app_key" "$admin_key" "$shots"
status=$?
set -e
if [ "$status" -ne 0 ]; then
  echo "== server log (last 40 lines)"; tail -n 40 "$log"
  echo "the console check failed (exit $status)"; exit "$status"
fi
