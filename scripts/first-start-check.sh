#!/usr/bin/env bash
# The first start anywhere (issue 23): a fresh clone in a directory whose parent is mode 0700 and owned by root (as
# a clone under root's home is on Debian) starts with the README's one command and answers /readyz ready. Run as
# root, the embedded cluster's user (postgres) cannot enter that parent: the server must start anyway, with no change
# to the directory's permissions, and say in its log where the cluster went.
#
# The clone builds from scratch (release), as a new user's would: allow several minutes. Environment:
# FIRST_START_TIMEOUT (seconds until /readyz must answer, default 1200); FIRST_START_BINARY=path: run that release
# binary in the clone instead of the README's `swift run -c release parley` (CI passes the one it has just built: what
# is checked is the start from a 0700 directory, and the README's command is still read and checked to be there).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
timeout_s=${FIRST_START_TIMEOUT:-1200}

[ "$(id -u)" -eq 0 ] || { echo "first-start-check: run as root (the case under test is root's home)"; exit 1; }
parent=$(mktemp -d /tmp/parley-home-XXXXXX)
chmod 700 "$parent"
clone="$parent/parley"
log="$parent/serve.log"
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  # The relocated cluster (the data directory's pg links to it), then the clone.
  if target=$(readlink "$clone/parley-data/pg" 2>/dev/null); then rm -rf "${target%/pg}"; fi
  rm -rf "$parent"
}
trap cleanup EXIT

git clone -q "$ROOT" "$clone"
# The README's one command, exactly as written there (the first line of a fence that runs the server).
command=$(awk '/^```/ { fence = !fence; next } fence && /^swift run .*parley serve$/ { print; exit }' "$clone/README.md")
[ -n "$command" ] || { echo "first-start-check: no 'swift run … parley serve' line in README.md"; exit 1; }
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if [ -n "${FIRST_START_BINARY:-}" ]; then
  binary=$(cd "$(dirname "$FIRST_START_BINARY")" && pwd)/$(basename "$FIRST_START_BINARY")
  [ -x "$binary" ] || { echo "first-start-check: no binary at $FIRST_START_BINARY"; exit 1; }
  command="exec ${binary@Q} serve"
fi
echo "first-start-check: in $clone (parent mode $(stat -c %a "$parent")): $command (PARLEY_LISTEN=127.0.0.1:$port)"

# Its own process group, so that stopping it stops `swift run` and the server it runs.
(cd "$clone" && PARLEY_LISTEN="127.0.0.1:$port" PARLEY_LOG_LEVEL=info exec setsid bash -c "$command") >"$log" 2>&1 &
pid=$!
started=$(date +%s)
until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
  if ! kill -0 "$pid" 2>/dev/null; then tail -n 40 "$log"; echo "first-start-check: the server exited before it was ready"; exit 1; fi
  if [ $(( $(date +%s) - started )) -ge "$timeout_s" ]; then
    tail -n 40 "$log"; echo "first-start-check: not ready within ${timeout_s} s"; exit 1
  fi
  sleep 2
done
how="build included"
[ -n "${FIRST_START_BINARY:-}" ] && how="prebuilt binary"
echo "first-start-check: /readyz ready after $(( $(date +%s) - started )) s ($how)"
grep -q "the cluster lives in" "$log" || { tail -n 40 "$log"; echo "first-start-check: the log does not say where the cluster went"; exit 1; }
grep -m1 "the cluster lives in" "$log"
# The first start's key block (README.md, Quick start): the lines a reader pastes into a shell.
for line in '^PARLEY_ADMIN_KEY=' '^PARLEY_KEY=pk\.default\.' '^export PARLEY_ADMIN_KEY PARLEY_KEY$'; do
  grep -q "$line" "$log" || { tail -n 40 "$log"; echo "first-start-check: no line $line in the first start's output"; exit 1; }
done
[ "$(stat -c %a "$parent")" = "700" ] || { echo "first-start-check: the parent's mode changed"; exit 1; }
echo "first-start-check: passed"
