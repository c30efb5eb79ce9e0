#!/usr/bin/env python3
"""The HTTP side of bench/rooms.sh: the room's members, the paced room sends, the enter/leave churn, the checks.
Python standard library only (asyncio, hand-written HTTP/1.1 keep-alive client); the SSE side is bench/rooms_reader.c.

usage:
  room_driver.py setup   PORT ROOM MEMBERS
      POST /v1/rooms {room_id: ROOM, creator: u1}, then u2..u<MEMBERS> enter (8 keep-alive connections); checks
      online_count and the room's member_count = MEMBERS. Prints one JSON line.
  room_driver.py run     PORT ROOM MEMBERS RATE SECONDS CHURN CYCLES TEXT_BYTES SEND_LOG
      At once and for SECONDS:
      - sends: RATE room texts per second from u1, open loop (message i is due at start + i/RATE, whatever the
        earlier ones are doing; a pool of keep-alive connections grows when every connection is busy), priority 2,
        no `storage` (unstored), text "rbm:<i>:" padded to TEXT_BYTES; SEND_LOG gets one line per send:
        "<i> <due ns> <write ns> <response ns> <status>" (CLOCK_MONOTONIC, the reader's clock);
      - churn: users u<MEMBERS+1>..u<MEMBERS+CHURN> (no streams) each enter and leave CYCLES times, and every other one
        (even j) enters once more and stays; the ops are spread evenly over SECONDS, one user's ops strictly in order.
        The driver's own bookkeeping (200 responses) says who is in the room at the end.
      Then, after every request answered: online_count, the room's member_count and the member list (paged) against
      the stream holders u1..u<MEMBERS> plus the churn users the bookkeeping has in. Prints one JSON line.
      With ROOM_DRIVER_GROUP=1 the conversation is the group ROOM instead (bench/rooms.sh with BENCH_ROOM_GROUP=1): the
      texts are ordinary stored group messages (no priority, no storage field), CHURN must be 0, and the end check is
      the group's member_count against MEMBERS.
  room_driver.py analyze SEND_LOG READER_RESULT PROGRESS_FILE RUN_JSON
      Joins the send log with the reader's per-message arrivals: deliveries, missing, duplicates, send → last stream
      latency p50/p99/max, deliveries/s. Prints one JSON line.

The app key comes from $PARLEY_KEY.
"""
import asyncio
import json
import os
import resource
import socket
import sys
import time

KEY = os.environ.get("PARLEY_KEY", "")
GROUP = os.environ.get("ROOM_DRIVER_GROUP") == "1"
REQUEST_TIMEOUT = 60.0


class HTTPError(Exception):
    pass


class Conn:
    """One keep-alive HTTP/1.1 connection to 127.0.0.1:port."""

    def __init__(self, port):
        self.port = port
        self.reader = self.writer = None

    async def open(self):
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self

    def close(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def write(self, method, path, body=None):
        data = b"" if body is None else body
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nAuthorization: Bearer {KEY}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode()
        self.writer.write(head + data)

    async def response(self):
        """(status, body bytes, keep-alive)."""
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length, keep = 0, True
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value.strip())
            elif name == b"connection" and value.strip().lower() == b"close":
                keep = False
            elif name == b"transfer-encoding":
                raise HTTPError("chunked response not expected here")
        body = await self.reader.readexactly(length) if length else b""
        return status, body, keep

    async def call(self, method, path, obj=None):
        self.write(method, path, None if obj is None else json.dumps(obj, separators=(",", ":")).encode())
        status, body, keep = await asyncio.wait_for(self.response(), REQUEST_TIMEOUT)
        if not keep:
            self.close()
        return status, body


