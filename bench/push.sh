#!/usr/bin/env bash
# The push bridge (docs/push.md) against a loopback gateway (bench/py/push_gateway.py, `matrix` format, answering
# 200 {"rejected":[]} at once), on one server run:
#   (1) offline fan-out: a group of BENCH_PUSH_RECIPIENTS (5,000) members plus the sender u1, every member offline
#       (no stream) with one android/fcm device; BENCH_ROUNDS group texts from u1, one at a time: the time from the
#       send's HTTP response to the last of the 5,000 gateway requests (target: all within 5 s), p50/p99 of
#       response → gateway arrival, requests / unique pushkeys / duplicates, the sample body checked field by field,
#       and the message's PushAttempt statuses (GET /v1/push/attempts?message_id=…);
#   (2) peer sends/s (wrk, bench/lua/send.lua, u1..u50, each recipient one device and no stream, so each send is
#       one gateway request) with push.enabled false (a) and true (b), alternating per round at each of
#       BENCH_PUSH_CONNECTIONS (32); after each b run the push queue drains; CPU per send of Parley, its PostgreSQL,
#       the gateway, and of the bridge thread, its sender threads and its backend (target: b/a ≥ 0.85). In each round,
#       after b, the physical limit with the same clients and duration: pgbench's single-row durable INSERT;
#   (3) BENCH_PACED_ROUNDS paced runs with push on at BENCH_PACED_FRACTION (0.8) × the median push-off rate
#       (bench/lua/paced_send.lua): message timestamp → gateway request p50/p99 (target p99 < 1 s), every message
#       pushed once, CPU per send.
# CPU comes from /proc (bench/py/cpu_snapshot.py, bench/py/thread_cpu.py). Appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_PUSH_CONNECTIONS="32" (the a/b connection counts),
#              BENCH_PUSH_RECIPIENTS=5000, BENCH_FANOUT_TIMEOUT=60 (s per fan-out round), BENCH_DURATION=10s,
#              BENCH_ROUNDS=3, BENCH_PACED_ROUNDS=2, BENCH_PACED_FRACTION=0.8, BENCH_PACED_DURATION=20s,
#              BENCH_PACED_CONNECTIONS=64, BENCH_THREADS=2, BENCH_RESULTS=path, BENCH_NO_RECORD=1, BENCH_NOTE="…",
#              BENCH_DRAIN_TIMEOUT=180 (s), BENCH_QUIET_MAX=120 (s each run waits at most for a quiet machine)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONNECTIONS=32
DURATION=${BENCH_DURATION:-10s}
export BENCH_ROUNDS=${BENCH_ROUNDS:-3}
PUSH_CONNECTIONS=${BENCH_PUSH_CONNECTIONS:-32}
PACED_ROUNDS=${BENCH_PACED_ROUNDS:-2}
PACED_FRACTION=${BENCH_PACED_FRACTION:-0.8}
PACED_DURATION=${BENCH_PACED_DURATION:-20s}
PACED_CONNECTIONS=${BENCH_PACED_CONNECTIONS:-64}
RECIPIENTS=${BENCH_PUSH_RECIPIENTS:-5000}
FANOUT_TIMEOUT=${BENCH_FANOUT_TIMEOUT:-60}
DRAIN_TIMEOUT=${BENCH_DRAIN_TIMEOUT:-180}
GROUP_ID=pushbench
GROUP_NAME="Push bench"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
# shellcheck disable=SC2119 # (no nginx)
require_tools
command -v psql >/dev/null || install_package postgresql-client
require_pgbench
SECS=$(seconds_of "$DURATION")
PACED_SECS=$(seconds_of "$PACED_DURATION")
((RECIPIENTS >= 50)) || die "BENCH_PUSH_RECIPIENTS must be at least 50 (u1..u50 are the peer senders)"

build_parley
# The gateway is on loopback: the push bridge shares the webhooks' outbound policy (API.md §15, OutboundPolicy).
export PARLEY_WEBHOOK_ALLOW_PRIVATE=1
start_parley

