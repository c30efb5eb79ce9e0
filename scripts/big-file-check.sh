#!/usr/bin/env bash
# A 1 GiB file up and down through the release server with its memory watched (docs/files.md#operations): bodies
# stream in bounded pieces in both directions, so the server's RSS must stay flat whatever the file's size. Starts the
# release binary on a fresh data directory (serve-fresh.sh), uploads 1 GiB of pseudo-random bytes as a chunked body
# (`curl -T -`), downloads it, compares SHA-256s, and fails when the RSS sampled every 0.2 s during the transfers rose
# more than BIG_FILE_RSS_LIMIT_MIB (64) above what it was before them. Builds nothing (CI's README smoke step built
# .build/release/parley; PARLEY_BIN overrides it). About 30 s here; BIG_FILE_MIB changes the size.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${PARLEY_BIN:-.build/release/parley}
mib=${BIG_FILE_MIB:-1024}
limit_mib=${BIG_FILE_RSS_LIMIT_MIB:-64}
[ -x "$bin" ] || { echo "no server binary at $bin (swift build -c release --product parley, or set PARLEY_BIN)"; exit 1; }

# shellcheck source=scripts/serve-fresh.sh
source scripts/serve-fresh.sh
serve_fresh "$bin" big-file
key=$(grep '^PARLEY_KEY=' "$log" | head -1 | cut -d= -f2-)
base="http://127.0.0.1:$port"
work=$(mktemp -d /tmp/parley-big-file-XXXXXX)
sampler=""
cleanup_work() { [ -n "$sampler" ] && kill "$sampler" 2>/dev/null; rm -rf "$work"; }
trap 'cleanup_work; kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$data" "$log"' EXIT

curl -sf -X PATCH "$base/v1/settings" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
  -d '{"file_max_bytes":2147483648}' >/dev/null

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status"; }
baseline=$(rss_kib)
(while :; do rss_kib; sleep 0.2; done) >"$work/rss.txt" &
sampler=$!

# The same bytes twice from a seeded generator: no copy of the file on disk, and the hash is known without one.
# (The generator ends by SIGPIPE when `head` has enough: not a failure.)
bytes() { (openssl enc -aes-128-ctr -pass pass:parley-big-file -nosalt -pbkdf2 </dev/zero 2>/dev/null || true) | head -c "$((mib * 1024 * 1024))"; }
expected=$(bytes | sha256sum | cut -d' ' -f1)

started=$(date +%s.%N)
answer=$(bytes | curl -sSf -X POST -T - "$base/v1/files" -H "Authorization: Bearer $key" -H 'Parley-File-Name: big.bin' \
  -H 'Content-Type: application/octet-stream')
uploaded=$(date +%s.%N)
file_id=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["file_id"])' "$answer")
stored=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["sha256"])' "$answer")
got=$(curl -sSf "$base/v1/files/$file_id" -H "Authorization: Bearer $key" | sha256sum | cut -d' ' -f1)
downloaded=$(date +%s.%N)
kill "$sampler"
sampler=""

[ "$stored" = "$expected" ] || { echo "the server hashed $stored, the bytes sent hash to $expected"; exit 1; }
[ "$got" = "$expected" ] || { echo "the download hashes to $got, expected $expected"; exit 1; }
peak=$(sort -n "$work/rss.txt" | tail -1)
rise=$(((peak - baseline) / 1024))
python3 - "$started" "$uploaded" "$downloaded" "$mib" "$baseline" "$peak" <<'EOF'
import sys
started, uploaded, downloaded, mib, baseline, peak = map(float, sys.argv[1:])
print(f"{mib:.0f} MiB: upload {uploaded - started:.1f} s ({mib / (uploaded - started):.0f} MiB/s), "
      f"download {downloaded - uploaded:.1f} s ({mib / (downloaded - uploaded):.0f} MiB/s); "
      f"server RSS {baseline / 1024:.1f} MiB before, at most {peak / 1024:.1f} MiB during")
EOF
[ "$rise" -le "$limit_mib" ] || { echo "RSS rose by $rise MiB during the transfers (limit $limit_mib MiB): not flat"; exit 1; }
echo "big file check passed: byte for byte, RSS rose by $rise MiB"
