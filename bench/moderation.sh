#!/usr/bin/env bash
# Blocklists (docs/blocklists.md#cost): what evaluating an app's blocklists costs a send.
#   (a) The micro-benchmark of the release binary (`parley bench-blocklists`, hidden): 100,000 entries over 50 lists
#       (36 word lists of 2,000, 8 domain lists of 2,500, 4 e-mail lists of 1,750, 2 regex lists of 500), evaluated on
#       2,000 200-byte texts 5 times each exactly as a send evaluates its text; p50/p99 µs per evaluation, beside the
#       floor: one memmem pass over the same text (the least any search that reads the text once costs), and the naive
#       search, one memmem per literal entry (99,000 per text); and the evaluation with cold CPU caches (16 MB streamed
#       through before each), as between two sends of a busy server. Target: ≤ 20 µs at p50.
#   (b) Sends/s and CPU per send (Parley and its PostgreSQL, from /proc) with all 50 lists on vs none, alternating
#       BENCH_ROUNDS rounds of each in one run (wrk, 200-byte peer texts that match no entry). Target: ≥ 0.9×.
# Appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_CONNECTIONS=32, BENCH_DURATION=10s, BENCH_ROUNDS=2,
#              BENCH_THREADS=2, BENCH_RESULTS=path, BENCH_NO_RECORD=1
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONNECTIONS=${BENCH_CONNECTIONS:-32}
DURATION=${BENCH_DURATION:-10s}
ROUNDS=${BENCH_ROUNDS:-2}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
require_tools
build_parley
SECS=$(seconds_of "$DURATION")

log "(a) micro-benchmark: parley bench-blocklists"
micro=$("$SCRATCH/release/parley" bench-blocklists 2000)
log "  $micro"
field() { tr ' ' '\n' <<<"$micro" | awk -F= -v k="$1" '$1 == k { print $2 }'; }

start_parley
import_users 50
# The 50 lists of the micro-benchmark's shape, as request bodies.
python3 - "$TMP/lists" <<'PY'
import json, os, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
def word(n):
    c, v, s, x = "bcdfghjklmnprstvwz", "aeiou", "", n + 1
    while True:
        s += c[x % len(c)]; x //= len(c); s += v[x % len(v)]; x //= len(v)
        if x == 0: return s
lists = []
def add(kind, count, entry):
    i = len(lists)
    lists.append({"name": f"l{i}", "type": kind, "action": "mask" if i % 7 == 0 else "flag",
                  "entries": [entry(i * 10000 + k) for k in range(count)]})
for _ in range(36): add("word", 2000, lambda n: "zq" + word(n))
for _ in range(8): add("domain", 2500, lambda n: f"{word(n)}.bad{n % 97}.example")
for _ in range(4): add("email", 1750, lambda n: f"@spam{n}.example" if n % 2 == 0 else f"user{n}@mail.example")
for _ in range(2): add("regex", 500, lambda n: "fr[e3]{2}\\s*" + word(n) + "[0-9]{2,}")
for l in lists:
    json.dump(l, open(f"{out}/{l['name']}.json", "w"))
PY
lists_on() {
    for f in "$TMP"/lists/*.json; do api -X POST "$BASE/v1/blocklists" --data-binary "@$f" >/dev/null; done
    # The first send after a change compiles the lists on the node (a change is picked up here at once).
    api -X POST "$BASE/v1/messages" -d '{"from":"u1","conversation_type":"peer","to":"u2","type":1,"body":{"text":"warm"}}' >/dev/null
}
lists_off() { for f in "$TMP"/lists/*.json; do api -X DELETE "$BASE/v1/blocklists/$(basename "$f" .json)" >/dev/null; done; }
started=$(date +%s%N)
lists_on
load_ms=$(( ($(date +%s%N) - started) / 1000000 ))
log "  50 lists created and compiled in $load_ms ms"
count=$(api "$BASE/v1/blocklists" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(i["entry_count"] for i in d["items"]), len(d["items"]))')
log "  entries, lists: $count"
lists_off

export TEXT_BYTES=200   # bench/lua/send.lua: 200-byte texts of common words
rows=""
for ((r = 1; r <= ROUNDS; r++)); do
    for mode in off on; do
        [[ $mode == on ]] && lists_on
        wait_quiet
        measure "$mode #$r" send.lua "$CONNECTIONS"
        rows+="| $mode | $r | ${RATE[parley,$mode #$r]} | ${P50[$mode #$r]} | ${P99[$mode #$r]} | $(cpu_ms_per_request "$mode #$r") | $(cpu_cell "$mode #$r") | ${ERR[$mode #$r]} |"$'\n'
        [[ $mode == on ]] && lists_off
    done
done
median_rate() { for ((r = 1; r <= ROUNDS; r++)); do echo "${RATE[parley,$1 #$r]}"; done | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
off=$(median_rate off)
on=$(median_rate on)
ratio=$(ab_ratio "$on" "$off")
ratio_value=$(awk -v b="$on" -v a="$off" 'BEGIN { printf "%.2f", (a > 0 ? b / a : 0) }')
p50=$(field p50_us)

record_section "## $(date -u '+%Y-%m-%d %H:%M') UTC — blocklists: evaluation cost per send and sends with 50 lists on vs off

$(machine_lines)
- lists: 50 (36 word × 2,000, 8 domain × 2,500, 4 e-mail × 1,750, 2 regex × 500 = 100,000 entries), one Hyperscan
  database per list; created through the API and compiled in $load_ms ms (entries, lists: $count)

(a) \`parley bench-blocklists\` (release build, one thread): $(field evaluations) evaluations of 200-byte texts (one in
ten matches a word entry), each as a send evaluates its text (normalise, scan every list that applies, check edges):

| evaluation | p50 | p99 | target |
|---|---:|---:|---|
| 50 lists, 100,000 entries | $p50 µs | $(field p99_us) µs | ≤ 20 µs at p50: $(awk -v x="$p50" 'BEGIN { print (x + 0 <= 20 ? "met" : "**not met**") }') |
| the same with cold CPU caches (16 MB streamed through before each of 500) | $(field cold_p50_us) µs | $(field cold_p99_us) µs | |
| floor: one memmem pass over the text | $(field memmem_once_p50_us) µs | | |
| naive: one memmem per literal entry ($(field literals) per text) | $(field memmem_per_entry_p50_us) µs | | |

Compiling the 50 lists in the micro-benchmark: $(field compile_ms) ms.

(b) sends (wrk, $CONNECTIONS connections, $DURATION per round, 200-byte peer texts matching no entry):

| lists | round | sends/s | p50 | p99 | CPU ms per send (Parley + PostgreSQL) | CPU s parley / pg / peer / busy of total | non-2xx |
|---|---:|---:|---:|---:|---:|---|---:|
${rows}
Median sends/s with the lists on vs off: $on vs $off = $ratio (target ≥ 0.9×: $(met "$ratio_value" 0.9))."