json_field() {  # json key: a top-level field ("n/a" when absent; floats rounded to 0.1)
    python3 -c 'import json,sys; v = json.loads(sys.argv[1]).get(sys.argv[2]); print("n/a" if v is None else (round(v, 1) if isinstance(v, float) else (json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list)) else v)))' "$1" "$2"
}
psql_value() { psql -h "$DATA/run" -p 5432 -U parley -d postgres -X -qtA -c "$1"; }
now_ms() { date +%s%3N; }
# --- the gateway ----------------------------------------------------------------------------------------------------
python3 "$ROOT/bench/py/push_gateway.py" --port-file "$TMP/gateway.port" >"$TMP/gateway.out" 2>"$TMP/gateway.err" &
GW_PID=$!
PIDS=("$GW_PID" "${PIDS[@]}")
for _ in $(seq 100); do [[ -s $TMP/gateway.port ]] && break; kill -0 "$GW_PID" 2>/dev/null || break; sleep 0.1; done
[[ -s $TMP/gateway.port ]] || { cat "$TMP/gateway.err" >&2; die "the push gateway did not start"; }
GW="http://127.0.0.1:$(cat "$TMP/gateway.port")"
gateway_stats() { curl -fsS --max-time 10 "$GW/stats${1:+?$1}"; }  # [query, e.g. reset=1]
log "gateway on $GW (pid $GW_PID)"

# --- fixtures: users, one device each, the group --------------------------------------------------------------------
USERS=$((RECIPIENTS + 1))
import_users "$USERS"
api -X POST "$BASE/v1/messages" -d '{"from":"u1","conversation_type":"peer","to":"u2","type":1,"body":{"text":"check"}}' \
    | grep -q '"seq":1' || die "the first send did not get seq 1"

log "registering one device for each of u1..u$USERS"
python3 - "$BASE" "$USERS" <<'EOF' || die "device registration failed"
# One android/fcm device per user through POST /v1/users/{id}/devices, 8 keep-alive connections.
import http.client, json, os, sys, threading, urllib.parse
base, users = sys.argv[1], int(sys.argv[2])
url = urllib.parse.urlsplit(base)
headers = {"Authorization": "Bearer " + os.environ["PARLEY_KEY"], "Content-Type": "application/json"}
todo = list(range(1, users + 1))
lock, errors = threading.Lock(), []
def worker():
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    while True:
        with lock:
            if not todo or errors:
                return
            i = todo.pop()
        body = json.dumps({"device_id": f"dev-u{i}", "platform": "android", "provider": "fcm", "push_key": f"key-u{i}",
                           "app_id": "com.example.app"})
        conn.request("POST", f"/v1/users/u{i}/devices", body, headers)
        resp = conn.getresponse()
        text = resp.read()
        if resp.status not in (200, 201):
            with lock:
                errors.append(f"u{i}: HTTP {resp.status} {text[:300]!r}")
threads = [threading.Thread(target=worker) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
if errors:
    print("\n".join(errors[:5]), file=sys.stderr)
    sys.exit(1)
EOF
n=$(api "$BASE/v1/users/u2/devices" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["items"]))')
[[ $n == 1 ]] || die "u2 has $n devices, expected 1"

api -X PATCH "$BASE/v1/settings" -d "{\"max_group_members\":$((USERS + 1000))}" >/dev/null
create_group "$GROUP_ID" "$USERS"  # owner u1, members u2..u<USERS>
api -X PATCH "$BASE/v1/groups/$GROUP_ID" -d "{\"operator\":\"u1\",\"name\":\"$GROUP_NAME\"}" >/dev/null

# --- push settings --------------------------------------------------------------------------------------------------
push_enable() {  # true|false: PATCH /v1/settings push.enabled (and the gateway), checked in the answer
    local got
    got=$(api -X PATCH "$BASE/v1/settings" -d "{\"push\":{\"enabled\":$1,\"gateway_url\":\"$GW\",\"format\":\"matrix\"}}" \
        | python3 -c 'import json,sys; p = json.load(sys.stdin).get("push") or {}; print(str(p.get("enabled")).lower(), p.get("gateway_url"), p.get("format"))') \
        || die "PATCH /v1/settings with push settings failed (no push bridge in this build?)"
    [[ $got == "$1 $GW matrix" ]] || die "PATCH /v1/settings push: the settings read back as '$got', expected '$1 $GW matrix'"
}
push_stats() {  # "push_sent_24h push_failed_24h" from GET /v1/stats
    api "$BASE/v1/stats" | python3 -c 'import json,sys; s = json.load(sys.stdin); print(s.get("push_sent_24h", "n/a"), s.get("push_failed_24h", "n/a"))'
}
pending_attempts() {  # how many attempts are still pending (at most 100), or "n/a" without the list endpoint
    api "$BASE/v1/push/attempts?status=pending&limit=100" 2>/dev/null \
        | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["items"]))' 2>/dev/null || echo n/a
}
push_enable true

# CPU accounting: bench/lib.sh (cpu_snapshot, measure, cpu_cell) with the gateway as the peer process.
CPU_PEER_PID=$GW_PID
CPU_PEER_NAME=gateway

