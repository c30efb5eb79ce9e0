#!/usr/bin/env bash
# Runs every curl example of README.md against the release binary on a fresh data directory, so the README
# cannot drift from the server. Fails on any non-2xx answer unless the README shows that status next to it
# (a comment `# → 404` on the example's line).
set -euo pipefail
cd "$(dirname "$0")/.."

swift build -c release --product parley 2>&1 | tail -n 1
bin=.build/release/parley
# shellcheck source=scripts/serve-fresh.sh
source scripts/serve-fresh.sh
serve_fresh "$bin" smoke

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
