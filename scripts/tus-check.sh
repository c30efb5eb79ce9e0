#!/usr/bin/env bash
# Resumable uploads checked by a tus client someone else wrote: starts the server binary on a fresh data directory,
# runs the curl example of docs/files.md#resumable-uploads-tus as written, then uploads a multi-MiB file with tuspy
# (PyPI), cut off mid-way and resumed, and compares the download (scripts/tus_check.py). Builds nothing: CI's README
# smoke step built .build/release/parley (PARLEY_BIN overrides it). Stays well under a minute.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${PARLEY_BIN:-.build/release/parley}
venv=${TUS_VENV:-.build/tus-venv}
[ -x "$bin" ] || { echo "no server binary at $bin (swift build -c release --product parley, or set PARLEY_BIN)"; exit 1; }
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import tusclient' 2>/dev/null; then
  python3 -m venv "$venv"
  timeout 120 "$venv/bin/pip" install -q tuspy==1.1.0
fi

# shellcheck source=scripts/serve-fresh.sh
source scripts/serve-fresh.sh
serve_fresh "$bin" tus

export PARLEY="http://127.0.0.1:$port"
export PARLEY_KEY; PARLEY_KEY=$(grep '^PARLEY_KEY=' "$log" | head -1 | cut -d= -f2-)
[ -n "$PARLEY_KEY" ] || { cat "$log"; echo "no PARLEY_KEY in the start-up log"; exit 1; }
admin_key=$(cat "$data/admin_key")

# The documentation's example, on this server: it must end with a file made.
curl -sf -X POST "$PARLEY/v1/users" -H "Authorization: Bearer $PARLEY_KEY" -H 'Content-Type: application/json' \
  -d '{"user_id":"alice"}' >/dev/null
example=$(awk '/^## Resumable uploads \(tus\)/{on=1} on && /^```sh$/{code=1; next} code && /^```$/{exit} code' docs/files.md |
  sed "s|http://127.0.0.1:8080|$PARLEY|g")
[ -n "$example" ] || { echo "no curl example in docs/files.md#resumable-uploads-tus"; exit 1; }
answers=$(bash -c "set -euo pipefail; $example")
echo "$answers" | grep -qi '^Parley-File-Id: f_' || { echo "$answers"; echo "the documented curl example made no file"; exit 1; }
echo "docs/files.md curl example: the upload became a file"

timeout 120 "$venv/bin/python" scripts/tus_check.py "$PARLEY" "$admin_key"