# --- (1) offline fan-out to a 5,000-member group --------------------------------------------------------------------
# fanout_round r: one group text from u1, timed from the send's HTTP response; waits until the gateway has every
# recipient's request (or nothing more arrives for 10 s, or BENCH_FANOUT_TIMEOUT), then prints one JSON line: the
# send, the gateway's /stats since the response (then reset), the field check of its sample body against §16.2, and
# the message's attempts by status.
fanout_round() {
    python3 - "$BASE" "$GW" "$GROUP_ID" "$GROUP_NAME" "$RECIPIENTS" "$FANOUT_TIMEOUT" "$1" <<'EOF'
import http.client, json, os, sys, time, urllib.parse
base, gw, group, group_name, expected, timeout, rnd = sys.argv[1:8]
expected, timeout = int(expected), float(timeout)
key = {"Authorization": "Bearer " + os.environ["PARLEY_KEY"], "Content-Type": "application/json"}
def conn_of(u):
    s = urllib.parse.urlsplit(u)
    return http.client.HTTPConnection(s.hostname, s.port, timeout=60)
api, gwc = conn_of(base), conn_of(gw)
def call(c, method, path, body=None, headers=None):
    c.request(method, path, body, headers or {})
    r = c.getresponse()
    return r.status, r.read()
def gw_stats(query=""):
    return json.loads(call(gwc, "GET", "/stats" + query)[1])
out = {"round": int(rnd)}
text = f"push bench fan-out round {rnd}"
body = json.dumps({"from": "u1", "conversation_type": "group", "to": group, "type": 1, "body": {"text": text},
                   "client_msg_id": f"fanout-{rnd}-{time.time_ns()}"})
api.connect()  # the connection is open before the clock starts
t0 = time.time()
status, resp = call(api, "POST", "/v1/messages", body, key)
t1 = time.time()
out.update(http_status=status, send_ms=round((t1 - t0) * 1000, 1), t_response=t1)
if status != 200 and status != 201:
    out["error"] = resp[:300].decode(errors="replace")
    print(json.dumps(out)); sys.exit(0)
msg = json.loads(resp)
msg = msg.get("message", msg)
mid, seq = msg.get("message_id"), msg.get("seq")
out.update(message_id=mid, seq=seq)
# Wait for the fan-out.
last_count, last_change = -1, time.time()
while True:
    s = gw_stats()
    now = time.time()
    if s["count"] != last_count:
        last_count, last_change = s["count"], now
    if s["count"] >= expected:
        time.sleep(1.0)  # late duplicates, if any, still count
        break
    if now - last_change > 10 or now - t1 > timeout:
        break
    time.sleep(0.05)
out["waited_s"] = round(time.time() - t1, 1)
sample = json.loads(call(gwc, "GET", "/sample")[1]).get("parley.message")
stats = gw_stats(f"?since={t1}&within_s=5&reset=1")
out["gateway"] = stats
out["to_last_ms"] = round((stats["last"] - t1) * 1000, 1) if stats["last"] else None
out["to_first_ms"] = round((stats["first"] - t1) * 1000, 1) if stats["first"] else None
# The sample against §16.2 (matrix, a group text, no push config: title = group name, body = text, prio high,
# no counts since enable_badge defaults to false).
bad = []
if sample is None:
    bad.append("no parley.message request received")
else:
    n = sample.get("notification", {})
    def want(path, value, got):
        if got != value:
            bad.append(f"{path} = {json.dumps(got)} (expected {json.dumps(value)})")
    want("event_id", mid, n.get("event_id"))
    want("room_id", f"group:{group}", n.get("room_id"))
    want("type", "parley.message", n.get("type"))
    want("sender", "u1", n.get("sender"))
    want("sender_display_name", "User 1", n.get("sender_display_name"))
    want("room_name", group_name, n.get("room_name"))
    want("prio", "high", n.get("prio"))
    if "counts" in n and "unread" in (n.get("counts") or {}):
        bad.append("counts.unread present without enable_badge")
    c = n.get("content") or {}
    want("content.kind", "message", c.get("kind"))
    want("content.title", group_name, c.get("title"))
    want("content.body", text, c.get("body"))
    want("content.message_type", 1, c.get("message_type"))
    want("content.seq", seq, c.get("seq"))
    want("content.badge_increment", 1, c.get("badge_increment"))
    devs = n.get("devices") or []
    want("len(devices)", 1, len(devs))
    if devs:
        d = devs[0]
        k = d.get("pushkey", "")
        want("devices[0].app_id", "com.example.app", d.get("app_id"))
        if not (isinstance(k, str) and k.startswith("key-u")):
            bad.append(f"devices[0].pushkey = {json.dumps(k)}")
        if not isinstance(d.get("pushkey_ts"), int):
            bad.append(f"devices[0].pushkey_ts = {json.dumps(d.get('pushkey_ts'))} (expected whole seconds)")
        dd = d.get("data") or {}
        want("devices[0].data.device_id", "dev-" + k[4:] if isinstance(k, str) else None, dd.get("device_id"))
        want("devices[0].data.provider", "fcm", dd.get("provider"))
        want("devices[0].data.platform", "android", dd.get("platform"))
        want("devices[0].data.voip", False, dd.get("voip"))
        want("devices[0].data.apptype", 1, dd.get("apptype"))
out["field_problems"] = bad
out["sample"] = sample
# The message's attempts, by status (paged; the list endpoint may lag the gateway by a moment: pending ones say so).
tally, cursor, pages = {}, None, 0
try:
    while pages < 200:
        q = f"/v1/push/attempts?message_id={urllib.parse.quote(mid)}&limit=100" + (f"&cursor={urllib.parse.quote(cursor)}" if cursor else "")
        st, b = call(api, "GET", q, None, key)
        if st != 200:
            tally = {"error": f"HTTP {st}"}; break
        page = json.loads(b)
        for a in page["items"]:
            s = a.get("status")
            if s == "suppressed":
                s = f"suppressed/{a.get('reason')}"
            tally[s] = tally.get(s, 0) + 1
        cursor, pages = page.get("next_cursor"), pages + 1
        if not cursor:
            break
except Exception as e:  # noqa: BLE001 — reported, not fatal
    tally = {"error": repr(e)[:200]}
out["attempts"] = tally
print(json.dumps(out))
EOF
}