class Pool:
    """Keep-alive connections handed out one request at a time; grows (up to `cap`) when all are busy."""

    def __init__(self, port, cap):
        self.port, self.cap = port, cap
        self.idle, self.total, self.peak = [], 0, 0
        self.waiters = []

    async def warm(self, n):
        for _ in range(n):
            self.idle.append(await Conn(self.port).open())
            self.total += 1
        self.peak = self.total

    async def get(self):
        if self.idle:
            return self.idle.pop()
        if self.total < self.cap:
            self.total += 1
            self.peak = max(self.peak, self.total)
            try:
                return await Conn(self.port).open()
            except Exception:
                self.total -= 1
                raise
        future = asyncio.get_running_loop().create_future()
        self.waiters.append(future)
        return await future

    def put(self, conn, ok):
        if not ok or conn.writer is None:
            conn.close()
            self.total -= 1
            if self.waiters:  # a waiter gets a fresh connection slot
                waiter = self.waiters.pop(0)
                self.total += 1
                asyncio.ensure_future(self._open_for(waiter))
            return
        if self.waiters:
            self.waiters.pop(0).set_result(conn)
        else:
            self.idle.append(conn)

    async def _open_for(self, waiter):
        try:
            waiter.set_result(await Conn(self.port).open())
        except Exception as error:  # noqa: BLE001 - handed to the waiter
            self.total -= 1
            waiter.set_exception(error)

    def close(self):
        for conn in self.idle:
            conn.close()
        self.idle = []


def problem(status, body):
    try:
        code = json.loads(body).get("code")
    except Exception:  # noqa: BLE001
        code = None
    return f"HTTP {status}" + (f" code {code}" if code else "")


async def pooled_call(pool, method, path, obj):
    conn = await pool.get()
    ok = False
    try:
        status, body = await conn.call(method, path, obj)
        ok = True
        return status, body
    finally:
        pool.put(conn, ok)


# --- setup ----------------------------------------------------------------------------------------------------------

async def setup(port, room, members):
    started = time.monotonic()
    conn = await Conn(port).open()
    status, body = await conn.call("POST", "/v1/rooms", {"room_id": room, "creator": "u1"})
    if status != 201:
        raise SystemExit(f"POST /v1/rooms: {problem(status, body)} {body[:300]!r}")
    conn.close()
    todo = list(range(2, members + 1))
    errors = []

    async def worker():
        c = await Conn(port).open()
        while todo and not errors:
            i = todo.pop(0)
            st, b = await c.call("POST", f"/v1/rooms/{room}/enter", {"user_id": f"u{i}"})
            if st != 200:
                errors.append(f"u{i}: {problem(st, b)} {b[:200]!r}")
            elif json.loads(b).get("already_member"):
                errors.append(f"u{i}: already_member on its first enter")
        c.close()

    await asyncio.gather(*(worker() for _ in range(8)))
    if errors:
        raise SystemExit("enter failed: " + "; ".join(errors[:5]))
    conn = await Conn(port).open()
    count = await online_count(conn, room)
    member_count = await room_member_count(conn, room)
    conn.close()
    if count != members or member_count != members:
        raise SystemExit(f"after the enters: online_count {count}, member_count {member_count}, expected {members}")
    print(json.dumps({"members": members, "online_count": count, "member_count": member_count,
                      "seconds": round(time.monotonic() - started, 1)}))


async def online_count(conn, room):
    status, body = await conn.call("GET", f"/v1/rooms/{room}/online_count")
    if status != 200:
        raise HTTPError(f"GET online_count: {problem(status, body)}")
    return json.loads(body)["count"]


async def room_member_count(conn, room):
    status, body = await conn.call("GET", f"/v1/rooms/{room}")
    if status != 200:
        raise HTTPError(f"GET room: {problem(status, body)}")
    return json.loads(body)["member_count"]


async def group_member_count(conn, group):
    status, body = await conn.call("GET", f"/v1/groups/{group}/member_count")
    if status != 200:
        raise HTTPError(f"GET group member_count: {problem(status, body)}")
    return json.loads(body)["member_count"]


async def member_list(conn, room, kind="rooms"):
    ids, cursor = [], None
    for _ in range(10000):  # bounded: 100 per page
        path = f"/v1/{kind}/{room}/members?limit=100" + (f"&cursor={cursor}" if cursor else "")
        status, body = await conn.call("GET", path)
        if status != 200:
            raise HTTPError(f"GET members: {problem(status, body)}")
        page = json.loads(body)
        ids += [m["user_id"] for m in page["items"]]
        cursor = page.get("next_cursor")
        if not cursor:
            break
        from urllib.parse import quote
        cursor = quote(cursor, safe="")
    return ids


