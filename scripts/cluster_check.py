"""The cluster check of scripts/cluster-check.sh (read its header first): SSE clients and senders through nginx while a
node is killed and restarted, timers and webhook retries across nodes, presence after the dead node's heartbeat
expires; then the checks. Python standard library only (asyncio); loopback only.

usage: scripts/cluster_check.py <cluster directory>   (after `scripts/cluster.sh up 3`; reads cluster.env there)
       scripts/cluster_check.py <cluster directory> rolling   (the rolling restart: every node restarted with SIGTERM)
       scripts/cluster_check.py <cluster directory> upgrade NEW_BINARY   (scripts/upgrade-check.sh: old nodes, migrate,
                                                                           replaced one by one by NEW_BINARY)
       scripts/cluster_check.py <cluster directory> measure SECONDS [WARMUP]   (bench/cluster.sh: no kill, no timers)

Prints one JSON object of figures on standard output; exit status 1 when a check fails.

`measure` opens the same 200 streams through nginx, sends for WARMUP seconds and runs ANALYZE (see below), then for SECONDS runs wrk (bench/lua/send.lua, peer texts between
random pairs of the 200 users, 16 connections) through nginx beside a probe that sends 20 peer texts a second and
times each from writing its POST to its arrival on the recipient's stream; it reports wrk's sends/s and latency, the
probes' delivery p50/p99, the frames the streams received, and the CPU seconds of each part (nodes, PostgreSQL,
nginx, wrk, this client) over the window.
"""
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.parse

CLUSTER_DIR = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(line.strip().split("=", 1) for line in open(os.path.join(CLUSTER_DIR, "cluster.env")) if "=" in line)
ENV = {k: v.strip('"') for k, v in ENV.items()}
LB_PORT = int(ENV["LB_PORT"])
NODE_PORTS = [int(p) for p in ENV["NODE_PORTS"].split()]
KEY = ENV["PARLEY_KEY"]

CLIENTS = int(os.environ.get("CLUSTER_CLIENTS", "200"))        # users u1..u<CLIENTS>, one stream each, through nginx
SENDERS = int(os.environ.get("CLUSTER_SENDERS", "16"))
LOAD_SECONDS = float(os.environ.get("CLUSTER_LOAD_SECONDS", "40"))
KILL_AT = float(os.environ.get("CLUSTER_KILL_AT", "12"))        # seconds into the load
RESTART_AFTER = float(os.environ.get("CLUSTER_RESTART_AFTER", "5"))
KILLED_NODE = int(os.environ.get("CLUSTER_KILLED_NODE", "2"))  # 1-based
OTHER_NODE = 3 if KILLED_NODE != 3 else 1
TIMERS = int(os.environ.get("CLUSTER_TIMERS", "20"))            # friend applications, group applications and calls each
CALL_TIMEOUT_S = int(os.environ.get("CLUSTER_CALL_TIMEOUT_S", "25"))
EXPIRY_S = 60                                                   # application_expiry_s: the smallest the API allows
SCHEDULED = int(os.environ.get("CLUSTER_SCHEDULED", "60"))      # scheduled messages due across the kill and the restart
PAIRS = int(os.environ.get("CLUSTER_PAIRS", "150"))
SEED = int(os.environ.get("CLUSTER_SEED", str(random.randrange(1 << 31))))
PROBES_ALONE = [f"p{i}" for i in range(1, 6)]       # one stream, on the node that is killed: offline afterwards
PROBES_ELSEWHERE = [f"p{i}" for i in range(6, 11)]  # one stream there and one on another node: online (ios) afterwards
RUN = "%08x" % random.randrange(1 << 32)
STARTED = time.monotonic()


def log(text):
    print(f"[cluster-check {time.monotonic() - STARTED:6.1f}s] {text}", file=sys.stderr, flush=True)


def now():
    return time.monotonic() - STARTED


# --- a minimal HTTP/1.1 client (keep-alive, Content-Length and chunked bodies) -------------------------------------

class Connection:
    def __init__(self, port):
        self.port = port
        self.reader = self.writer = None

    async def open(self):
        self.reader, self.writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 5)

    def close(self):
        if self.writer:
            self.writer.close()
        self.reader = self.writer = None

    async def send_head(self, method, path, headers, body=b""):
        if self.writer is None:
            await self.open()
        lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{self.port}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body)}")
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await self.writer.drain()

    async def read_head(self):
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("connection closed before the answer")
        status = int(status_line.split()[1])
        headers = {}
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return status, headers

    async def chunks(self):
        """Yields the chunks of a chunked body as they arrive; ends at the last chunk."""
        while True:
            size_line = await self.reader.readline()
            if not size_line:
                raise ConnectionError("the stream ended without its last chunk")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                await self.reader.readline()
                return
            data = await self.reader.readexactly(size + 2)
            yield data[:-2]

    async def request(self, method, path, body=None, headers=None, timeout=15):
        payload = b"" if body is None else json.dumps(body).encode()
        all_headers = {"Authorization": f"Bearer {KEY}"}
        if body is not None:
            all_headers["Content-Type"] = "application/json"
        all_headers.update(headers or {})

        async def exchange():
            await self.send_head(method, path, all_headers, payload)
            status, head = await self.read_head()
            if head.get("transfer-encoding") == "chunked":
                data = b"".join([c async for c in self.chunks()])
            else:
                data = await self.reader.readexactly(int(head.get("content-length", "0")))
            if head.get("connection") == "close":
                self.close()
            return status, head, (json.loads(data) if data else None)

        try:
            return await asyncio.wait_for(exchange(), timeout)
        except BaseException:
            self.close()
            raise


async def call(method, path, body=None, port=LB_PORT, expect=(200, 201, 202, 204), headers=None):
    connection = Connection(port)
    try:
        status, _, answer = await connection.request(method, path, body, headers)
    finally:
        connection.close()
    if expect and status not in expect:
        raise RuntimeError(f"{method} {path}: {status} {answer}")
    return answer


# --- event streams -------------------------------------------------------------------------------------------------

FRAME_ID = re.compile(rb"^id: ([0-9]+)$", re.M)
FRAME_TYPE = re.compile(rb"^event: ([a-z_.]+)$", re.M)
CLIENT_MSG_ID = re.compile(rb'"client_msg_id":"(k[^"]*)"')


