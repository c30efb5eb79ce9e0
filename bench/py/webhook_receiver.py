#!/usr/bin/env python3
"""Webhook receiver of bench/webhooks.sh: HTTP/1.1 on 127.0.0.1, Python standard library only (asyncio protocol,
no per-request task), one request per connection or keep-alive, pipelining-safe (answers in order).

  POST <any path except /hook...>  a delivery (API.md §15.2): answers 204 after the delay; records per request the lag
                                   now_ms - body.created_at (the event's server time, ms) and the webhook-id
  POST /hook...                    a before-event hook call (§15.3): answers 200 {"action":"allow"} after the delay
  GET  /stats                      JSON {count, unique_ids, duplicates, p50_ms, p99_ms, max_ms, hooks, by_type,
                                   cpu_s}; GET /stats?reset=1 answers the same and then clears the figures
  GET  /ids                        the unique webhook-ids received so far, one per line (the count check)

The delay is --delay-ms, or the request's own `delay_ms` query parameter (e.g. /hook?delay_ms=50), so one receiver
serves every phase. On SIGTERM or SIGINT it prints the /stats JSON on stdout and exits.

  webhook_receiver.py --port 0 --port-file FILE [--delay-ms N]
"""
import argparse
import asyncio
import json
import os
import signal
import sys
import time

ALLOW = b'{"action":"allow"}'


class Stats:
    def __init__(self):
        self.reset()

    def reset(self):
        self.lags = []
        self.ids = set()
        self.count = 0
        self.hooks = 0
        self.bad = 0
        self.by_type = {}

    def snapshot(self):
        lags = sorted(self.lags)

        def pct(p):
            if not lags:
                return None
            return lags[min(len(lags) - 1, int(p * len(lags)))]

        return {
            "count": self.count,
            "unique_ids": len(self.ids),
            "duplicates": self.count - len(self.ids),
            "p50_ms": pct(0.50),
            "p99_ms": pct(0.99),
            "max_ms": lags[-1] if lags else None,
            "hooks": self.hooks,
            "bad_requests": self.bad,
            "by_type": self.by_type,
            "cpu_s": round(time.process_time(), 3),
            "loop": type(asyncio.get_event_loop_policy()).__module__.split(".")[0],
        }


STATS = Stats()


class Connection(asyncio.Protocol):
    def __init__(self, default_delay_ms):
        self.default_delay = default_delay_ms / 1000.0
        self.buf = b""
        self.transport = None
        self.loop = asyncio.get_running_loop()
        # Answers in request order: each slot is filled when its delay has passed.
        self.pending = []
        self.close_after = False

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.transport = None

    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            lines = head.split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) < 3:
                STATS.bad += 1
                self.transport.close()
                return
            method, target, version = parts[0], parts[1], parts[2]
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            length = int(headers.get("content-length", "0") or 0)
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4:end + 4 + length]
            self.buf = self.buf[end + 4 + length:]
            conn = headers.get("connection", "").lower()
            keep = (version == "HTTP/1.1" and conn != "close") or (version == "HTTP/1.0" and conn == "keep-alive")
            self.handle(method, target, headers, body, keep)
            if not keep:
                self.buf = b""
                return

    def handle(self, method, target, headers, body, keep):
        path, _, query = target.partition("?")
        params = dict(p.partition("=")[::2] for p in query.split("&") if p)
        slot = [None, keep]
        self.pending.append(slot)
        if method == "GET" and path == "/stats":
            out = json.dumps(STATS.snapshot()).encode()
            if params.get("reset") == "1":
                STATS.reset()
            return self.answer(slot, 200, out)
        if method == "GET" and path == "/ids":
            return self.answer(slot, 200, "".join(i + "\n" for i in sorted(STATS.ids)).encode())
        if method != "POST":
            return self.answer(slot, 404, b"")
        try:
            delay = float(params["delay_ms"]) / 1000.0 if "delay_ms" in params else self.default_delay
        except ValueError:
            delay = self.default_delay
        if path.startswith("/hook"):
            STATS.hooks += 1
            status, out = 200, ALLOW
        else:
            now_ms = time.time() * 1000.0
            try:
                created = json.loads(body)["created_at"]
                STATS.lags.append(now_ms - created)
            except (ValueError, KeyError, TypeError):
                STATS.bad += 1
            STATS.count += 1
            wid = headers.get("webhook-id", "")
            STATS.ids.add(wid)
            etype = headers.get("parley-event-type", "")
            STATS.by_type[etype] = STATS.by_type.get(etype, 0) + 1
            status, out = 204, b""
        if delay > 0:
            self.loop.call_later(delay, self.answer, slot, status, out)
        else:
            self.answer(slot, status, out)

    def answer(self, slot, status, body):
        reason = {200: "OK", 204: "No Content", 404: "Not Found"}.get(status, "OK")
        keep = slot[1]
        head = f"HTTP/1.1 {status} {reason}\r\n"
        if status != 204:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        head += "Connection: keep-alive\r\n\r\n" if keep else "Connection: close\r\n\r\n"
        slot[0] = head.encode() + (body if status != 204 else b"")
        # Flush the answers that are ready, in order.
        while self.pending and self.pending[0][0] is not None:
            data, keep = self.pending.pop(0)
            if self.transport is None:
                continue
            self.transport.write(data)
            if not keep:
                self.transport.close()
                self.transport = None


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--delay-ms", type=float, default=0.0)
    args = ap.parse_args()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(args.delay_ms), "127.0.0.1", args.port, backlog=1024, reuse_address=True)
    port = server.sockets[0].getsockname()[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{port}\n")
        os.replace(tmp, args.port_file)
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    await stop
    server.close()
    print(json.dumps(STATS.snapshot()), flush=True)


if __name__ == "__main__":
    try:
        import uvloop  # optional: only when the script's venv has it; stdlib asyncio otherwise
        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())