declare -A FO  # FO[<round>] = the JSON line of fanout_round
FIELD_PROBLEMS=
gateway_stats reset=1 >/dev/null
for ((r = 1; r <= BENCH_ROUNDS; r++)); do
    log "fan-out #$r: group text from u1 to $GROUP_ID ($RECIPIENTS recipients with one device each, all offline)"
    before=$(cpu_snapshot)
    FO[$r]=$(fanout_round "$r")
    CPU[fanout #$r]=$(cpu_delta "$before" "$(cpu_snapshot)")
    line=${FO[$r]}
    [[ $(json_field "$line" http_status) == 20[01] ]] || die "fan-out #$r: the group send failed: $(json_field "$line" error)"
    gw=$(json_field "$line" gateway)
    log "  send $(json_field "$line" send_ms) ms; gateway: $(json_field "$gw" count) requests ($(json_field "$gw" unique_pushkeys) unique pushkeys, $(json_field "$gw" duplicates) duplicates, $(json_field "$gw" event_ids) event ids, $(json_field "$gw" connections) connections), $(json_field "$gw" within) within 5 s; first $(json_field "$line" to_first_ms) ms, last $(json_field "$line" to_last_ms) ms after the response; p50 $(json_field "$gw" p50_ms) / p99 $(json_field "$gw" p99_ms) ms"
    log "  gateway requests per second after the response: $(json_field "$gw" per_s)"
    log "  attempts: $(json_field "$line" attempts); gateway problems: $(json_field "$gw" problems); cpu s ${CPU[fanout #$r]}"
    probs=$(json_field "$line" field_problems)
    if [[ $probs != "[]" ]]; then
        log "  warning: the body differs from §16.2: $probs"
        [[ -n $FIELD_PROBLEMS ]] || FIELD_PROBLEMS=$probs
    fi
    ((r > 1)) || SAMPLE=$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])["sample"], separators=(",", ":")))' "$line")
done

