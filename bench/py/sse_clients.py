#!/usr/bin/env python3
"""Holds N idle SSE user streams open against Parley (bench/sse.sh).

usage: sse_clients.py PORT KEY USERS STREAMS_PER_USER HOLD_SECONDS READY_FILE
Opens USERS x STREAMS_PER_USER streams (GET /v1/users/u<i>/events with the app key), waits until each has
received its `retry:` line, writes the count to READY_FILE, holds them HOLD_SECONDS (or until SIGTERM), closes."""
import asyncio
import signal
import sys


async def open_stream(port, key, user, opened, failures):
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /v1/users/{user}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
                     f"Accept: text/event-stream\r\n\r\n".encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        if not head.startswith(b"HTTP/1.1 200"):
            failures.append(head.split(b"\r\n", 1)[0].decode())
            writer.close()
            return None
        while b"retry:" not in await asyncio.wait_for(reader.readline(), 60):
            pass
        opened.append(1)
        return reader, writer
    except Exception as error:  # noqa: BLE001 - counted and reported
        failures.append(repr(error))
        return None


async def main():
    port, key, users, per_user, hold, ready_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
    opened, failures = [], []
    streams = []
    batch = 500  # connect in waves so the listen backlog never overflows
    targets = [f"u{u}" for u in range(1, users + 1) for _ in range(per_user)]
    for start in range(0, len(targets), batch):
        results = await asyncio.gather(*(open_stream(port, key, t, opened, failures) for t in targets[start:start + batch]))
        streams.extend(r for r in results if r)
    with open(ready_file, "w") as f:
        f.write(f"{len(opened)} {len(failures)} {failures[:3]}\n")
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await asyncio.wait_for(stop.wait(), hold)
    except asyncio.TimeoutError:
        pass
    for _, writer in streams:
        writer.close()


asyncio.run(main())
