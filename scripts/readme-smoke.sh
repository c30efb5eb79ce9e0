#!/usr/bin/env bash
# Runs every example of README.md and then of docs/tutorial.md, in order, against the release binary on a fresh data
# directory, so neither page can drift from the server. Fails on any non-2xx answer unless the page shows that status
# next to it (a comment `# → 404` on the example's line), and on a `.build/release/parley` command that does not exit
# 0 (or the `# → exit N` it shows). README_SMOKE_BODIES=1 also prints the start of every answer.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

swift build -c release --product parley 2>&1 | tail -n 1
bin=.build/release/parley
# shellcheck source=scripts/serve-fresh.sh
source scripts/serve-fresh.sh
serve_fresh "$bin" smoke

# Values the examples refer to: the first start's keys, as its banner prints them (the admin key also in its file).
export PARLEY="http://127.0.0.1:$port"
export PARLEY_ADMIN_KEY; PARLEY_ADMIN_KEY=$(cat "$data/admin_key")
grep -q '^PARLEY_KEY=' "$log" || { cat "$log"; echo "the first start printed no PARLEY_KEY= line"; exit 1; }
export PARLEY_KEY; PARLEY_KEY=$(grep '^PARLEY_KEY=' "$log" | head -1 | cut -d= -f2-)
[ "$(grep '^PARLEY_ADMIN_KEY=' "$log" | head -1 | cut -d= -f2-)" = "$PARLEY_ADMIN_KEY" ] \
  || { cat "$log"; echo "the first start's PARLEY_ADMIN_KEY= line is not the saved admin key"; exit 1; }

pages=(README.md docs/tutorial.md)
python3 scripts/readme_examples.py "${pages[@]}" >"$data/examples.sh"
count=$(grep -cE '^run_(example|command) ' "$data/examples.sh" || true)
echo "running $count examples of ${pages[*]} against $PARLEY"
# The examples run as a reader's would, from a clone's directory; files they write (an export) land in a scratch
# copy of it, removed with the data directory.
work="$data/clone"
mkdir "$work"
ln -s "$repo/docs" "$work/docs"
ln -s "$repo/.build" "$work/.build"
cd "$work"
# shellcheck disable=SC1091
source "$data/examples.sh"
echo "README and tutorial examples all answered as shown ($count examples)"