# --- run ------------------------------------------------------------------------------------------------------------

def churn_schedule(members, churn, cycles):
    """[(user, op)] in time order: round r does op r of every user that has one, so one user's ops are far apart."""
    ops = {}
    for j in range(1, churn + 1):
        user = f"u{members + j}"
        ops[user] = ["enter", "leave"] * cycles + (["enter"] if j % 2 == 0 else [])
    schedule = []
    for r in range(max((len(o) for o in ops.values()), default=0)):
        schedule += [(user, o[r]) for user, o in ops.items() if r < len(o)]
    return schedule


async def run(port, room, members, rate, seconds, churn, cycles, text_bytes, send_log):
    loop = asyncio.get_running_loop()
    send_pool, churn_pool = Pool(port, 256), Pool(port, 128)
    await send_pool.warm(8)
    await churn_pool.warm(4 if churn else 0)
    total = int(round(rate * seconds))
    period = 1e9 / rate if rate > 0 else 0
    sends = [None] * total  # (due, write, response, status)
    send_errors = {}
    schedule = churn_schedule(members, churn, cycles)
    churn_period = seconds * 1e9 / len(schedule) if schedule else 0
    in_room = set()
    churn_ok = {"enter": 0, "leave": 0}
    churn_errors = {}
    anomalies = []
    rusage0 = resource.getrusage(resource.RUSAGE_SELF)

    def count(table, key):
        table[key] = table.get(key, 0) + 1

    async def send(i, due):
        text = f"rbm:{i}:"
        text += " " + "x" * max(0, text_bytes - len(text) - 1) if text_bytes > len(text) else ""
        message = {"from": "u1", "conversation_type": "group", "to": room, "type": 1, "body": {"text": text}} if GROUP else \
            {"from": "u1", "conversation_type": "room", "to": room, "type": 1, "body": {"text": text}, "priority": 2}
        body = json.dumps(message, separators=(",", ":")).encode()
        try:
            conn = await send_pool.get()
        except Exception as error:  # noqa: BLE001
            count(send_errors, f"connect: {type(error).__name__}")
            sends[i] = (due, 0, time.monotonic_ns(), 0)
            return
        ok = False
        written = time.monotonic_ns()
        try:
            conn.write("POST", "/v1/messages", body)
            status, answer, keep = await asyncio.wait_for(conn.response(), REQUEST_TIMEOUT)
            answered = time.monotonic_ns()
            ok = keep
            if status != 201:
                count(send_errors, problem(status, answer))
            elif (b'"stored":false' in answer.replace(b" ", b"")) != (not GROUP):
                anomalies.append(f"send {i}: answer with an unexpected stored flag: {answer[:200]!r}")
            sends[i] = (due, written, answered, status)
        except Exception as error:  # noqa: BLE001 - counted
            count(send_errors, type(error).__name__)
            sends[i] = (due, written, time.monotonic_ns(), 0)
        finally:
            send_pool.put(conn, ok)

    async def churn_op(user, op, previous):
        if previous is not None:
            await previous  # one user's ops strictly in order
        try:
            status, body = await pooled_call(churn_pool, "POST", f"/v1/rooms/{room}/{op}", {"user_id": user})
        except Exception as error:  # noqa: BLE001 - counted; the user's state is unknown from here
            count(churn_errors, f"{op}: {type(error).__name__}")
            return
        if status != 200:
            count(churn_errors, f"{op}: {problem(status, body)}")
            return
        churn_ok[op] += 1
        if op == "enter":
            answer = json.loads(body)
            if answer.get("already_member") or answer.get("created"):
                anomalies.append(f"{user} enter: already_member {answer.get('already_member')}, created {answer.get('created')}")
            in_room.add(user)
        else:
            in_room.discard(user)

    async def pace_sends(t0):
        tasks, late_max = [], 0
        for i in range(total):
            due = t0 + int(i * period)
            wait = (due - time.monotonic_ns()) / 1e9
            if wait > 0:
                await asyncio.sleep(wait)
            late_max = max(late_max, time.monotonic_ns() - due)
            tasks.append(asyncio.ensure_future(send(i, due)))
        await asyncio.gather(*tasks)
        return late_max

    async def pace_churn(t0):
        tasks, last = [], {}
        for n, (user, op) in enumerate(schedule):
            due = t0 + int(n * churn_period)
            wait = (due - time.monotonic_ns()) / 1e9
            if wait > 0:
                await asyncio.sleep(wait)
            task = asyncio.ensure_future(churn_op(user, op, last.get(user)))
            last[user] = task
            tasks.append(task)
        await asyncio.gather(*tasks)

    t0 = time.monotonic_ns() + 50_000_000
    late_max, _ = await asyncio.gather(pace_sends(t0), pace_churn(t0))
    t_end = time.monotonic_ns()
    rusage1 = resource.getrusage(resource.RUSAGE_SELF)

    with open(send_log, "w") as f:
        for i, s in enumerate(sends):
            if s is not None:
                f.write(f"{i} {s[0]} {s[1]} {s[2]} {s[3]}\n")

    # The checks, after every request answered.
    conn = await Conn(port).open()
    expected = {f"u{i}" for i in range(1, members + 1)} | in_room
    if GROUP:  # a group has no online count: its member count stands in
        member_count = await group_member_count(conn, room)
        count_now, listed = member_count, await member_list(conn, room, "groups")
    else:
        count_now = await online_count(conn, room)
        member_count = await room_member_count(conn, room)
        listed = await member_list(conn, room)
    conn.close()
    listed_set = set(listed)
    send_pool.close()
    churn_pool.close()
    ok_sends = sum(1 for s in sends if s is not None and s[3] == 201)
    latencies = sorted((s[2] - s[1]) / 1e6 for s in sends if s is not None and s[3] == 201)
    print(json.dumps({
        "sends": total, "sends_ok": ok_sends, "send_errors": send_errors, "send_rate": rate,
        "send_seconds": round((t_end - t0) / 1e9, 2), "send_late_max_ms": round(late_max / 1e6, 1),
        "send_connections_peak": send_pool.peak,
        "send_rtt_p50_ms": pct(latencies, 50), "send_rtt_p99_ms": pct(latencies, 99),
        "churn_users": churn, "churn_cycles": cycles, "churn_ops": len(schedule),
        "churn_enter_ok": churn_ok["enter"], "churn_leave_ok": churn_ok["leave"], "churn_errors": churn_errors,
        "churn_connections_peak": churn_pool.peak,
        "churn_in_room": len(in_room), "expected_members": len(expected),
        "online_count": count_now, "member_count": member_count, "listed": len(listed),
        "listed_duplicates": len(listed) - len(listed_set),
        "listed_missing": len(expected - listed_set), "listed_unexpected": len(listed_set - expected),
        "members_exact": count_now == len(expected) and member_count == len(expected) and listed_set == expected
                         and len(listed) == len(listed_set),
        "anomalies": anomalies[:5], "anomaly_count": len(anomalies),
        "t0_ns": t0, "t_end_ns": t_end, "t_schedule_end_ns": t0 + int(seconds * 1e9),
        "cpu_s": round(rusage1.ru_utime + rusage1.ru_stime - rusage0.ru_utime - rusage0.ru_stime, 2),
    }))


