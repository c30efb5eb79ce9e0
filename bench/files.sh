#!/usr/bin/env bash
# Files (docs/files.md): upload and download throughput of a 1 MiB and a BENCH_BIG_MIB (100) MiB random file through a
# release-build Parley on its embedded PostgreSQL, beside the physical limits of the same bytes on the same machine in
# the same run — `cp` + `sync` and `dd` of the file, psql's `\copy` of the stored chunks to /dev/null (reading the
# same bytes straight out of PostgreSQL), and psql's binary \copy writing the same bytes as bytea, 256 KiB a row (the
# upload's floor: pgbench's scripts cannot carry client bytes, COPY carries them as they are) — with CPU
# seconds of Parley and of its PostgreSQL per MiB from /proc; then image derivation: the three variants of a
# 12-megapixel JPEG per upload, beside `vipsthumbnail` making one of them. BENCH_ROUNDS (3) rounds each; the table
# shows the median. Server RSS is sampled every 0.2 s during the big transfers.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_BIG_MIB=100, BENCH_ROUNDS=3, BENCH_RESULTS=path,
#              BENCH_NO_RECORD=1
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BIG_MIB=${BENCH_BIG_MIB:-100}
ROUNDS=${BENCH_ROUNDS:-3}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
require_pgbench
command -v vips >/dev/null && command -v vipsthumbnail >/dev/null || die "vips and vipsthumbnail are needed (apt-get install libvips-tools)"

build_parley
start_parley
api -X PATCH "$BASE/v1/settings" -d "{\"file_max_bytes\":$(((BIG_MIB + 1) << 20)),\"image_max_bytes\":104857600}" >/dev/null
psql_run() { psql -h "$DATA/run" -p 5432 -U parley -d postgres -X -qtA "$@"; }

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# CPU of Parley and its PostgreSQL over a command: "seconds parley_cpu pg_cpu".
timed() {
    local before after started ended
    before=$(cpu_snapshot)
    started=$(now)
    "$@" >/dev/null
    ended=$(now)
    after=$(cpu_snapshot)
    echo "$(elapsed "$started" "$ended") $(cpu_delta "$before" "$after" | awk '{ print $1, $2 }')"
}
# `-T` streams the file (`--data-binary @file` reads it whole into curl's memory first, which fails at 1 GiB).
upload() { curl -fsS -o "$TMP/upload.json" -H "Authorization: Bearer $PARLEY_KEY" -H "Parley-File-Name: $(basename "$1")" \
    -H 'Content-Type: application/octet-stream' -X POST -T "$1" "$BASE/v1/files"; }
download() { curl -fsS -o /dev/null -H "Authorization: Bearer $PARLEY_KEY" "$BASE/v1/files/$1"; }
copy_out() { psql_run -c "\\copy (SELECT data FROM file_chunks WHERE blob_id = '$1' ORDER BY n) TO '/dev/null'"; }
cp_sync() { cp "$1" "$TMP/copy.bin" && sync "$TMP/copy.bin" && rm -f "$TMP/copy.bin"; }
dd_read() { dd if="$1" of=/dev/null bs=1M status=none; }

declare -A ROW
for mib in 1 "$BIG_MIB"; do
    file="$TMP/random-$mib.bin"
    head -c $((mib << 20)) /dev/urandom >"$file"
    # The file as a binary COPY of (n int, data bytea) rows of 256 KiB.
    python3 - "$file" <<'PY'
import struct, sys
path = sys.argv[1]
data = open(path, "rb").read()
with open(path + ".copy", "wb") as out:
    out.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0))
    for n, start in enumerate(range(0, len(data), 262144)):
        chunk = data[start:start + 262144]
        out.write(struct.pack("!hii", 2, 4, n) + struct.pack("!i", len(chunk)) + chunk)
    out.write(struct.pack("!h", -1))
PY
    : >"$TMP/rows-$mib"
    for round in $(seq 1 "$ROUNDS"); do
        log "$mib MiB, round $round"
        (while :; do rss_kib "$PARLEY_PID" VmRSS; sleep 0.2; done) >>"$TMP/rss-$mib.txt" &
        SAMPLER_PID=$!
        up=$(timed upload "$file")
        id=$(sed 's/.*"file_id":"\([^"]*\)".*/\1/' "$TMP/upload.json")
        down=$(timed download "$id")
        stop_pid "$SAMPLER_PID"
        SAMPLER_PID=
        blob=$(psql_run -c "SELECT blob_id FROM files WHERE file_id = '$id'")
        copy=$(timed copy_out "$blob")
        cpt=$(timed cp_sync "$file")
        ddt=$(timed dd_read "$file")
        # The same bytes written into PostgreSQL as bytea rows of 256 KiB, as fast as PostgreSQL takes them: one binary
        # COPY (the upload's floor: Parley writes these rows, plus its own bookkeeping).
        psql_run -c "DROP TABLE IF EXISTS bench_bytea; CREATE TABLE bench_bytea (n int, data bytea); ALTER TABLE bench_bytea ALTER COLUMN data SET STORAGE EXTERNAL"
        pg=$(timed psql_run -c "\\copy bench_bytea FROM '$file.copy' WITH (FORMAT binary)")
        echo "$up | $down | $copy | $cpt | $ddt | $pg" >>"$TMP/rows-$mib"
    done
done
psql_run -c "DROP TABLE IF EXISTS bench_bytea"