# --- (2) peer sends with push off (a) and on (b), alternating -------------------------------------------------------
# part_cpu: "bridge senders backend" CPU seconds so far: Parley's push bridge thread (parley-push), its sender threads
# (parley-hook, which webhooks would share; this app has none) and the bridge's PostgreSQL backend (application_name
# parley-push; 0 before it connects).
bridge_backend() { psql_value "SELECT coalesce(string_agg(pid::text, ','), '') FROM pg_stat_activity WHERE application_name = 'parley-push'" 2>/dev/null || true; }
part_cpu() { python3 "$ROOT/bench/py/thread_cpu.py" "$PARLEY_PID" parley-push parley-hook --pids "$(bridge_backend)"; }
declare -A PART GOT DUP DRAIN_S WIN PER_S PENDING_LEFT PACED PACED_N
per_send() {  # seconds count: ms per send
    awk -v s="$1" -v n="$2" 'BEGIN { printf "%.3f", (n > 0 ? 1000 * s / n : 0) }'
}
cpu_per_send() {  # key [count]: "parley / pg / gateway / bridge thread / senders / bridge backend" ms per send of a run
    local key=$1 n=${2:-} c p
    [[ -n $n ]] || n=$(awk -v r="${RATE[parley,$key]:-0}" -v s="$SECS" 'BEGIN { print r * s }')
    read -r -a c <<<"${CPU[$key]:-0 0 0 0 0}"
    read -r -a p <<<"${PART[$key]:-0 0 0}"
    echo "$(per_send "${c[0]}" "$n") / $(per_send "${c[1]}" "$n") / $(per_send "${c[2]}" "$n") / $(per_send "${p[0]}" "$n") / $(per_send "${p[1]}" "$n") / $(per_send "${p[2]}" "$n")"
}
app_lag() {  # events of the bench app (default) its push cursor has not passed ("n/a" when the schema differs)
    psql_value "SELECT h.head - coalesce(c.event_id, 0) + (c.user_after IS NOT NULL)::int FROM event_heads h
                LEFT JOIN push_cursors c USING (app_id) WHERE h.app_id = 'default'" 2>/dev/null || echo n/a
}
drain() {  # key: waits (bounded) until no attempt is pending, the gateway's count has not grown for 1 s and the bench
           # app's push cursor is at its head; DRAIN_S[key] seconds, CPU[key, drain]
    local key=$1 start=$SECONDS before pending count prev=-1 still=0 lag
    before=$(cpu_snapshot)
    while :; do
        pending=$(pending_attempts)
        count=$(json_field "$(gateway_stats)" count)
        if ((count == prev)); then still=$((still + 1)); else still=0; fi
        prev=$count
        if [[ $pending == 0 ]] && ((still >= 2)); then
            lag=$(app_lag)
            [[ $lag == 0 || $lag == n/a ]] && break
        fi
        ((SECONDS - start < DRAIN_TIMEOUT)) || { log "  warning: not drained after ${DRAIN_TIMEOUT}s ($pending pending, gateway count $count)"; break; }
        sleep 0.5
    done
    PENDING_LEFT[$key]=$pending
    DRAIN_S[$key]=$((SECONDS - start))
    CPU[$key, drain]=$(cpu_delta "$before" "$(cpu_snapshot)")
    log "  drained in ~${DRAIN_S[$key]} s (pending $pending, gateway count $count); cpu s ${CPU[$key, drain]}"
}
# window_attempts t0_ms t1_ms: the peer messages stored in [t0, t1) and their message attempts (psql):
# "<messages>|<status[/reason]:count …>"
window_attempts() {
    psql_value "WITH m AS (SELECT app_id, message_id FROM messages WHERE conv_type = 'peer' AND timestamp >= $1 AND timestamp < $2),
                     a AS (SELECT p.status, p.reason FROM m
                           LEFT JOIN push_attempts p ON p.app_id = m.app_id AND p.message_id = m.message_id AND p.kind = 'message'),
                     s AS (SELECT coalesce(status || coalesce('/' || reason, ''), 'no attempt') AS k, count(*) AS n FROM a GROUP BY 1)
                SELECT (SELECT count(*) FROM m) || '|' || coalesce((SELECT string_agg(k || ':' || n, ' ' ORDER BY n DESC) FROM s), '')" \
        2>/dev/null || echo "n/a|n/a"
}
# latency t0_ms t1_ms: message timestamp → its first gateway request, for the peer messages stored in [t0, t1), from
# the gateway's arrivals (GET /arrivals) and the messages' timestamps (psql): "messages|pushed|p50|p99|max" (ms)
latency() {
    curl -fsS --max-time 30 "$GW/arrivals" >"$TMP/arrivals.json"
    psql_value "SELECT message_id || ' ' || timestamp FROM messages WHERE conv_type = 'peer' AND timestamp >= $1 AND timestamp < $2" >"$TMP/stamps.txt"
    python3 -c '
import json, sys
arrivals = json.load(open(sys.argv[1]))
lat, n = [], 0
for line in open(sys.argv[2]):
    if not line.strip():
        continue
    n += 1
    mid, ts = line.split()
    if mid in arrivals:
        lat.append(arrivals[mid] * 1000.0 - int(ts))
lat.sort()
pct = lambda p: "%.0f" % lat[min(len(lat) - 1, int(p * len(lat)))] if lat else "n/a"
print("%d|%d|%s|%s|%s" % (n, len(lat), pct(0.5), pct(0.99), ("%.0f" % lat[-1]) if lat else "n/a"))' "$TMP/arrivals.json" "$TMP/stamps.txt"
}