class Stream:
    """One user's event stream. Through nginx it reconnects with Last-Event-ID after any failure, like EventSource;
    a probe (direct to a node) does not."""

    def __init__(self, user, port=LB_PORT, platform="web", reconnect=True):
        self.user, self.port, self.platform, self.reconnect = user, port, platform, reconnect
        self.received = []          # event ids in arrival order, over every connection
        self.arrivals = {}          # client_msg_id of a message.sent -> arrival (monotonic)
        self.start = None           # Parley-Last-Event-ID of the first connection: the audience counts from here
        self.connections = 0
        self.resume_mismatches = []  # (asked, answered) when Parley-Last-Event-ID differs from our Last-Event-ID
        self.nodes = []             # the X-Request-Id prefix (one per server process) of each connection
        self.opened = asyncio.Event()
        self.ended = False
        self.stopping = False
        self.failures = 0
        self.clean_ends = 0         # the server ended the stream (terminating chunk), e.g. a draining node
        self.errors = []            # every other end: a refused or failed (re)connection, a cut stream

    async def run(self):
        while not self.stopping:
            connection = Connection(self.port)
            try:
                headers = {"Authorization": f"Bearer {KEY}", "Accept": "text/event-stream"}
                if self.received:
                    headers["Last-Event-ID"] = str(self.received[-1])
                path = f"/v1/users/{self.user}/events?presence=true&platform={self.platform}"
                await connection.send_head("GET", path, headers)
                status, head = await asyncio.wait_for(connection.read_head(), 10)
                if status != 200:
                    raise ConnectionError(f"stream answered {status}")
                self.connections += 1
                self.nodes.append(head.get("x-request-id", "?").split("-")[0])
                answered = int(head.get("parley-last-event-id", "0"))
                if self.start is None:
                    self.start = answered
                elif answered != self.last():
                    self.resume_mismatches.append((headers.get("Last-Event-ID"), answered))
                self.opened.set()
                pending = b""
                async for chunk in connection.chunks():
                    pending += chunk
                    cut = pending.rfind(b"\n\n")
                    if cut < 0:
                        continue
                    complete, pending = pending[:cut + 2], pending[cut + 2:]
                    arrived = time.monotonic()
                    for frame in complete.split(b"\n\n"):
                        match = FRAME_ID.search(frame)
                        if not match:
                            continue  # retry:, : ping
                        self.received.append(int(match.group(1)))
                        if b"event: message.sent" in frame:
                            found = CLIENT_MSG_ID.search(frame)
                            if found:
                                self.arrivals.setdefault(found.group(1).decode(), arrived)
                self.clean_ends += 1
                raise ConnectionError("the stream ended")
            except (OSError, ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as error:
                self.failures += 1
                if str(error) != "the stream ended" and not self.stopping:
                    self.errors.append(f"{now():.1f}s {type(error).__name__}: {error}")
            finally:
                connection.close()
            if not self.reconnect:
                break
            if not self.stopping:
                await asyncio.sleep(random.uniform(0.1, 0.5))
        self.ended = True

    def last(self):
        return self.received[-1] if self.received else self.start


# --- senders -------------------------------------------------------------------------------------------------------

class Ledger:
    def __init__(self):
        self.acked = {}        # client_msg_id -> (conversation, message_id, seq, monotonic time its answered POST was written)
        self.recipients = {}   # client_msg_id -> users whose streams must carry it
        self.retries = 0
        self.refused = []      # answers that are neither success nor worth a retry
        self.duplicate_answers = 0


async def sender(index, ledger, stop, pairs, groups):
    rng = random.Random(SEED * 1000 + index)
    connection = Connection(LB_PORT)
    n = 0
    while not stop.is_set():
        n += 1
        client_msg_id = f"k{RUN}-{index}-{n}"
        if rng.random() < 0.05:
            group_id, members = rng.choice(groups)
            sender_id = rng.choice(members)
            body = {"from": sender_id, "conversation_type": "group", "to": group_id}
            conversation, recipients = ("group", group_id), members
        else:
            a, b = rng.choice(pairs)
            if rng.random() < 0.5:
                a, b = b, a
            body = {"from": a, "conversation_type": "peer", "to": b}
            conversation, recipients = ("peer", tuple(sorted((a, b)))), [a, b]
        body.update({"type": 1, "body": {"text": f"cluster {client_msg_id}"}, "client_msg_id": client_msg_id})
        headers = {"Idempotency-Key": client_msg_id}
        deadline = time.monotonic() + 60
        while True:
            posted = time.monotonic()
            try:
                status, _, answer = await connection.request("POST", "/v1/messages", body, headers)
            except (OSError, ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
                status, answer = 0, None
            if status in (200, 201) and answer and answer.get("message_id"):
                ledger.acked[client_msg_id] = (conversation, answer["message_id"], answer.get("seq"), posted)
                ledger.recipients[client_msg_id] = recipients
                ledger.duplicate_answers += status == 200
                break
            if status == 409 and answer and answer.get("code") == 7000004:
                headers = {}  # the key's claim belongs to a request a killed node never finished; client_msg_id still dedupes
            elif status not in (0, 429) and status < 500:
                ledger.refused.append((status, answer))
                break
            ledger.retries += 1
            if time.monotonic() > deadline:
                ledger.refused.append((status, "no answer for 60 s"))
                break
            await asyncio.sleep(0.05)
    connection.close()


# --- the webhook receiver: refuses the first attempt of every event, takes the second -------------------------------

class Receiver:
    def __init__(self):
        self.attempts = {}  # webhook-id -> number of attempts seen
        self.types = {}     # webhook-id -> event type

    async def handle(self, reader, writer):
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                headers = {}
                while True:
                    header = await reader.readline()
                    if header in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = header.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                event_id = headers.get("webhook-id", "?")
                count = self.attempts.get(event_id, 0) + 1
                self.attempts[event_id] = count
                try:
                    self.types[event_id] = json.loads(body).get("type")
                except ValueError:
                    pass
                status = "500 Internal Server Error" if count == 1 else "200 OK"
                writer.write(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n".encode())
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


# --- reads for the checks ------------------------------------------------------------------------------------------

async def paged(path, after, limit=100):
    """Every event of a log route (`…/events/log`) after `after`."""
    items = []
    while True:
        separator = "&" if "?" in path else "?"
        page = await call("GET", f"{path}{separator}after={after}&limit={limit}")
        items += page["items"]
        if page.get("next_cursor") is None or not page["items"]:
            return items
        after = page["next_cursor"]


async def history(conversation):
    kind, target = conversation
    items, after = [], 0
    while True:
        if kind == "peer":
            path = f"/v1/users/{target[0]}/conversations/peer/{target[1]}/messages"
        else:
            path = f"/v1/groups/{target}/messages"
        page = await call("GET", f"{path}?direction=forward&after_seq={after}&limit=100")
        batch = page.get("items", [])
        items += batch
        if len(batch) < 100:
            return items
        after = batch[-1]["seq"]


async def statuses(users):
    result = {}
    for first in range(0, len(users), 100):
        answer = await call("POST", "/v1/users/status/query", {"user_ids": users[first:first + 100]})
        result.update({r["id"]: r["data"] for r in answer["results"]})
    return result


async def cluster_command(*args, binary=None):
    env = dict(os.environ, CLUSTER_BINARY=binary) if binary else None
    process = await asyncio.create_subprocess_exec("bash", os.path.join(ROOT, "scripts", "cluster.sh"), *args, env=env)
    if await process.wait() != 0:
        raise RuntimeError(f"scripts/cluster.sh {' '.join(args)} failed")


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


async def bounded(coroutines, limit=16):
    gate = asyncio.Semaphore(limit)

    async def one(c):
        async with gate:
            return await c
    return await asyncio.gather(*(one(c) for c in coroutines))


async def files_on_every_node():
    """A file uploaded through one node downloads byte for byte from every node, with the key and through the signed
    URL the uploading node issued (the bytes live in PostgreSQL; the URL key derives from the shared admin key)."""
    data = random.Random(SEED).randbytes(700_000)
    upload = Connection(NODE_PORTS[0])
    await upload.send_head("POST", "/v1/files", {"Authorization": f"Bearer {KEY}", "Parley-File-Name": "cluster.bin",
                                                 "Content-Type": "application/octet-stream"}, data)
    status, head = await upload.read_head()
    answer = json.loads(await upload.reader.readexactly(int(head.get("content-length", "0"))))
    upload.close()
    if status != 201:
        return [f"upload through node 1 answered {status}: {answer}"]
    signed = urllib.parse.urlsplit(answer["url"])
    problems = []
    for node, port in enumerate(NODE_PORTS, 1):
        for path, headers in ((f"/v1/files/{answer['file_id']}", {"Authorization": f"Bearer {KEY}"}),
                              (signed.path + "?" + signed.query, {})):
            download = Connection(port)
            await download.send_head("GET", path, headers)
            status, head = await download.read_head()
            got = await download.reader.readexactly(int(head.get("content-length", "0")))
            download.close()
            if status != 200 or got != data:
                problems.append(f"node {node} {'signed' if not headers else 'key'}: {status}, {len(got)} bytes")
    return problems


async def check():
    rng = random.Random(SEED)
    users = [f"u{i}" for i in range(1, CLIENTS + 1)]
    log(f"seed {SEED}; nginx :{LB_PORT} over nodes {NODE_PORTS}; {CLIENTS} streams, {SENDERS} senders, "
        f"{LOAD_SECONDS:.0f} s of load, node {KILLED_NODE} killed at {KILL_AT:.0f} s and restarted {RESTART_AFTER:.0f} s later")

    # Setup: settings, users, two groups for fan-out, one group that takes join applications, the webhook.
    await call("PATCH", "/v1/settings", {"rate_limit_app_rps": 100000, "user_send_rate_per_s": 1000,
                                         "application_expiry_s": EXPIRY_S})
    everyone = users + PROBES_ALONE + PROBES_ELSEWHERE
    for first in range(0, len(everyone), 100):
        await call("POST", "/v1/users/import", {"users": [{"user_id": u} for u in everyone[first:first + 100]]})
    half = CLIENTS // 2
    groups = [(f"g1-{RUN}", users[:half]), (f"g2-{RUN}", users[half:])]
    for group_id, members in groups:
        await call("POST", "/v1/groups", {"group_id": group_id, "operator": members[0], "members": members[1:]})
    # One join application per group: a webhook delivers the events of one ordering key (a group) one after another,
    # so twenty in one group would wait for each other's retries.
    join_groups = [f"gj{i}-{RUN}" for i in range(TIMERS)]
    for group_id in join_groups:
        await call("POST", "/v1/groups", {"group_id": group_id, "operator": users[0], "join_mode": "auth"})
    receiver = Receiver()
    server = await asyncio.start_server(receiver.handle, "127.0.0.1", 0)
    hook_port = server.sockets[0].getsockname()[1]
    await call("POST", "/v1/webhooks", {"url": f"http://127.0.0.1:{hook_port}/hook", "timeout_ms": 2000,
                                        "disable_after_failures": 1000,
                                        "event_types": ["call.ended", "friend.application_updated", "group.application_updated"]})
    file_problems = await files_on_every_node()
    log(f"files: uploaded through node 1, downloaded from {len(NODE_PORTS)} nodes: {file_problems or 'identical'}")
    pairs = set()
    while len(pairs) < min(PAIRS, CLIENTS * (CLIENTS - 1) // 2):
        a, b = rng.sample(users, 2)
        pairs.add(tuple(sorted((a, b))))
    pairs = sorted(pairs)

    # Streams: every user through nginx; the probes straight to their nodes.
    streams = {u: Stream(u) for u in users}
    killed_port, other_port = NODE_PORTS[KILLED_NODE - 1], NODE_PORTS[OTHER_NODE - 1]
    probes = [Stream(p, killed_port, "web", reconnect=False) for p in PROBES_ALONE + PROBES_ELSEWHERE]
    probes += [Stream(p, other_port, "ios", reconnect=False) for p in PROBES_ELSEWHERE]
    tasks = [asyncio.create_task(s.run()) for s in list(streams.values()) + probes]
    for s in list(streams.values()) + probes:
        await asyncio.wait_for(s.opened.wait(), 30)
    spread = {}
    for s in streams.values():
        spread[s.nodes[0]] = spread.get(s.nodes[0], 0) + 1
    log(f"{len(streams)} streams open through nginx, per node process: {sorted(spread.values(), reverse=True)}; "
        f"{len(probes)} probe streams direct")
    await asyncio.sleep(1.5)  # presence rows written
    before = await statuses(PROBES_ALONE + PROBES_ELSEWHERE)
    probes_online_before = sum(1 for s in before.values() if s["online_status"] == "online")

    # Timers due after the restart (calls) and well after it (applications), all with their webhook.
    friend_applications, group_applications, calls = [], [], []
    for i in range(TIMERS):
        answer = await call("POST", f"/v1/users/{users[i]}/friend_applications", {"to": users[-1 - i], "wording": "hi"})
        friend_applications.append(answer["application_id"])
        answer = await call("POST", f"/v1/groups/{join_groups[i]}/join", {"user_id": users[half + i], "wording": "let me in"})
        group_applications.append(answer["application_id"])
        answer = await call("POST", "/v1/calls", {"caller": users[2 * TIMERS + i], "invitees": [users[3 * TIMERS + i]],
                                                  "timeout_s": CALL_TIMEOUT_S})
        calls.append(answer["call"]["call_id"])
    timers_set_at = now()
    # Scheduled messages (docs/scheduled-messages.md) due from 12 s on, one every 300 ms: before, during and after
    # the kill and the restart. Each must be sent once, never before its send_at, whichever node sends it.
    sched_from, sched_to = f"sched-a-{RUN}", f"sched-b-{RUN}"
    await call("POST", "/v1/users/import", {"users": [{"user_id": sched_from}, {"user_id": sched_to}]})
    first_due = int(time.time() * 1000) + 12_000
    scheduled = []
    for i in range(SCHEDULED):
        send_at = first_due + i * 300
        answer = await call("POST", "/v1/messages", {"from": sched_from, "conversation_type": "peer", "to": sched_to, "type": 1,
                                                     "body": {"text": f"scheduled {i}"}, "send_at": send_at})
        scheduled.append((answer["scheduled_id"], send_at))

    # Load, with the kill and the restart.
    ledger, stop = Ledger(), asyncio.Event()
    load_started = now()
    senders = [asyncio.create_task(sender(i, ledger, stop, pairs, groups)) for i in range(SENDERS)]
    await asyncio.sleep(KILL_AT)
    await cluster_command("kill", str(KILLED_NODE))
    killed_at = now()
    log(f"node {KILLED_NODE} killed; {len(ledger.acked)} sends acknowledged so far")
    await asyncio.sleep(RESTART_AFTER)
    await cluster_command("start", str(KILLED_NODE))
    restarted_at = now()
    log(f"node {KILLED_NODE} restarted ({restarted_at - killed_at:.1f} s after the kill)")

    # Presence: the probes alone on the dead node go offline once its heartbeat expires; the others stay online.
    offline_after = None
    while now() < killed_at + 90:
        current = await statuses(PROBES_ALONE)
        if all(current[p]["online_status"] != "online" for p in PROBES_ALONE):
            offline_after = now() - killed_at
            break
        await asyncio.sleep(0.5)
    log(f"probes alone on the dead node offline {offline_after and round(offline_after, 1)} s after the kill")
    remaining = LOAD_SECONDS - (now() - load_started)
    if remaining > 0:
        await asyncio.sleep(remaining)
    stop.set()
    await asyncio.gather(*senders)
    load_seconds = now() - load_started
    log(f"load stopped: {len(ledger.acked)} sends acknowledged in {load_seconds:.1f} s, {ledger.retries} retries")
    after = await statuses(PROBES_ALONE + PROBES_ELSEWHERE + users)

    # Wait for the timers (applications expire EXPIRY_S after they were made) and the webhook's second attempts.
    expected_hooks = len(friend_applications) + len(group_applications) + len(calls)
    deadline = timers_set_at + EXPIRY_S + 45
    while now() < deadline:
        done = [i for i, count in receiver.attempts.items() if count >= 2]
        if len(done) >= expected_hooks:
            break
        await asyncio.sleep(0.5)
    await asyncio.sleep(3)  # a third attempt, were there one, would show now

    # Scheduled messages: each `sent` once (its dedupe key `s:<scheduled_id>` once in the history), none early.
    sched_states = [await call("GET", f"/v1/scheduled_messages/{sid}") for sid, _ in scheduled]
    sched_items = [m for m in await history(("peer", (sched_to, sched_from))) if (m.get("client_msg_id") or "").startswith("s:")]
    sched_count = {}
    for m in sched_items:
        sched_count[m["client_msg_id"]] = sched_count.get(m["client_msg_id"], 0) + 1
    sched_sent_once = sum(1 for (sid, _), st in zip(scheduled, sched_states)
                          if st["state"] == "sent" and sched_count.get(f"s:{sid}") == 1)
    due_at = {f"s:{sid}": send_at for sid, send_at in scheduled}
    sched_early = sum(1 for m in sched_items if m["timestamp"] < due_at.get(m["client_msg_id"], 0))
    sched_lateness = [m["timestamp"] - due_at[m["client_msg_id"]] for m in sched_items if m["client_msg_id"] in due_at]

    # The truth in the database, read through nginx: each user's events from where its stream started.
    logs = dict(zip(users, await bounded([paged(f"/v1/users/{u}/events/log", streams[u].start) for u in users])))
    targets = {u: int(logs[u][-1]["id"]) if logs[u] else streams[u].start for u in users}
    caught_up_by = now() + 30
    while now() < caught_up_by and any(streams[u].last() < targets[u] for u in users):
        await asyncio.sleep(0.2)
    for s in list(streams.values()) + probes:
        s.stopping = True
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

    expected_total = delivered = duplicates = missing = order_violations = unexpected = 0
    reconnected = sum(1 for s in streams.values() if s.connections > 1)
    resume_mismatches = sum(len(s.resume_mismatches) for s in streams.values())
    examples = []
    for u in users:
        expected = [int(e["id"]) for e in logs[u]]
        received = streams[u].received
        expected_total += len(expected)
        delivered += len(received)
        duplicates += len(received) - len(set(received))
        missing_here = set(expected) - set(received)
        missing += len(missing_here)
        unexpected += len(set(received) - set(expected))
        order_violations += sum(1 for x, y in zip(received, received[1:]) if y <= x)
        if (missing_here or received != expected) and len(examples) < 3:
            examples.append({"user": u, "start": streams[u].start, "missing": sorted(missing_here)[:5],
                             "received_tail": received[-5:], "expected_tail": expected[-5:]})

    # Every acknowledged send is in its conversation's history once, and reached each recipient's stream.
    conversations = sorted({v[0] for v in ledger.acked.values()})
    histories = dict(zip(conversations, await bounded([history(c) for c in conversations])))
    found, seen = {}, {}
    for items in histories.values():
        for item in items:
            cid = item.get("client_msg_id") or ""
            seen[cid] = seen.get(cid, 0) + 1
            found[cid] = item["message_id"]
    lost = [cid for cid, v in ledger.acked.items() if found.get(cid) != v[1]]
    stored_twice = [cid for cid, count in seen.items() if cid.startswith("k") and count > 1]
    not_streamed, latencies = 0, []
    for cid, recipients in ledger.recipients.items():
        posted = ledger.acked[cid][3]
        for r in recipients:
            arrival = streams[r].arrivals.get(cid)
            if arrival is None:
                not_streamed += 1
            elif STARTED + load_started + 2 < posted < STARTED + killed_at or posted > STARTED + restarted_at + 5:
                # From writing the POST to the recipient's stream (an upper bound of commit to delivery), in the
                # steady state: not the kill and restart window.
                latencies.append((arrival - posted) * 1000)

    # Timers: one expiry event per application, one call.ended per call, and each of them delivered to the webhook by
    # exactly two attempts (the first refused on purpose).
    timer_events = await paged("/v1/events/log?types=friend.application_updated,group.application_updated,call.ended",
                               "earliest")
    fired = {}
    for e in timer_events:
        data = e["data"]
        if e["type"] == "call.ended":
            key = ("call", data["call"]["call_id"])
        else:
            application = data.get("application", {})
            if application.get("state") != "expired":
                continue
            key = (e["type"], application.get("application_id"))
        fired.setdefault(key, []).append(e["id"])
    wanted = [("friend.application_updated", a) for a in friend_applications] + \
             [("group.application_updated", a) for a in group_applications] + [("call", c) for c in calls]
    timers_once = sum(1 for k in wanted if len(fired.get(k, [])) == 1)
    timers_twice = sum(1 for k in wanted if len(fired.get(k, [])) > 1)
    timers_never = sum(1 for k in wanted if not fired.get(k))
    hook_ids = {str(i) for k in wanted for i in fired.get(k, [])}
    hooks_two_attempts = sum(1 for i in hook_ids if receiver.attempts.get(i) == 2)
    hooks_more = sum(1 for i in hook_ids if receiver.attempts.get(i, 0) > 2)
    hooks_short = sum(1 for i in hook_ids if receiver.attempts.get(i, 0) < 2)

    probes_alone_after = [after[p]["online_status"] for p in PROBES_ALONE]
    probes_elsewhere_after = [(after[p]["online_status"], after[p].get("online_platforms")) for p in PROBES_ELSEWHERE]
    clients_offline_after = sum(1 for u in users if after[u]["online_status"] != "online")
    server.close()

    figures = {
        "seed": SEED,
        "streams": len(streams), "streams_per_node_process_at_start": sorted(spread.values(), reverse=True),
        "streams_reconnected": reconnected, "reconnections": sum(s.connections - 1 for s in streams.values()),
        "resume_point_mismatches": resume_mismatches,
        "events_expected": expected_total, "events_delivered": delivered, "duplicates": duplicates,
        "missing": missing, "order_violations": order_violations, "unexpected_events": unexpected,
        "senders": SENDERS, "load_s": round(load_seconds, 1),
        "sends_acknowledged": len(ledger.acked), "sends_found_in_history": len(ledger.acked) - len(lost),
        "sends_lost": len(lost), "sends_stored_twice": len(stored_twice), "send_retries": ledger.retries,
        "sends_refused": len(ledger.refused), "sends_per_s": round(len(ledger.acked) / load_seconds, 1),
        "message_deliveries_not_streamed": not_streamed,
        "delivery_ms_p50_outside_kill": percentile(latencies, 50) and round(percentile(latencies, 50), 1),
        "delivery_ms_p99_outside_kill": percentile(latencies, 99) and round(percentile(latencies, 99), 1),
        "timers": len(wanted), "timers_fired_once": timers_once, "timers_fired_twice_or_more": timers_twice,
        "timers_never_fired": timers_never,
        "webhook_events": len(hook_ids), "webhook_two_attempts": hooks_two_attempts,
        "webhook_more_than_two": hooks_more, "webhook_fewer_than_two": hooks_short,
        "probes_online_before_kill": probes_online_before,
        "probes_alone_offline_s_after_kill": offline_after and round(offline_after, 1),
        "probes_alone_after": probes_alone_after, "probes_elsewhere_after": probes_elsewhere_after,
        "clients_offline_after": clients_offline_after,
        "node_killed_at_s": round(killed_at - load_started, 1), "node_restarted_at_s": round(restarted_at - load_started, 1),
        "files_served_by_every_node": not file_problems,
        "scheduled": len(scheduled), "scheduled_sent_once": sched_sent_once, "scheduled_sent_early": sched_early,
        "scheduled_lateness_ms_max": max(sched_lateness) if sched_lateness else None,
        "run_s": round(now(), 1),
    }
    print("{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in figures.items()) + "\n}")  # one line a figure
    problems = []
    if missing or duplicates or order_violations or unexpected:
        problems.append(f"stream delivery: {examples}")
    if resume_mismatches:
        problems.append("a resumed stream did not start where it was asked to")
    if lost or stored_twice or ledger.refused:
        problems.append(f"sends: lost {lost[:3]}, stored twice {stored_twice[:3]}, refused {ledger.refused[:3]}")
    if not_streamed:
        problems.append(f"{not_streamed} message deliveries never reached a recipient's stream")
    if sched_sent_once != len(scheduled) or sched_early:
        problems.append(f"scheduled messages: {sched_sent_once} of {len(scheduled)} sent once, {sched_early} early; "
                        f"states {sorted({st['state'] for st in sched_states})}")
    if timers_once != len(wanted):
        problems.append(f"timers: {timers_twice} fired more than once, {timers_never} never")
    if hooks_two_attempts != len(wanted):
        problems.append(f"webhook: {hooks_more} with more than two attempts, {hooks_short} with fewer")
    if probes_online_before != len(PROBES_ALONE + PROBES_ELSEWHERE):
        problems.append(f"presence before the kill: {before}")
    if offline_after is None or any(s == "online" for s in probes_alone_after):
        problems.append(f"presence: the dead node's lone users stayed online: {probes_alone_after}")
    if any(s != "online" or p != ["ios"] for s, p in probes_elsewhere_after):
        problems.append(f"presence: users connected elsewhere: {probes_elsewhere_after}")
    if clients_offline_after:
        problems.append(f"presence: {clients_offline_after} reconnected clients read offline")
    if reconnected == 0:
        problems.append("no stream was on the killed node")
    if file_problems:
        problems.append(f"files: {file_problems}")
    for p in problems:
        log(f"FAILED: {p}")
    return 1 if problems else 0


# --- the rolling restart (scripts/cluster-check.sh, after check()) ---------------------------------------------------

ROLLING_USERS = int(os.environ.get("CLUSTER_ROLLING_USERS", "60"))
ROLLING_SENDERS = int(os.environ.get("CLUSTER_ROLLING_SENDERS", "6"))
ROLLING_READERS = int(os.environ.get("CLUSTER_ROLLING_READERS", "3"))
ROLLING_PAUSE = float(os.environ.get("CLUSTER_ROLLING_PAUSE", "2"))  # seconds of load before, between and after restarts


class Tally:
    """Every request of the rolling restart's load: an answer other than the expected one, or a connection error,
    is a failure (no client retry hides one)."""

    def __init__(self):
        self.ok = 0
        self.failures = []

    def record(self, what, status, expected):
        if status in expected:
            self.ok += 1
        else:
            self.failures.append(f"{now():.1f}s {what}: {status}")


async def strict_sender(index, tally, ledger, stop, users):
    """Sends peer texts through nginx, one attempt each. Each carries client_msg_id and Idempotency-Key: nginx may
    resend a POST to the next node when the first failed before answering (`proxy_next_upstream ... non_idempotent`),
    and the resend is then a duplicate (200), never a second message."""
    rng = random.Random(SEED * 7 + index)
    connection = Connection(LB_PORT)
    n = 0
    while not stop.is_set():
        n += 1
        a, b = rng.sample(users, 2)
        client_msg_id = f"k{RUN}-r{index}-{n}"
        body = {"from": a, "conversation_type": "peer", "to": b, "type": 1, "body": {"text": f"rolling {client_msg_id}"},
                "client_msg_id": client_msg_id}
        try:
            status, _, answer = await connection.request("POST", "/v1/messages", body, {"Idempotency-Key": client_msg_id})
        except (OSError, ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as error:
            status, answer = type(error).__name__, None
        tally.record("POST /v1/messages", status, (200, 201))
        if status in (200, 201) and answer:
            ledger.acked[client_msg_id] = (("peer", tuple(sorted((a, b)))), answer["message_id"], answer.get("seq"), 0)
            ledger.recipients[client_msg_id] = [a, b]
        await asyncio.sleep(0.02)
    connection.close()


async def strict_reader(index, tally, stop, users):
    """Reads through nginx (a user, a conversation page, the app's event log), one attempt each."""
    rng = random.Random(SEED * 11 + index)
    connection = Connection(LB_PORT)
    while not stop.is_set():
        a, b = rng.sample(users, 2)
        path = rng.choice([f"/v1/users/{a}", f"/v1/users/{a}/conversations/peer/{b}/messages?limit=20",
                           "/v1/events/log?limit=10"])
        try:
            status, _, _ = await connection.request("GET", path)
        except (OSError, ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as error:
            status = type(error).__name__
        tally.record(f"GET {path.split('?')[0]}", status, (200,))
        await asyncio.sleep(0.02)
    connection.close()


async def rolling():
    """Restarts node 1, 2 and 3 in turn with SIGTERM (each ready again before the next) under sends, reads and open
    streams through nginx; every request must succeed and every stream resume exactly where it left off."""
    users = [f"r{RUN}-{i}" for i in range(1, ROLLING_USERS + 1)]
    await call("POST", "/v1/users/import", {"users": [{"user_id": u} for u in users]}, headers={"Idempotency-Key": f"i{RUN}"})
    streams = {u: Stream(u) for u in users}
    tasks = [asyncio.create_task(s.run()) for s in streams.values()]
    for s in streams.values():
        await asyncio.wait_for(s.opened.wait(), 30)
    await asyncio.sleep(1)  # presence rows written
    log(f"rolling restart: {len(streams)} streams through nginx, {ROLLING_SENDERS} senders, {ROLLING_READERS} readers")
    tally, ledger, stop = Tally(), Ledger(), asyncio.Event()
    load_started = now()
    workers = [asyncio.create_task(strict_sender(i, tally, ledger, stop, users)) for i in range(ROLLING_SENDERS)]
    workers += [asyncio.create_task(strict_reader(i, tally, stop, users)) for i in range(ROLLING_READERS)]
    restarts = []
    for node in range(1, len(NODE_PORTS) + 1):
        await asyncio.sleep(ROLLING_PAUSE)
        began = now()
        await cluster_command("restart", str(node))
        restarts.append(round(now() - began, 1))
        log(f"node {node} restarted with SIGTERM and ready again in {restarts[-1]} s; {tally.ok} requests so far, "
            f"{len(tally.failures)} failed")
    await asyncio.sleep(ROLLING_PAUSE)
    stop.set()
    await asyncio.gather(*workers)
    load_seconds = now() - load_started

    # Every stream must reach its user's log head, then match it exactly.
    logs = dict(zip(users, await bounded([paged(f"/v1/users/{u}/events/log", streams[u].start) for u in users])))
    targets = {u: int(logs[u][-1]["id"]) if logs[u] else streams[u].start for u in users}
    caught_up_by = now() + 30
    while now() < caught_up_by and any(streams[u].last() < targets[u] for u in users):
        await asyncio.sleep(0.2)
    after = await statuses(users)
    for s in streams.values():
        s.stopping = True
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

    inexact, examples = 0, []
    for u in users:
        expected = [int(e["id"]) for e in logs[u]]
        if streams[u].received != expected:
            inexact += 1
            if len(examples) < 3:
                examples.append({"user": u, "received_tail": streams[u].received[-5:], "expected_tail": expected[-5:]})
    # Presence: a user whose stream moved to another node within the handover never read offline.
    flaps = sum(1 for u in users for e in logs[u]
                if e["type"] == "user.status_updated" and e["data"]["status"]["online_status"] != "online")
    conversations = sorted({v[0] for v in ledger.acked.values()})
    histories = dict(zip(conversations, await bounded([history(c) for c in conversations])))
    stored = {}
    for items in histories.values():
        for item in items:
            stored.setdefault(item.get("client_msg_id") or "", []).append(item["message_id"])
    lost = [cid for cid, v in ledger.acked.items() if stored.get(cid) != [v[1]]]
    not_streamed = sum(1 for cid, recipients in ledger.recipients.items() for r in recipients if cid not in streams[r].arrivals)
    stream_errors = [e for s in streams.values() for e in s.errors]
    figures = {
        "rolling_restart_s_per_node": restarts, "rolling_load_s": round(load_seconds, 1),
        "rolling_requests": tally.ok + len(tally.failures), "rolling_requests_failed": len(tally.failures),
        "rolling_sends_acknowledged": len(ledger.acked), "rolling_sends_lost_or_twice": len(lost),
        "rolling_deliveries_not_streamed": not_streamed,
        "rolling_streams": len(streams), "rolling_stream_ends_by_drain": sum(s.clean_ends for s in streams.values()),
        "rolling_stream_errors": len(stream_errors), "rolling_streams_inexact": inexact,
        "rolling_resume_mismatches": sum(len(s.resume_mismatches) for s in streams.values()),
        "rolling_presence_offline_events": flaps,
        "rolling_users_offline_after": sum(1 for u in users if after[u]["online_status"] != "online"),
        "run_s": round(now(), 1),
    }
    print("{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in figures.items()) + "\n}")
    problems = []
    if tally.failures:
        problems.append(f"{len(tally.failures)} failed requests: {tally.failures[:5]}")
    if stream_errors:
        problems.append(f"{len(stream_errors)} stream errors: {stream_errors[:5]}")
    if inexact or figures["rolling_resume_mismatches"]:
        problems.append(f"streams not exact: {examples}")
    if lost or not_streamed:
        problems.append(f"sends: {lost[:3]} lost or stored twice, {not_streamed} deliveries not streamed")
    if figures["rolling_stream_ends_by_drain"] < len(streams):
        problems.append("fewer streams were ended by a draining node than there are streams")
    if flaps or figures["rolling_users_offline_after"]:
        problems.append(f"presence: {flaps} offline events, {figures['rolling_users_offline_after']} users offline after")
    for p in problems:
        log(f"FAILED: {p}")
    return 1 if problems else 0


# --- the upgrade (scripts/upgrade-check.sh) -----------------------------------------------------------------------

async def upgrade(new_binary):
    """The nodes run the previous release. Under sends, reads and open streams through nginx: the new binary's
    `parley migrate` runs while they serve, they keep serving (writing into the migrated schema), then each is
    replaced by a node of the new binary (SIGTERM, start). Every request must succeed; what the old nodes wrote must
    read back through the new ones, and every stream must match its user's log exactly."""
    users = [f"v{RUN}-{i}" for i in range(1, ROLLING_USERS + 1)]
    await call("PATCH", "/v1/settings", {"rate_limit_app_rps": 100000, "user_send_rate_per_s": 1000})
    await call("POST", "/v1/users/import", {"users": [{"user_id": u} for u in users]}, headers={"Idempotency-Key": f"i{RUN}"})
    group_id = f"gv-{RUN}"
    await call("POST", "/v1/groups", {"group_id": group_id, "operator": users[0], "members": users[1:20]},
               headers={"Idempotency-Key": f"g{RUN}"})
    streams = {u: Stream(u) for u in users}
    tasks = [asyncio.create_task(s.run()) for s in streams.values()]
    for s in streams.values():
        await asyncio.wait_for(s.opened.wait(), 30)
    tally, ledger, stop = Tally(), Ledger(), asyncio.Event()
    phases = {}

    def mark(phase):
        phases[phase] = len(ledger.acked)
        log(f"{phase}: {len(ledger.acked)} sends acknowledged, {tally.ok} requests, {len(tally.failures)} failed")

    workers = [asyncio.create_task(strict_sender(i, tally, ledger, stop, users)) for i in range(ROLLING_SENDERS)]
    workers += [asyncio.create_task(strict_reader(i, tally, stop, users)) for i in range(ROLLING_READERS)]
    await asyncio.sleep(ROLLING_PAUSE * 2)
    mark("old nodes, old schema")
    began = now()
    migrate = await asyncio.create_subprocess_exec(
        new_binary, "migrate", "--data-dir", os.path.join(CLUSTER_DIR, "migrate"), cwd=ROOT,
        env=dict(os.environ, DATABASE_URL=ENV["DATABASE_URL"], PARLEY_LOG_LEVEL="info"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    output = (await migrate.communicate())[0].decode()
    migrate_s = round(now() - began, 1)
    if migrate.returncode != 0:
        raise RuntimeError(f"parley migrate failed: {output[-2000:]}")
    applied = re.findall(r"applied ([0-9]+_[a-z0-9_]+\.sql)", output)
    log(f"new binary's migrate took {migrate_s} s while the old nodes served: {len(applied)} migrations {applied}")
    await asyncio.sleep(ROLLING_PAUSE)
    mark("old nodes, new schema")
    restarts = []
    for node in range(1, len(NODE_PORTS) + 1):
        began = now()
        await cluster_command("restart", str(node), binary=new_binary)
        restarts.append(round(now() - began, 1))
        # Past nginx's fail_timeout (2 s): an old node resets the connections it had as it stops, and nginx then
        # counts the node restarted before it as down for 2 s too; with two nodes both would be out at once.
        await asyncio.sleep(ROLLING_PAUSE * 2)
    mark("new nodes")
    stop.set()
    await asyncio.gather(*workers)
    # A group message and a read through the new nodes of what the old ones wrote.
    await call("POST", "/v1/messages", {"from": users[0], "conversation_type": "group", "to": group_id, "type": 1,
                                        "body": {"text": "after the upgrade"}, "client_msg_id": f"k{RUN}-group"})

    logs = dict(zip(users, await bounded([paged(f"/v1/users/{u}/events/log", streams[u].start) for u in users])))
    targets = {u: int(logs[u][-1]["id"]) if logs[u] else streams[u].start for u in users}
    caught_up_by = now() + 30
    while now() < caught_up_by and any(streams[u].last() < targets[u] for u in users):
        await asyncio.sleep(0.2)
    for s in streams.values():
        s.stopping = True
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

    inexact = sum(1 for u in users if streams[u].received != [int(e["id"]) for e in logs[u]])
    conversations = sorted({v[0] for v in ledger.acked.values()})
    histories = dict(zip(conversations, await bounded([history(c) for c in conversations])))
    stored = {}
    for items in histories.values():
        for item in items:
            stored.setdefault(item.get("client_msg_id") or "", []).append(item["message_id"])
    order = list(ledger.acked)  # acknowledgement order: phases[...] counts index into it
    missing_by_phase = {}
    bounds = [0, phases["old nodes, old schema"], phases["old nodes, new schema"], len(order)]
    for name, (a, b) in zip(["old_schema", "old_binary_new_schema", "rolling_and_new"], zip(bounds, bounds[1:])):
        missing_by_phase[name] = sum(1 for cid in order[a:b] if stored.get(cid) != [ledger.acked[cid][1]])
    group_items = await history(("group", group_id))
    # The previous release stops its live hub before its listener: a stream that reaches an old node as it shuts down
    # is refused with 429 (too_many_streams) and the client reconnects (to another node) and resumes; this release
    # ends its streams first and refuses connections instead (docs/operations.md#shutdown). Anything else is a failure.
    stream_errors = [e for s in streams.values() for e in s.errors]
    refused_by_old = [e for e in stream_errors if e.endswith("stream answered 429")]
    stream_errors = [e for e in stream_errors if e not in refused_by_old]
    figures = {
        "upgrade_migrate_s": migrate_s, "upgrade_migrations_applied": len(applied),
        "upgrade_restart_s_per_node": restarts,
        "upgrade_sends_by_phase": {"old_schema": bounds[1], "old_binary_new_schema": bounds[2] - bounds[1],
                                   "rolling_and_new": bounds[3] - bounds[2]},
        "upgrade_sends_not_read_back_by_phase": missing_by_phase,
        "upgrade_requests": tally.ok + len(tally.failures), "upgrade_requests_failed": len(tally.failures),
        "upgrade_stream_errors": len(stream_errors), "upgrade_stream_opens_refused_by_stopping_old_nodes": len(refused_by_old),
        "upgrade_streams_inexact": inexact,
        "upgrade_events_read_back": sum(len(v) for v in logs.values()),
        "upgrade_group_message_read_back": any(i.get("client_msg_id") == f"k{RUN}-group" for i in group_items),
        "run_s": round(now(), 1),
    }
    print("{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in figures.items()) + "\n}")
    problems = []
    if tally.failures:
        problems.append(f"{len(tally.failures)} failed requests: {tally.failures[:5]}")
    if stream_errors:
        problems.append(f"{len(stream_errors)} stream errors: {stream_errors[:5]}")
    if inexact:
        problems.append(f"{inexact} streams do not match their user's log")
    if any(missing_by_phase.values()) or min(figures["upgrade_sends_by_phase"].values()) == 0:
        problems.append(f"sends: {figures['upgrade_sends_by_phase']} acknowledged, not read back {missing_by_phase}")
    if not applied:
        problems.append("the new binary applied no migration: the database was not the previous release's")
    if not figures["upgrade_group_message_read_back"]:
        problems.append("the group message sent after the upgrade is not in the group's history")
    for p in problems:
        log(f"FAILED: {p}")
    return 1 if problems else 0


def cpu_seconds(roots):
    """CPU seconds of each named process tree (own time plus reaped children), and the machine's busy and total."""
    hz = os.sysconf("SC_CLK_TCK")
    procs, children = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            text = open(f"/proc/{d}/stat").read()
        except OSError:
            continue
        f = text[text.rindex(")") + 2:].split()
        procs[int(d)] = (int(f[1]), int(f[11]) + int(f[12]) + int(f[13]) + int(f[14]))
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    result = {}
    for name, pids in roots.items():
        total, todo = 0, list(pids)
        while todo:
            pid = todo.pop()
            if pid in procs:
                total += procs[pid][1]
                todo += children.get(pid, [])
        result[name] = total / hz
    values = [int(v) for v in open("/proc/stat").readline().split()[1:9]]
    result["machine_busy"] = (sum(values) - values[3] - values[4]) / hz
    result["machine_total"] = sum(values) / hz
    return result


def pids_of(names):
    pids = []
    for name in names:
        try:
            pids.append(int(open(os.path.join(CLUSTER_DIR, f"{name}.pid")).read().strip()))
        except (OSError, ValueError):
            pass
    return pids


def wrk_sends(seconds):
    """wrk sending peer texts through nginx for `seconds` (bench/lua/send.lua over the users u1..u<CLIENTS>)."""
    return asyncio.create_subprocess_exec(
        "wrk", "-t2", f"-c{SENDERS}", f"-d{int(seconds)}s", "--latency", "-s", os.path.join(ROOT, "bench", "lua", "send.lua"),
        f"http://127.0.0.1:{LB_PORT}", stdout=asyncio.subprocess.PIPE,
        env=dict(os.environ, PARLEY_KEY=KEY, USERS=str(CLIENTS)))


async def measure(seconds, warmup):
    users = [f"u{i}" for i in range(1, CLIENTS + 1)]
    await call("PATCH", "/v1/settings", {"rate_limit_app_rps": 100000, "user_send_rate_per_s": 1000})
    for first in range(0, len(users), 100):
        await call("POST", "/v1/users/import", {"users": [{"user_id": u} for u in users[first:first + 100]]})
    streams = {u: Stream(u) for u in users}
    tasks = [asyncio.create_task(s.run()) for s in streams.values()]
    for s in streams.values():
        await asyncio.wait_for(s.opened.wait(), 30)
    if warmup > 0:
        # A fresh database has no statistics: the nodes' generic plans are made on empty tables and kept until an
        # ANALYZE invalidates them (autovacuum's first, about a minute in). Warm up, then analyze, then measure.
        await (await wrk_sends(warmup)).communicate()
        analyze = await asyncio.create_subprocess_exec(
            "psql", "-q", "-h", os.path.join(CLUSTER_DIR, "run"), "-U", "parley", "-d", "postgres", "-c", "ANALYZE")
        if await analyze.wait() != 0:
            raise RuntimeError("ANALYZE failed")
    await asyncio.sleep(2)
    frames_before = sum(len(s.received) for s in streams.values())
    nodes = [f"node{i}" for i in range(1, len(NODE_PORTS) + 1)]
    wrk = await wrk_sends(seconds)
    roots = {"nodes": pids_of(nodes), "postgres": pids_of(["postgres"]), "nginx": pids_of(["nginx"]),
             "wrk": [wrk.pid], "client": [os.getpid()]}
    cpu_before = cpu_seconds(roots)
    started = time.monotonic()
    probe, sent, failures, n = Connection(LB_PORT), {}, 0, 0
    while time.monotonic() - started < seconds:
        n += 1
        a, b = random.sample(users, 2)
        cid = f"k{RUN}-probe-{n}"
        body = {"from": a, "conversation_type": "peer", "to": b, "type": 1, "body": {"text": "probe"}, "client_msg_id": cid}
        posted = time.monotonic()
        try:
            status, _, _ = await probe.request("POST", "/v1/messages", body)
        except (OSError, ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
            status = 0
        if status == 201:
            sent[cid] = (b, posted)
        else:
            failures += 1
        await asyncio.sleep(max(0, started + n * 0.05 - time.monotonic()))
    cpu_after = cpu_seconds(roots)
    window = time.monotonic() - started
    output = (await wrk.communicate())[0].decode()
    await asyncio.sleep(3)  # late deliveries of the last probes
    frames = sum(len(s.received) for s in streams.values()) - frames_before
    for s in streams.values():
        s.stopping = True
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    probe.close()
    latencies = [(streams[b].arrivals[cid] - posted) * 1000 for cid, (b, posted) in sent.items() if cid in streams[b].arrivals]
    rate = re.search(r"Requests/sec:\s+([0-9.]+)", output)
    p50 = re.search(r"^\s+50%\s+(\S+)", output, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", output, re.M)
    non2xx = re.search(r"Non-2xx or 3xx responses: ([0-9]+)", output)
    cpu = {k: round(cpu_after[k] - cpu_before[k], 1) for k in cpu_after}
    figures = {
        "nodes": len(NODE_PORTS), "streams": len(streams), "seconds": round(window, 1),
        "sends_per_s": float(rate.group(1)) if rate else None, "send_p50": p50 and p50.group(1),
        "send_p99": p99 and p99.group(1), "send_errors": int(non2xx.group(1)) if non2xx else 0,
        "probes": n, "probes_failed": failures, "probes_delivered": len(latencies),
        "delivery_ms_p50": percentile(latencies, 50) and round(percentile(latencies, 50), 1),
        "delivery_ms_p99": percentile(latencies, 99) and round(percentile(latencies, 99), 1),
        "delivery_ms_max": latencies and round(max(latencies), 1),
        "frames_per_s": round(frames / window), "cpu_s": cpu,
        "reconnections": sum(s.connections - 1 for s in streams.values()),
    }
    print(json.dumps(figures))
    return 0 if rate and latencies and len(latencies) == len(sent) else 1


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[2] == "upgrade":
        sys.exit(asyncio.run(upgrade(sys.argv[3])))
    if len(sys.argv) > 2 and sys.argv[2] == "rolling":
        sys.exit(asyncio.run(rolling()))
    if len(sys.argv) > 2 and sys.argv[2] == "measure":
        sys.exit(asyncio.run(measure(float(sys.argv[3]), float(sys.argv[4]) if len(sys.argv) > 4 else 0)))
    sys.exit(asyncio.run(check()))