# Image derivation: a 12-megapixel JPEG of noise (harder to code than a photograph), three variants per upload.
vips gaussnoise "$TMP/noise.v" 4000 3000 --mean 128 --sigma 40 >/dev/null
vips colourspace "$TMP/noise.v" "$TMP/noise-srgb.v" srgb >/dev/null 2>&1 || cp "$TMP/noise.v" "$TMP/noise-srgb.v"
vips bandjoin "$TMP/noise-srgb.v $TMP/noise-srgb.v $TMP/noise-srgb.v" "$TMP/photo.v" >/dev/null
vips copy "$TMP/photo.v" "$TMP/photo.jpg[Q=90]" >/dev/null
: >"$TMP/rows-image"
for round in $(seq 1 "$ROUNDS"); do
    cp "$TMP/photo.jpg" "$TMP/photo-$round.jpg"
    printf '%04d' "$round" >>"$TMP/photo-$round.jpg"  # other bytes each round: no deduplication
    image=$(timed upload "$TMP/photo-$round.jpg")
    started=$(now)
    /usr/bin/time -f '%U %S' -o "$TMP/thumb.time" vipsthumbnail "$TMP/photo.jpg" -s 960x720 -o "$TMP/thumb.jpg" >/dev/null 2>&1
    thumb_wall=$(elapsed "$started" "$(now)")
    thumb_cpu=$(awk '{ printf "%.2f", $1 + $2 }' "$TMP/thumb.time")
    echo "$image | $thumb_wall $thumb_cpu" >>"$TMP/rows-image"
done

col() {  # file field(1-based, '|'-separated) part(1 seconds, 2 parley cpu, 3 pg cpu): the median
    awk -F'|' -v f="$2" -v p="$3" '{ split($f, a, " "); print a[p] }' "$1" | median
}
mibps() { awk -v m="$1" -v s="$2" 'BEGIN { printf "%.0f", (s > 0 ? m / s : 0) }'; }
per_mib() { awk -v c="$1" -v m="$2" 'BEGIN { printf "%.1f", 1000 * c / m }'; }
rows=""
for mib in 1 "$BIG_MIB"; do
    f="$TMP/rows-$mib"
    for spec in "1 Parley upload (raw body)" "2 Parley download" "3 psql COPY of the stored chunks TO /dev/null" "4 cp + sync" "5 dd read" "6 psql COPY FROM: the same bytes as bytea rows (binary)"; do
        i=${spec%% *}
        name=${spec#* }
        s=$(col "$f" "$i" 1)
        pc=$(col "$f" "$i" 2)
        gc=$(col "$f" "$i" 3)
        case $i in 1|2) cpu="$(per_mib "$pc" "$mib") / $(per_mib "$gc" "$mib")" ;; 3|6) cpu="— / $(per_mib "$gc" "$mib")" ;; *) cpu="—" ;; esac
        rows+="| $mib MiB | $name | $s | $(mibps "$mib" "$s") | $cpu |"$'\n'
    done
    ROW[$mib,ratio]=$(awk -v d="$(col "$f" 2 1)" -v c="$(col "$f" 3 1)" 'BEGIN { printf "%.2f", (d > 0 ? c / d : 0) }')
done
read -r rss_min rss_max < <(awk 'NR == 1 { lo = $1; hi = $1 } { if ($1 < lo) lo = $1; if ($1 > hi) hi = $1 } END { print lo, hi }' "$TMP/rss-$BIG_MIB.txt")
image_s=$(col "$TMP/rows-image" 1 1)
image_cpu=$(col "$TMP/rows-image" 1 2)
thumb_cpu=$(awk -F'|' '{ split($2, a, " "); print a[2] }' "$TMP/rows-image" | median)
image_ms=$(awk -v c="$image_cpu" 'BEGIN { printf "%.0f", c * 1000 }')

record_section "## $(date -u '+%Y-%m-%d %H:%M') UTC — files: uploads, downloads and image derivation (bench/files.sh)

$(machine_lines)
- parley: release build, embedded PostgreSQL 15, curl on loopback, one transfer at a time; $ROUNDS rounds, medians
- CPU: /proc, Parley's process and its PostgreSQL's, in ms per MiB (\`Parley / PostgreSQL\`); /proc counts in 10 ms
  ticks, so the 1 MiB rows' CPU is at the resolution's edge, and their seconds include starting curl, psql, cp or dd

| size | what | seconds | MiB/s | CPU ms/MiB |
|---|---|---:|---:|---|
${rows}
Downloads against psql's \`\\copy\` of the same chunks (reading the bytes straight out of PostgreSQL): 1 MiB
**${ROW[1,ratio]}×**, $BIG_MIB MiB **${ROW[$BIG_MIB,ratio]}×** of psql's time (≥ 1 means Parley is as fast; the target is
Parley's throughput ≥ 0.7× psql's: $(met "$(awk -v r="${ROW[$BIG_MIB,ratio]}" 'BEGIN { print r * 100 }')" 70)). Server RSS during the
$BIG_MIB MiB transfers: $(mib "$rss_min") – $(mib "$rss_max").

Image derivation: a 12-megapixel JPEG (noise, Q90, $(($(stat -c %s "$TMP/photo.jpg") / 1024)) KiB) uploaded: ${image_s} s,
Parley **${image_ms} ms** of CPU for the upload with its three variants (target < 150 ms: $(met 150 "$image_ms")); \`vipsthumbnail\`
making the large variant alone: ${thumb_cpu} s of CPU (process start included)."
