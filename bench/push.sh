#!/usr/bin/env bash
# The push bridge (API.md §16) against a loopback gateway (bench/py/push_gateway.py, `matrix` format, answering
# 200 {"rejected":[]} at once), on one server run:
#   (1) offline fan-out: a group of BENCH_PUSH_RECIPIENTS (5,000) members plus the sender u1, every member offline
#       (no stream) with one android/fcm device; BENCH_ROUNDS group texts from u1, one at a time: the time from the
#       send's HTTP response to the last of the 5,000 gateway requests (target: all within 5 s), p50/p99 of
#       response → gateway arrival, requests / unique pushkeys / duplicates, the sample body checked field by field
#       against §16.2, and the message's PushAttempt statuses (GET /v1/push/attempts?message_id=…);
#   (2) peer sends/s (wrk, bench/lua/send.lua, u1..u50, each recipient one device and no stream, so each send is
#       one gateway request) with push.enabled false (a) and true (b), alternating per round at each of
#       BENCH_PUSH_CONNECTIONS (32 256); after each b run the push queue drains (no `pending` attempt and the
#       gateway's count stops growing) and the gateway's requests are counted against the message.sent events
#       stored in the round (psql) and the growth of GET /v1/stats push_sent_24h / push_failed_24h (target: b/a ≥ 0.8).
#       In each round, after b, the physical limit with the same clients and duration: pgbench's single-row durable
#       INSERT (bench/sql/floor_insert.sql, synchronous_commit=on, the scripts' own table, dropped at the end).
# Per measured run (and per fan-out round and drain) it reads the CPU seconds of Parley, its PostgreSQL processes and
# the gateway from /proc/<pid>/stat, and the machine's busy CPU from /proc/stat (the rest is wrk and other sessions).
# Appends the figures to bench/RESULTS.md.
#
# Environment: BENCH_SKIP_BUILD=1, BENCH_SCRATCH_PATH=dir, BENCH_PUSH_CONNECTIONS="32 256" (the a/b connection
#              counts), BENCH_PUSH_RECIPIENTS=5000, BENCH_FANOUT_TIMEOUT=60 (s per fan-out round),
#              BENCH_DURATION=10s, BENCH_ROUNDS=2, BENCH_THREADS=2, BENCH_RESULTS=path, BENCH_NO_RECORD=1,
#              BENCH_NOTE="…", BENCH_DRAIN_TIMEOUT=180 (s)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONNECTIONS=32
DURATION=${BENCH_DURATION:-10s}
export BENCH_ROUNDS=${BENCH_ROUNDS:-2}
PUSH_CONNECTIONS=${BENCH_PUSH_CONNECTIONS:-32 256}
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
((RECIPIENTS >= 50)) || die "BENCH_PUSH_RECIPIENTS must be at least 50 (u1..u50 are the peer senders)"

build_parley
# The gateway is on loopback: the push bridge shares the webhooks' outbound policy (API.md §15, OutboundPolicy).
export PARLEY_WEBHOOK_ALLOW_PRIVATE=1
start_parley