def pct(values, p):
    """Nearest-rank percentile of sorted values (None when empty)."""
    if not values:
        return None
    rank = max(1, -(-len(values) * p // 100))
    return round(values[int(rank) - 1], 1)


# --- analyze --------------------------------------------------------------------------------------------------------

def analyze(send_log, reader_result, progress_file, run_json):
    run_info = json.loads(open(run_json).read())
    sends = {}
    for line in open(send_log):
        i, due, written, answered, status = (int(v) for v in line.split())
        sends[i] = (due, written, answered, status)
    info, arrivals = {}, {}
    for line in open(reader_result):
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "msg":
            arrivals[int(parts[1])] = (int(parts[2]), int(parts[3]), int(parts[4]))
        else:
            info[parts[0]] = " ".join(parts[1:])
    # A stream the server closed early misses what came after: those count as missing. Slow consumers (stalled on
    # purpose) are not expected to receive anything.
    stalled_open = int(info.get("stalled_cut", 0)) + int(info.get("stalled_still_open", 0))
    streams = int(info["opened"]) - stalled_open
    ok = [i for i, s in sends.items() if s[3] == 201]
    expected = len(ok) * streams
    delivered = sum(arrivals.get(i, (0, 0, 0))[0] for i in ok)
    latencies, incomplete = [], 0
    for i in ok:
        got = arrivals.get(i)
        if got is None or got[0] < streams:
            incomplete += 1
            continue
        latencies.append((got[2] - sends[i][1]) / 1e6)
    first_lat = sorted((arrivals[i][1] - sends[i][1]) / 1e6 for i in ok if i in arrivals)
    latencies.sort()
    # Deliveries/s: every message frame the streams received (ours) over first send → last arrival; and per second.
    t_first = min((sends[i][1] for i in ok), default=0)
    t_last = max((arrivals[i][2] for i in ok if i in arrivals), default=0)
    span = (t_last - t_first) / 1e9 if t_last > t_first else 0
    ticks = []
    for line in open(progress_file):
        parts = line.split()
        if len(parts) >= 3:
            ticks.append((int(parts[0]), int(parts[1]), int(parts[2])))
    per_s = []
    for (ta, ma, _), (tb, mb, _) in zip(ticks, ticks[1:]):
        if ta >= run_info["t0_ns"] and tb <= run_info["t_schedule_end_ns"] and tb > ta:  # while the sends are due
            per_s.append((mb - ma) / ((tb - ta) / 1e9))
    per_s.sort()
    churn_ops_ok = run_info["churn_enter_ok"] + run_info["churn_leave_ok"]
    member_frames = int(info["joined_frames"]) + int(info["left_frames"])
    print(json.dumps({
        "streams": streams, "messages_ok": len(ok), "expected": expected, "delivered": delivered,
        "missing": expected - delivered, "duplicates": int(info["duplicates"]),
        "incomplete_messages": incomplete, "complete_messages": len(latencies),
        "message_frames": int(info["message_frames"]), "unmarked": int(info["unmarked"]),
        "out_of_range": int(info["out_of_range"]),
        "p50_ms": pct(latencies, 50), "p99_ms": pct(latencies, 99), "max_ms": round(latencies[-1], 1) if latencies else None,
        "first_p50_ms": pct(first_lat, 50), "first_p99_ms": pct(first_lat, 99),
        "deliveries_per_s": round(delivered / span) if span else None, "span_s": round(span, 2),
        "offered_per_s": round(run_info["send_rate"] * streams),
        "per_s_min": round(per_s[0]) if per_s else None, "per_s_median": round(per_s[len(per_s) // 2]) if per_s else None,
        "per_s_max": round(per_s[-1]) if per_s else None,
        "member_frames": member_frames, "member_frames_expected": churn_ops_ok * streams,
        "per_stream_member_min": int(info["per_stream_member_min"]), "per_stream_member_max": int(info["per_stream_member_max"]),
        "per_stream_messages_min": int(info["per_stream_messages_min"]), "per_stream_messages_max": int(info["per_stream_messages_max"]),
        "other_frames": int(info["other_frames"]), "bytes": int(info["bytes"]), "reads": int(info["reads"]),
        "closed_early": int(info["closed_early"]), "stalled": int(info.get("stalled", 0)), "stalled_open": stalled_open,
        "stalled_cut": int(info.get("stalled_cut", 0)), "stalled_still_open": int(info.get("stalled_still_open", 0)), "reader_cpu_s": round(float(info["cpu_user_s"]) + float(info["cpu_sys_s"]), 2),
    }))


def main():
    command, args = sys.argv[1], sys.argv[2:]
    if command == "setup":
        asyncio.run(setup(int(args[0]), args[1], int(args[2])))
    elif command == "run":
        port, room, members, rate, seconds, churn, cycles, text_bytes, send_log = args
        if GROUP and int(churn):
            raise SystemExit("a group run has no churn (CHURN must be 0)")
        asyncio.run(run(int(port), room, int(members), float(rate), float(seconds), int(churn), int(cycles),
                        int(text_bytes), send_log))
    elif command == "analyze":
        analyze(*args)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
