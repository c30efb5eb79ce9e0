#!/usr/bin/env python3
"""Holds many idle SSE user streams against several Parley nodes, reading every frame (bench/sse-scale.sh).

usage: sse_scale_client.py --ports P1,P2,... --key KEY --users FIRST-LAST --per-user N --source 127.0.X
                           --ready FILE --state FILE [--resume FILE] [--open-concurrency 500] [--hold SECONDS]
                           [--path-query presence=true]

Stream k of user u<i> goes to node ports[(i * N + k) % len(ports)], from a loopback source address 127.0.X.Y
(Y from 1 to 250, round robin), so no pair of addresses runs out of ephemeral ports. Each stream reads everything
the server sends and remembers the `id:` of each event. With --resume, each stream reconnects with the
`Last-Event-ID` recorded in that state file (same order of streams).

A stream that cannot open (refused, or the connection closed before the answer) tries again after 1–3 s, at most 5
times, as an EventSource client would. When every stream has opened or given up, writes READY as JSON: {"opened",
"failed", "seconds", "failures", "retried", "retry_reasons"}.
Signals: SIGUSR1 writes the state and ends the process at once (`os._exit`): the kernel closes every socket together,
as a crash of the client side would. SIGUSR2 writes the state and goes on. SIGTERM writes it and ends.
The state is JSON lines, one per stream: {"user", "port", "resumed_from", "last", "ids", "ended"}; "ids" are the event
ids received since this process opened the stream.
"""
import argparse
import asyncio
import json
import os
import random
import signal
import time


ATTEMPTS = 5


class Stream:
    __slots__ = ("user", "port", "source", "resumed_from", "last", "ids", "ended", "writer")

    def __init__(self, user, port, source, resumed_from):
        self.user, self.port, self.source, self.resumed_from = user, port, source, resumed_from
        self.last = resumed_from
        self.ids = []
        self.ended = False
        self.writer = None


async def connect(stream, key, query):
    """Opens the stream; returns the reader, or the refusal as a string."""
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", stream.port, local_addr=(stream.source, 0), limit=1 << 20), 60)
    try:
        resume = f"Last-Event-ID: {stream.resumed_from}\r\n" if stream.resumed_from else ""
        writer.write(f"GET /v1/users/{stream.user}/events{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     f"Authorization: Bearer {key}\r\nAccept: text/event-stream\r\n{resume}\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        if not head.startswith(b"HTTP/1.1 200"):
            writer.close()
            return head.split(b"\r\n", 1)[0].decode()
        stream.writer = writer
        # The position the stream starts after: a stream that receives nothing before it drops resumes from there.
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"parley-last-event-id:") and stream.last is None:
                stream.last = int(line.split(b":", 1)[1].strip())
        while b"retry:" not in await asyncio.wait_for(reader.readline(), 60):
            pass
        return reader
    except BaseException:
        writer.close()
        raise


async def run(stream, key, query, gate, opened, failures, retries):
    # Like an EventSource client, a stream that could not open tries again after a pause (at most ATTEMPTS times).
    reader = None
    for attempt in range(ATTEMPTS):
        async with gate:
            try:
                outcome = await connect(stream, key, query)
            except Exception as error:  # noqa: BLE001 - counted and reported
                outcome = repr(error)[:200]
        if not isinstance(outcome, str):
            reader = outcome
            break
        if attempt + 1 == ATTEMPTS:
            failures.append(outcome)
            stream.ended = True
            return
        retries.append(outcome)
        await asyncio.sleep(1 + random.random() * 2)
    opened.append(1)
    # Outside the gate: read frames until the server ends the stream. Chunked encoding is not parsed; an event's id is
    # the `id:` line (chunk sizes are lines of hex digits alone, never starting with "id:").
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            if line.startswith(b"id:"):
                value = int(line[3:].strip())
                stream.ids.append(value)
                stream.last = value
    except Exception:  # noqa: BLE001 - a reset ends the stream like EOF
        pass
    stream.ended = True


def write_state(path, streams):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for s in streams:
            f.write(json.dumps({"user": s.user, "port": s.port, "resumed_from": s.resumed_from, "last": s.last,
                                "ids": s.ids, "ended": s.ended}) + "\n")
    os.replace(tmp, path)


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ports", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--users", required=True)
    p.add_argument("--per-user", type=int, default=10)
    p.add_argument("--source", required=True)
    p.add_argument("--ready", required=True)
    p.add_argument("--state", required=True)
    p.add_argument("--resume")
    p.add_argument("--open-concurrency", type=int, default=500)
    p.add_argument("--hold", type=float, default=3600)
    p.add_argument("--path-query", default="", help="query string of the stream path, e.g. presence=true")
    a = p.parse_args()
    ports = [int(x) for x in a.ports.split(",")]
    first, last = (int(x) for x in a.users.split("-"))
    resume = []
    if a.resume:
        with open(a.resume) as f:
            resume = [json.loads(line)["last"] for line in f]
    streams = []
    for i in range(first, last + 1):
        for k in range(a.per_user):
            n = len(streams)
            streams.append(Stream(f"u{i}", ports[(i * a.per_user + k) % len(ports)], f"{a.source}.{n % 250 + 1}",
                                  resume[n] if n < len(resume) else None))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def crash():
        write_state(a.state, streams)
        os._exit(0)

    loop.add_signal_handler(signal.SIGUSR1, crash)
    loop.add_signal_handler(signal.SIGUSR2, lambda: write_state(a.state, streams))
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    gate = asyncio.Semaphore(a.open_concurrency)
    opened, failures, retries = [], [], []
    started = time.monotonic()
    query = "?" + a.path_query if a.path_query else ""
    tasks = [asyncio.ensure_future(run(s, a.key, query, gate, opened, failures, retries)) for s in streams]
    while len(opened) + len(failures) < len(streams):
        await asyncio.sleep(0.05)
    with open(a.ready + ".tmp", "w") as f:
        json.dump({"opened": len(opened), "failed": len(failures), "seconds": round(time.monotonic() - started, 2),
                   "failures": failures[:5], "retried": len(retries), "retry_reasons": sorted(set(retries))[:5]}, f)
    os.replace(a.ready + ".tmp", a.ready)
    try:
        await asyncio.wait_for(stop.wait(), a.hold)
    except asyncio.TimeoutError:
        pass
    write_state(a.state, streams)
    for s in streams:
        if s.writer:
            s.writer.close()
    for t in tasks:
        t.cancel()


asyncio.run(main())