declare -A AB_ROUNDS
reference_tables create
for conns in $PUSH_CONNECTIONS; do
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        for side in a b; do
            k="$side,$conns #$r"
            if [[ $side == a ]]; then push_enable false; else push_enable true; fi
            wait_quiet
            gateway_stats reset=1 >/dev/null
            read -r s0 f0 <<<"$(push_stats)"
            t0=$(now_ms) p0=$(part_cpu)
            measure "$k" send.lua "$conns"
            PART[$k]=$(cpu_delta "$p0" "$(part_cpu)")
            t1=$(now_ms)
            [[ $side == b ]] && drain "$k"
            WIN[$k]=$(window_attempts "$t0" "$t1")
            stats=$(gateway_stats "since=$(awk -v t="$t0" 'BEGIN { printf "%.3f", t / 1000 }')&reset=1")
            GOT[$k]=$(json_field "$stats" count) DUP[$k]=$(json_field "$stats" duplicates) PER_S[$k]=$(json_field "$stats" per_s)
            read -r s1 f1 <<<"$(push_stats)"
            log "  ms per send (parley / pg / gateway / bridge thread / senders / bridge backend): $(cpu_per_send "$k")"
            log "  messages|their attempts: ${WIN[$k]}; gateway requests ${GOT[$k]} (dup ${DUP[$k]}); push_sent_24h +$((s1 - s0)), push_failed_24h +$((f1 - f0))"
            if [[ $side == a ]] && ((GOT[$k] > 0)); then log "  warning: the gateway got ${GOT[$k]} requests with push.enabled false"; fi
        done
        AB_ROUNDS[$conns]="${AB_ROUNDS[$conns]:-}${AB_ROUNDS[$conns]:+, }$(awk -v b="${RATE[parley,b,$conns #$r]}" -v a="${RATE[parley,a,$conns #$r]}" 'BEGIN { printf "%.2f×", (a > 0 ? b / a : 0) }')"
        # The physical limit in the same round, same clients and duration: pgbench's single-row durable INSERT.
        run_pgbench "floor,$conns #$r" floor_insert.sql "$conns" "-c synchronous_commit=on"
    done
done
reference_tables drop

# --- (3) a paced loop at 80 % of the push-off rate, push on ---------------------------------------------------------
FIRST_CONNS=${PUSH_CONNECTIONS%% *}
PACE=$(awk -v a="$(median_of "a,$FIRST_CONNS")" -v f="$PACED_FRACTION" 'BEGIN { printf "%.0f", a * f }')
for ((r = 1; r <= PACED_ROUNDS; r++)); do
    k="paced #$r"
    log "$k: $PACE sends/s ($PACED_FRACTION × the median push-off rate at $FIRST_CONNS connections) for $PACED_DURATION, push on, $PACED_CONNECTIONS connections"
    push_enable true
    wait_quiet
    gateway_stats reset=1 >/dev/null
    t0=$(now_ms) before=$(cpu_snapshot) p0=$(part_cpu)
    out=$(PACE_RATE=$PACE PACE_THREADS=$THREADS BENCH_LUA_DIR="$ROOT/bench/lua" timeout $((PACED_SECS + 30)) \
        wrk -t"$THREADS" -c"$PACED_CONNECTIONS" -d"$PACED_DURATION" --latency -s "$ROOT/bench/lua/paced_send.lua" "$BASE" 2>&1)
    CPU[$k]=$(cpu_delta "$before" "$(cpu_snapshot)") PART[$k]=$(cpu_delta "$p0" "$(part_cpu)")
    t1=$(now_ms)
    RATE[parley,$k]=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
    P50[$k]=$(awk '$1 == "50%" { print $2 }' <<<"$out") P99[$k]=$(awk '$1 == "99%" { print $2 }' <<<"$out")
    ERR[$k]=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' <<<"$out")
    ERR[$k]=${ERR[$k]:-0}
    drain "$k"
    PACED[$k]=$(latency "$t0" "$t1")
    WIN[$k]=$(window_attempts "$t0" "$t1")
    stats=$(gateway_stats reset=1)
    DUP[$k]=$(json_field "$stats" duplicates)
    PACED_N[$k]=$(cut -d'|' -f1 <<<"${PACED[$k]}")
    log "  ${RATE[parley,$k]} sends/s, p50 ${P50[$k]} / p99 ${P99[$k]}; cpu s ${CPU[$k]}; bridge / senders / backend ${PART[$k]}"
    log "  messages|pushed|timestamp → gateway p50|p99|max ms: ${PACED[$k]}; attempts ${WIN[$k]}; dup ${DUP[$k]}"
    log "  ms per send (parley / pg / gateway / bridge thread / senders / bridge backend): $(cpu_per_send "$k" "${PACED_N[$k]}")"
done
GATEWAY_FINAL=$(gateway_stats)

# --- results --------------------------------------------------------------------------------------------------------
SUMMARY=()
for ((r = 1; r <= BENCH_ROUNDS; r++)); do
    line=${FO[$r]} gw=$(json_field "${FO[$r]}" gateway)
    within=$(json_field "$gw" within) count=$(json_field "$gw" count) last_ms=$(json_field "$line" to_last_ms)
    if [[ $within == "$RECIPIENTS" && $count == "$RECIPIENTS" && $(json_field "$gw" unique_pushkeys) == "$RECIPIENTS" ]]; then verdict=met; else verdict="**not met**"; fi
    SUMMARY+=("fan-out #$r: $count gateway requests for $RECIPIENTS offline recipients ($(json_field "$gw" unique_pushkeys) unique pushkeys, $(json_field "$gw" duplicates) duplicates), $within within 5 s of the send's response; last at **$last_ms ms**, p50 $(json_field "$gw" p50_ms) / p99 $(json_field "$gw" p99_ms) ms; target all $RECIPIENTS within 5 s: $verdict")
done
for conns in $PUSH_CONNECTIONS; do
    a=$(median_of "a,$conns") b=$(median_of "b,$conns")
    rt=$(ab_ratio "$b" "$a")
    floor=$(median_of "floor,$conns" pgbench)
    SUMMARY+=("$conns connections: push on / off = **$rt** (median rates $(printf '%.0f' "$b") / $(printf '%.0f' "$a") sends/s; rounds ${AB_ROUNDS[$conns]}); target ≥ 0.85×: $(met "${rt%×}" 0.85)")
    SUMMARY+=("$conns connections: physical limit (pgbench single-row durable INSERT, same clients and duration, median) $(printf '%.0f' "$floor") tps; push-on sends / limit = $(ab_ratio "$b" "$floor"), push-off sends / limit = $(ab_ratio "$a" "$floor")")
    for side in a b; do
        cells=
        for ((r = 1; r <= BENCH_ROUNDS; r++)); do cells="$cells${cells:+; }#$r $(cpu_per_send "$side,$conns #$r")"; done
        SUMMARY+=("$conns connections, push $([[ $side == a ]] && echo off || echo on), ms per send (parley / pg / gateway / bridge thread / senders / bridge backend): $cells")
    done
done
for ((r = 1; r <= PACED_ROUNDS; r++)); do
    k="paced #$r"
    IFS='|' read -r pm pp p50 p99 pmax <<<"${PACED[$k]}"
    if [[ $p99 != n/a ]] && ((p99 < 1000)) && [[ $pm == "$pp" ]]; then verdict=met; else verdict="**not met**"; fi
    SUMMARY+=("$k: $(printf '%.0f' "${RATE[parley,$k]}") sends/s (asked $PACE; send p50 ${P50[$k]} / p99 ${P99[$k]}); $pp of $pm messages pushed; message timestamp → gateway request p50 $p50 / **p99 $p99** / max $pmax ms; target p99 < 1 s: $verdict; ms per send (parley / pg / gateway / bridge thread / senders / bridge backend): $(cpu_per_send "$k" "$pm")")
done
if [[ -n $FIELD_PROBLEMS ]]; then SUMMARY+=("fan-out body vs the matrix format (docs/push.md): **$FIELD_PROBLEMS**"); else SUMMARY+=("fan-out body vs the matrix format (docs/push.md): every checked field as specified"); fi
for line in "${SUMMARY[@]}"; do log "$line"; done

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — push bridge: fan-out to $RECIPIENTS offline members, sends with push off and on, paced sends with push on"
    echo
    machine_lines
    echo "- load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared with other sessions' builds: read the CPU columns)"
    echo "- parley: $SCRATCH/release/parley, embedded PostgreSQL 15, log level error, PARLEY_WEBHOOK_ALLOW_PRIVATE=1; $USERS users, each with one device (android, fcm, push_key key-u<n>, app_id com.example.app) and no stream; one server run"
    echo "- gateway: bench/py/push_gateway.py ($(json_field "$GATEWAY_FINAL" loop), stdlib, one process) on 127.0.0.1, \`push.format\` matrix, 200 \`{\"rejected\":[]}\` at once, arrival time = time.time() on receipt"
    echo "- fan-out: group $GROUP_ID (owner u1 + $RECIPIENTS members), one text from u1 per round with push on; latency = gateway arrival − the send's HTTP response (same clock)"
    echo "- sends: wrk \`-t$THREADS -c<conns> -d$DURATION --latency\` with bench/lua/send.lua (peer texts between random u1..u50, each recipient one device and no stream: one gateway request per message with push on), 2 s warm-up per run, after the machine went quiet; rounds alternate a (push.enabled false) and b (push.enabled true), $BENCH_ROUNDS rounds; rates are the median round; after each b run the queue drains (no \`pending\` attempt, gateway count still for 1 s, the app's push cursor at its head)"
    echo "- paced: bench/lua/paced_send.lua (the same sends at PACE_RATE over wrk's threads, $PACED_CONNECTIONS connections, $PACED_DURATION, no warm-up) at $PACED_FRACTION × the median push-off rate, push on; latency = gateway arrival of a message's first request − the message's \`timestamp\` (taken when the send is accepted, before its commit: it includes the send's own wait for its batch's commit, so it overstates commit → gateway)"
    echo "- cpu: seconds from /proc: parley (the whole process) / its PostgreSQL processes / the gateway / machine busy of total ($(nproc) CPUs) over the measured run; per send = that CPU / the sends (req/s × ${SECS} s; paced: the messages stored); the bridge thread (parley-push), its sender threads (parley-hook) and the bridge's backend (application_name parley-push) are parts of the parley and pg figures"
    [[ -n ${BENCH_NOTE:-} ]] && echo "- note: $BENCH_NOTE"
    echo
    echo "| fan-out | send | requests / unique pushkeys / dup | event ids | gateway conns | within 5 s | first / last after response | p50 / p99 | attempts | cpu s: parley / pg / gateway / busy of total |"
    echo "|---|---:|---|---:|---:|---:|---|---|---|---|"
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        line=${FO[$r]} gw=$(json_field "${FO[$r]}" gateway)
        printf '| #%s | %s ms | %s / %s / %s | %s | %s | %s | %s / %s ms | %s / %s ms | %s | %s |\n' "$r" "$(json_field "$line" send_ms)" \
            "$(json_field "$gw" count)" "$(json_field "$gw" unique_pushkeys)" "$(json_field "$gw" duplicates)" "$(json_field "$gw" event_ids)" \
            "$(json_field "$gw" connections)" "$(json_field "$gw" within)" "$(json_field "$line" to_first_ms)" "$(json_field "$line" to_last_ms)" \
            "$(json_field "$gw" p50_ms)" "$(json_field "$gw" p99_ms)" "$(json_field "$line" attempts | sed 's/|/\\|/g')" "$(cpu_cell "fanout #$r")"
    done
    echo
    echo "| run | conns | sends/s | p50 / p99 | non-2xx | cpu s: parley / pg / gateway / busy of total | ms per send: parley / pg / gateway / bridge thread / senders / bridge backend | messages stored / their attempts | gateway requests (dup) | drained after |"
    echo "|---|---:|---:|---|---:|---|---|---|---|---|"
    for conns in $PUSH_CONNECTIONS; do
        for ((r = 1; r <= BENCH_ROUNDS; r++)); do
            for side in a b; do
                k="$side,$conns #$r"
                printf '| %s #%s push %s | %s | %.0f | %s / %s | %s | %s | %s | %s | %s (%s) | %s |\n' "$side" "$r" "$([[ $side == a ]] && echo off || echo on)" "$conns" \
                    "${RATE[parley,$k]:-0}" "${P50[$k]:-}" "${P99[$k]:-}" "${ERR[$k]:-}" "$(cpu_cell "$k")" "$(cpu_per_send "$k")" \
                    "$(sed 's/|/ \/ /' <<<"${WIN[$k]}")" "${GOT[$k]}" "${DUP[$k]}" "$([[ $side == b ]] && echo "${DRAIN_S[$k]} s" || echo)"
            done
        done
    done
    for ((r = 1; r <= PACED_ROUNDS; r++)); do
        k="paced #$r"
        IFS='|' read -r pm pp _ _ _ <<<"${PACED[$k]}"
        printf '| paced #%s push on | %s | %.0f (asked %s) | %s / %s | %s | %s | %s | %s / %s | %s (%s) | %s s |\n' "$r" "$PACED_CONNECTIONS" \
            "${RATE[parley,$k]:-0}" "$PACE" "${P50[$k]:-}" "${P99[$k]:-}" "${ERR[$k]:-}" "$(cpu_cell "$k")" "$(cpu_per_send "$k" "$pm")" \
            "$pm" "$(cut -d'|' -f2 <<<"${WIN[$k]}")" "$pp" "${DUP[$k]}" "${DRAIN_S[$k]}"
    done
    echo
    for line in "${SUMMARY[@]}"; do echo "- $line"; done
    for conns in $PUSH_CONNECTIONS; do
        for ((r = 1; r <= BENCH_ROUNDS; r++)); do
            echo "- b #$r, $conns connections: gateway requests per second from the start of the warm-up (2 s warm-up, ${SECS} s run, then the drain): ${PER_S[b,$conns #$r]:-n/a}"
        done
    done
    echo "- one fan-out request as received (round 1): \`$(head -c 1500 <<<"${SAMPLE:-null}")\`"
)
record_section "$SECTION"