json_field() {  # json key: a top-level field ("n/a" when absent; floats rounded to 0.1)
    python3 -c 'import json,sys; v = json.loads(sys.argv[1]).get(sys.argv[2]); print("n/a" if v is None else (round(v, 1) if isinstance(v, float) else (json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list)) else v)))' "$1" "$2"
}
psql_value() { psql -h "$DATA/run" -p 5432 -U parley -d postgres -X -qtA -c "$1"; }
max_event_id() { psql_value "SELECT coalesce(max(id), 0) FROM events"; }
now_ms() { date +%s%3N; }
# planner_lag: events of the app the push planner has not planned yet (psql on its cursor; "n/a" when the schema
# differs). The decision (§16.1 step 1, push.enabled) is taken when an event is planned, so a/b rounds wait for it.
planner_lag() {
    psql_value "SELECT coalesce(sum(h.head - coalesce(c.event_id, 0) + (c.user_after IS NOT NULL)::int), 0)
                FROM event_heads h LEFT JOIN push_cursors c USING (app_id)" 2>/dev/null || echo n/a
}
wait_planned() {  # waits (bounded) until planner_lag is 0; prints the seconds waited
    local start=$SECONDS lag
    while :; do
        lag=$(planner_lag)
        [[ $lag == 0 || $lag == n/a ]] && break
        ((SECONDS - start < DRAIN_TIMEOUT)) || { log "  warning: the push planner is still $lag events behind after ${DRAIN_TIMEOUT}s"; break; }
        sleep 0.5
    done
    echo $((SECONDS - start))
}
# window_attempts t0_ms t1_ms: the peer messages stored in [t0, t1) and their message attempts (psql):
# "<messages>|<status[/reason]:count …>|<plan p50>|<plan p99>|<sent p50>|<sent p99>|<sent max>": commit → planned
# (attempt created_at − message timestamp, ms) of every attempt, commit → sent recorded (updated_at − timestamp) of
# the sent ones.
window_attempts() {
    psql_value "WITH m AS (SELECT app_id, message_id, timestamp FROM messages
                           WHERE conv_type = 'peer' AND timestamp >= $1 AND timestamp < $2),
                     a AS (SELECT m.timestamp, p.status, p.reason, p.created_at, p.updated_at FROM m
                           LEFT JOIN push_attempts p ON p.app_id = m.app_id AND p.message_id = m.message_id AND p.kind = 'message'),
                     s AS (SELECT coalesce(status || coalesce('/' || reason, ''), 'no attempt') AS k, count(*) AS n FROM a GROUP BY 1)
                SELECT (SELECT count(*) FROM m) || '|' || coalesce((SELECT string_agg(k || ':' || n, ' ' ORDER BY n DESC) FROM s), '') || '|' ||
                       coalesce((SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY created_at - timestamp))::text FROM a WHERE status IS NOT NULL), 'n/a') || '|' ||
                       coalesce((SELECT round(percentile_cont(0.99) WITHIN GROUP (ORDER BY created_at - timestamp))::text FROM a WHERE status IS NOT NULL), 'n/a') || '|' ||
                       coalesce((SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY updated_at - timestamp))::text FROM a WHERE status = 'sent'), 'n/a') || '|' ||
                       coalesce((SELECT round(percentile_cont(0.99) WITHIN GROUP (ORDER BY updated_at - timestamp))::text FROM a WHERE status = 'sent'), 'n/a') || '|' ||
                       coalesce((SELECT max(updated_at - timestamp)::text FROM a WHERE status = 'sent'), 'n/a')" 2>/dev/null || echo "n/a|n/a|n/a|n/a|n/a|n/a|n/a"
}

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
declare -A SENT GOT_RUN GOT DUP KEYS DRAIN_S PUSH_SENT PUSH_FAILED A_GOT PENDING_LEFT PLAN_S WIN PER_S
drain() {  # key: waits (bounded) until the planner has caught up, no attempt is pending and the gateway's count has not
           # grown for 1 s (3 s when the attempts list is not available); DRAIN_S[key] seconds after the run, CPU[key, drain]
    local key=$1 start=$SECONDS before pending count prev=-1 still=0 need lag
    before=$(cpu_snapshot)
    while :; do
        pending=$(pending_attempts)
        count=$(json_field "$(gateway_stats)" count)
        if ((count == prev)); then still=$((still + 1)); else still=0; fi
        prev=$count
        need=2
        [[ $pending == n/a ]] && need=6
        if [[ $pending == 0 || $pending == n/a ]] && ((still >= need)); then
            lag=$(planner_lag)
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

declare -A AB_ROUNDS
reference_tables create
for conns in $PUSH_CONNECTIONS; do
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        push_enable false
        gateway_stats reset=1 >/dev/null
        k="a,$conns #$r" t0=$(now_ms)
        measure "$k" send.lua "$conns"
        t1=$(now_ms)
        PLAN_S[$k]=$(wait_planned)
        got=$(json_field "$(gateway_stats reset=1)" count)
        A_GOT[$k]=$got
        WIN[$k]=$(window_attempts "$t0" "$t1")
        log "  planned ${PLAN_S[$k]} s after the run; gateway requests $got; messages|attempts|commit → planned p50|p99 ms: ${WIN[$k]}"
        ((got == 0)) || log "  warning: the gateway got $got requests with push.enabled false"

        key="b,$conns #$r"
        push_enable true
        read -r s0 f0 <<<"$(push_stats)"
        first=$(max_event_id) t0=$(now_ms)
        measure "$key" send.lua "$conns"
        t1=$(now_ms)
        GOT_RUN[$key]=$(json_field "$(gateway_stats)" count)
        drain "$key"
        WIN[$key]=$(window_attempts "$t0" "$t1")
        last=$(max_event_id)
        read -r s1 f1 <<<"$(push_stats)"
        SENT[$key]=$(psql_value "SELECT count(*) FROM events WHERE id > $first AND id <= $last AND type = 'message.sent'")
        stats=$(gateway_stats "since=$(awk -v t="$t0" 'BEGIN { printf "%.3f", t / 1000 }')&reset=1")
        PER_S[$key]=$(json_field "$stats" per_s)
        log "  gateway requests per second from the start of the warm-up: ${PER_S[$key]}"
        GOT[$key]=$(json_field "$stats" count)
        DUP[$key]=$(json_field "$stats" duplicates)
        KEYS[$key]=$(json_field "$stats" unique_pushkeys)
        PUSH_SENT[$key]=$( [[ $s0 == n/a || $s1 == n/a ]] && echo n/a || echo $((s1 - s0)) )
        PUSH_FAILED[$key]=$( [[ $f0 == n/a || $f1 == n/a ]] && echo n/a || echo $((f1 - f0)) )
        log "  messages|attempts|commit → planned p50|p99|commit → sent recorded p50|p99|max ms: ${WIN[$key]}"
        log "  message.sent stored ${SENT[$key]}; gateway requests ${GOT_RUN[$key]} by the run's end, ${GOT[$key]} after the drain (duplicates ${DUP[$key]}, unique pushkeys ${KEYS[$key]}); push_sent_24h +${PUSH_SENT[$key]}, push_failed_24h +${PUSH_FAILED[$key]}; gateway problems $(json_field "$stats" problems)"
        AB_ROUNDS[$conns]="${AB_ROUNDS[$conns]:-}${AB_ROUNDS[$conns]:+, }$(awk -v b="${RATE[parley,$key]}" -v a="${RATE[parley,a,$conns #$r]}" 'BEGIN { printf "%.2f×", (a > 0 ? b / a : 0) }')"
        # The physical limit in the same round, same clients and duration: pgbench's single-row durable INSERT.
        run_pgbench "floor,$conns #$r" floor_insert.sql "$conns" "-c synchronous_commit=on"
    done
done
GATEWAY_FINAL=$(gateway_stats)
reference_tables drop

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
    SUMMARY+=("$conns connections: physical limit (pgbench single-row durable INSERT, same clients and duration, median) $(printf '%.0f' "$floor") tps; push-on sends / limit = **$(ab_ratio "$b" "$floor")**, push-off sends / limit = $(ab_ratio "$a" "$floor")")
    SUMMARY+=("$conns connections: push on / off = **$rt** (median rates $(printf '%.0f' "$b") / $(printf '%.0f' "$a") req/s; rounds ${AB_ROUNDS[$conns]}); target ≥ 0.8×: $(met "${rt%×}" 0.8)")
    sent=0 got=0 lags=
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        k="b,$conns #$r"
        sent=$((sent + ${SENT[$k]:-0})) got=$((got + ${GOT[$k]:-0}))
        IFS='|' read -r _ _ p50 p99 w50 w99 _ <<<"${WIN[$k]}"
        lags="$lags${lags:+, }planned p50 $p50 / p99 $p99 ms, sent p50 $w50 / p99 $w99 ms"
    done
    if ((got == sent)); then verdict="one each"; elif ((got < sent)); then verdict="**$((sent - got)) missing**"; else verdict="**$((got - sent)) more than the messages**"; fi
    SUMMARY+=("$conns connections: $got gateway requests for $sent peer messages stored with push on ($verdict); lag from the commit per round: $lags")
    offs=
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        k="a,$conns #$r"
        IFS='|' read -r wm wa _ _ _ _ _ <<<"${WIN[$k]}"
        offs="$offs${offs:+; }#$r: $wm messages, attempts $wa, ${A_GOT[$k]} gateway requests"
    done
    SUMMARY+=("$conns connections, push off: $offs")
done
if [[ -n $FIELD_PROBLEMS ]]; then SUMMARY+=("fan-out body vs §16.2: **$FIELD_PROBLEMS**"); else SUMMARY+=("fan-out body vs §16.2: every checked field as specified"); fi
for line in "${SUMMARY[@]}"; do log "$line"; done

SECTION=$(
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') — push bridge: offline fan-out to a $RECIPIENTS-member group, peer sends with push on and off"
    echo
    machine_lines
    echo "- load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared with other sessions' builds: read the CPU columns)"
    echo "- parley: release build, embedded PostgreSQL 15, log level error, PARLEY_WEBHOOK_ALLOW_PRIVATE=1; $USERS users, each with one device (android, fcm, push_key key-u<n>, app_id com.example.app) and no stream; one server run"
    echo "- gateway: bench/py/push_gateway.py ($(json_field "$GATEWAY_FINAL" loop), stdlib, one process) on 127.0.0.1, \`push.format\` matrix, 200 \`{\"rejected\":[]}\` at once, arrival time = time.time() on receipt"
    echo "- fan-out: group $GROUP_ID (owner u1 + $RECIPIENTS members), one text from u1 per round with push on; latency = gateway arrival − the send's HTTP response (same clock); the round ends when every recipient's request arrived (+1 s) or nothing arrived for 10 s"
    echo "- sends: wrk \`-t$THREADS -c<conns> -d$DURATION --latency\` with bench/lua/send.lua (peer texts between random u1..u50), 2 s warm-up per run; rounds alternate a (push.enabled false) and b (push.enabled true), $BENCH_ROUNDS rounds per connection count; rates are the median round; after each run the planner catches up (its cursor in push_cursors at the event head: push.enabled is read when an event is planned) and after each b run the push queue drains (no \`pending\` attempt in GET /v1/push/attempts, gateway count still for 1 s); peer messages stored and their attempts by status: psql, messages with a timestamp in the run (warm-up included); commit → planned / sent recorded = attempt created_at / updated_at − message timestamp"
    echo "- cpu: seconds from /proc/<pid>/stat: parley / its PostgreSQL processes / gateway / machine busy of total ($(nproc) CPUs); over the measured ${SECS} s of each run, over each drain, and over each fan-out round (send to end of wait)"
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
    echo "| run | conns | req/s | p50 / p99 | non-2xx | cpu s: parley / pg / gateway / busy of total | peer messages stored | their attempts | gateway requests: by run end / after drain | dup | commit → planned p50 / p99 / commit → sent recorded p50 / p99 / max | push_sent_24h / push_failed_24h growth | planned / drained after the run | drain cpu s |"
    echo "|---|---:|---:|---|---:|---|---:|---|---|---:|---|---|---|---|"
    for conns in $PUSH_CONNECTIONS; do
        for ((r = 1; r <= BENCH_ROUNDS; r++)); do
            k="a,$conns #$r"
            IFS='|' read -r wm wa p50 p99 _ _ _ <<<"${WIN[$k]}"
            printf '| a #%s push off | %s | %.0f | %s / %s | %s | %s | %s | %s | %s | | %s / %s ms | | %s s | |\n' "$r" "$conns" "${RATE[parley,$k]:-0}" "${P50[$k]:-}" "${P99[$k]:-}" "${ERR[$k]:-}" "$(cpu_cell "$k")" \
                "$wm" "$wa" "${A_GOT[$k]}" "$p50" "$p99" "${PLAN_S[$k]}"
            k="b,$conns #$r"
            IFS='|' read -r wm wa p50 p99 w50 w99 wmax <<<"${WIN[$k]}"
            printf '| b #%s push on | %s | %.0f | %s / %s | %s | %s | %s | %s | %s / %s | %s | %s / %s ms / %s / %s / %s ms | %s / %s | %s | %s |\n' "$r" "$conns" "${RATE[parley,$k]:-0}" "${P50[$k]:-}" "${P99[$k]:-}" "${ERR[$k]:-}" "$(cpu_cell "$k")" \
                "$wm" "$wa" "${GOT_RUN[$k]}" "${GOT[$k]}" "${DUP[$k]}" "$p50" "$p99" "$w50" "$w99" "$wmax" "${PUSH_SENT[$k]}" "${PUSH_FAILED[$k]}" \
                "${DRAIN_S[$k]} s$( [[ ${PENDING_LEFT[$k]} == 0 ]] || echo " (${PENDING_LEFT[$k]} pending)")" "$(cpu_cell "$k, drain")"
        done
    done
    echo
    for line in "${SUMMARY[@]}"; do echo "- $line"; done
    for conns in $PUSH_CONNECTIONS; do
        for ((r = 1; r <= BENCH_ROUNDS; r++)); do
            echo "- b #$r, $conns connections: gateway requests per second from the start of the warm-up (2 s warm-up, ${SECS} s run, then the drain): ${PER_S[b,$conns #$r]:-n/a}"
        done
    done
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        echo "- fan-out #$r: gateway requests per second after the send's response: $(json_field "$(json_field "${FO[$r]}" gateway)" per_s)"
    done
    echo "- one fan-out request as received (round 1): \`$(head -c 1500 <<<"${SAMPLE:-null}")\`"
)
record_section "$SECTION"
