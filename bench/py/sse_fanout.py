#!/usr/bin/env python3
"""Fan-out of group messages to open SSE user streams (bench/sse.sh).

usage: sse_fanout.py PORT KEY GROUP MEMBERS MESSAGES SUSTAINED_RATE SUSTAINED_SECONDS
Opens one `message.sent` user stream for each of u1..u<MEMBERS> (members of GROUP), then
1. sends MESSAGES group texts one after another (u1 -> GROUP, 100 ms apart) and, for each, measures the time from
   the send's HTTP response to the moment the LAST stream received it;
2. sends at SUSTAINED_RATE messages per second for SUSTAINED_SECONDS and counts the deliveries across all streams.
Prints one JSON line: latency p50/p99/max (ms), deliveries per second, streams opened and closed early."""
import asyncio
import json
import re
import sys
import time

MESSAGE_ID = re.compile(rb'"message":\{"message_id":"([^"]+)"')


class Stream:
    def __init__(self):
        self.arrivals = {}   # message_id -> time.monotonic() of arrival
        self.count = 0       # message.sent events received
        self.closed = False


async def hold(port, key, user, stream, ready):
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /v1/users/{user}/events?types=message.sent HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     f"Authorization: Bearer {key}\r\nAccept: text/event-stream\r\n\r\n".encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.split(b"\r\n", 1)[0].decode())
        ready.append(user)
        pending = b""
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            now = time.monotonic()
            pending += chunk
            # Complete events end with a blank line; keep the unfinished tail for the next read.
            cut = pending.rfind(b"\n\n")
            if cut < 0:
                continue
            complete, pending = pending[:cut + 2], pending[cut + 2:]
            for match in MESSAGE_ID.finditer(complete):
                stream.arrivals[match.group(1).decode()] = now
                stream.count += 1
    except Exception:  # noqa: BLE001 - a stream that ends early is counted
        pass
    stream.closed = True


async def send(port, key, group, text):
    """One POST /v1/messages on a fresh connection; returns (message_id, monotonic time of the response)."""
    body = json.dumps({"from": "u1", "conversation_type": "group", "to": group, "type": 1, "body": {"text": text}}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    await writer.drain()
    response = await reader.read()
    at = time.monotonic()
    writer.close()
    status = response.split(b" ", 2)[1]
    if status != b"201":
        raise RuntimeError(response[:300].decode(errors="replace"))
    return json.loads(response.split(b"\r\n\r\n", 1)[1])["message_id"], at


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] if values else None


async def main():
    port, key, group = sys.argv[1], sys.argv[2], sys.argv[3]
    members, messages, rate, seconds = int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7])
    streams = [Stream() for _ in range(members)]
    ready = []
    tasks = []
    for start in range(0, members, 250):  # connect in waves so the listen backlog never overflows
        tasks += [asyncio.create_task(hold(port, key, f"u{i + 1}", streams[i], ready)) for i in range(start, min(members, start + 250))]
        while len(ready) < min(members, start + 250) and not all(s.closed for s in streams[start:start + 250]):
            await asyncio.sleep(0.05)
    await asyncio.sleep(1)

    # 1. Latency, one message at a time.
    latencies = []
    for n in range(messages):
        message_id, answered = await send(port, key, group, f"fan-out {n}")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(message_id not in s.arrivals for s in streams if not s.closed):
            await asyncio.sleep(0.002)
        last = max((s.arrivals.get(message_id, float("inf")) for s in streams if not s.closed), default=float("inf"))
        latencies.append((last - answered) * 1000)
        await asyncio.sleep(0.1)

    # 2. Sustained sends: deliveries per second across all streams.
    before = sum(s.count for s in streams)
    started = time.monotonic()
    sent = 0
    while time.monotonic() - started < seconds:
        due = int((time.monotonic() - started) * rate) + 1
        while sent < due:
            await send(port, key, group, f"sustained {sent}")
            sent += 1
        await asyncio.sleep(0.001)
    await asyncio.sleep(2)  # let the last ones arrive
    elapsed = time.monotonic() - started
    delivered = sum(s.count for s in streams) - before
    print(json.dumps({
        "streams": len(ready), "closed_early": sum(1 for s in streams if s.closed),
        "p50_ms": round(percentile(latencies, 50), 1), "p99_ms": round(percentile(latencies, 99), 1),
        "max_ms": round(max(latencies), 1), "messages": messages,
        "sustained_sent": sent, "sustained_send_rate": round(sent / seconds, 1),
        "delivered": delivered, "expected": sent * members, "deliveries_per_s": round(delivered / elapsed),
    }))
    for task in tasks:
        task.cancel()


asyncio.run(main())
