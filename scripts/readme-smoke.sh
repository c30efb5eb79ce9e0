#!/usr/bin/env bash
# Runs every curl example of README.md against the release binary on a fresh data directory, so the README
# cannot drift from the server. Fails on any non-2xx answer unless the README shows that status next to it
# (a comment `# → 404` on the example's line).
set -euo pipefail
cd "$(dirname "$0")/.."

swift build -c release --product parley 2>&1 | tail -n 1
bin=.build/release/parley
data=$(mktemp -d /tmp/parley-smoke-XXXXXX)
chmod 755 "$data"  # running as root, the embedded cluster runs as postgres and must enter it
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
log="$data.log"
"$bin" serve --data-dir "$data" --listen "127.0.0.1:$port" >"$log" 2>&1 &
pid=$!
cleanup() { kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$data" "$log"; }
trap cleanup EXIT

for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "server exited"; exit 1; }
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || { cat "$log"; echo "server not ready"; exit 1; }

# Values the README examples refer to.
export PARLEY="http://127.0.0.1:$port"
export PARLEY_ADMIN_KEY; PARLEY_ADMIN_KEY=$(cat "$data/admin_key")
if grep -q '^PARLEY_KEY=' "$log"; then export PARLEY_KEY; PARLEY_KEY=$(grep '^PARLEY_KEY=' "$log" | head -1 | cut -d= -f2-); fi

python3 scripts/readme_examples.py README.md >"$data/examples.sh"
count=$(grep -c '^run_example' "$data/examples.sh" || true)
echo "running $count README examples against $PARLEY"
# shellcheck disable=SC1091
source "$data/examples.sh"
echo "README examples all answered as shown ($count examples)"
