#!/usr/bin/env bash
# The `s3` file storage backend end to end (docs/files.md#storage): starts moto (an S3-compatible server from PyPI, in a
# venv under .build) on a free loopback port with its authentication on, so every request Parley signs is verified by
# moto's own Signature Version 4 (botocore's); creates an IAM user, its key and a bucket; starts Parley with
# PARLEY_FILES_BACKEND=s3 on a fresh data directory, and runs scripts/s3-check.py against both. Everything it starts
# it stops by pid.
# S3_CHECK_BIN picks the binary (default: the release build, built here).
set -euo pipefail
cd "$(dirname "$0")/.."

S3_VENV=${S3_VENV:-.build/s3-venv}
if [ ! -x "$S3_VENV/bin/moto_server" ] || ! "$S3_VENV/bin/python" -c 'import boto3' 2>/dev/null; then
  python3 -m venv "$S3_VENV"
  "$S3_VENV/bin/pip" install -q 'moto[server]==5.2.6' 'boto3==1.44.18'
fi

bin=${S3_CHECK_BIN:-.build/release/parley}
[ -n "${S3_CHECK_BIN:-}" ] || swift build -c release --product parley 2>&1 | tail -n 1

moto_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
moto_log=$(mktemp /tmp/parley-moto-XXXXXX.log)
# The first 3 requests (the IAM user, its policy, its key) need no signature; every later one must be signed right.
INITIAL_NO_AUTH_ACTION_COUNT=3 "$S3_VENV/bin/moto_server" -H 127.0.0.1 -p "$moto_port" >"$moto_log" 2>&1 &
moto_pid=$!
stop_moto() { kill "$moto_pid" 2>/dev/null || true; wait "$moto_pid" 2>/dev/null || true; rm -f "$moto_log"; }
for _ in $(seq 1 60); do
  # A TCP connect, not a request: a request would use up one of the unauthenticated ones.
  python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' "$moto_port" 2>/dev/null && break
  kill -0 "$moto_pid" 2>/dev/null || { cat "$moto_log"; echo "moto exited"; exit 1; }
  sleep 0.25
done
bucket=parley-files
read -r access_key_id secret_access_key < <("$S3_VENV/bin/python" scripts/s3-check.py setup "http://127.0.0.1:$moto_port" "$bucket")

s3_settings=(PARLEY_FILES_S3_ENDPOINT="http://127.0.0.1:$moto_port" PARLEY_FILES_S3_BUCKET="$bucket" PARLEY_FILES_S3_REGION=us-east-1
  PARLEY_FILES_S3_ACCESS_KEY_ID="$access_key_id" PARLEY_FILES_S3_SECRET_ACCESS_KEY="$secret_access_key")
# shellcheck source=scripts/serve-fresh.sh
source scripts/serve-fresh.sh
serve_fresh "$bin" s3 PARLEY_FILES_BACKEND=s3 "${s3_settings[@]}"
state=$(mktemp /tmp/parley-s3-state-XXXXXX)
trap 'stop_moto; kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$data" "$log" "$state"*' EXIT
key=$(grep '^PARLEY_KEY=' "$log" | head -1 | cut -d= -f2-)

# The same data directory again, with backend $1 (the server before it stopped by its pid).
restart() {
  kill -INT "$pid"; wait "$pid" 2>/dev/null || true
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
  env PARLEY_FILES_BACKEND="$1" "${s3_settings[@]}" "$bin" serve --data-dir "$data" --listen "127.0.0.1:$port" >>"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  tail -n 40 "$log"; echo "the server did not start again with backend $1"; exit 1
}

phase() {
  echo "-- phase $1"
  if ! S3_ACCESS_KEY_ID="$access_key_id" S3_SECRET_ACCESS_KEY="$secret_access_key" "$S3_VENV/bin/python" scripts/s3-check.py "$1" \
    "http://127.0.0.1:$port" "$key" "http://127.0.0.1:$moto_port" "$bucket" "$data" "$moto_pid" "$state"; then
    echo "== server log"; tail -n 40 "$log"
    echo "== moto log"; tail -n 20 "$moto_log" 2>/dev/null || true
    exit 1
  fi
}

phase s3
restart postgres
phase postgres
restart s3
phase back
# With S3_CHECK_TIMING the last phase moved 100 MiB up and down: the server's peak resident memory says whether it
# stayed flat.
if [ -n "${S3_CHECK_TIMING:-}${S3_CHECK_RSS:-}" ]; then grep VmHWM "/proc/$pid/status"; fi
