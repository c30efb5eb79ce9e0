"""The HTTP/1.1 side of the benchmarks' loopback peers (bench/py/webhook_receiver.py, bench/py/push_gateway.py):
Python standard library only (asyncio protocol, no per-request task), keep-alive or one request per connection,
pipelining-safe (answers in request order), bodies by Content-Length or chunked.

A peer subclasses `Connection`, implements `handle(method, path, params, headers, body, slot)` and answers each
request with `self.answer(slot, status, body)` (at once or later, e.g. with `self.loop.call_later`); `serve` runs it
on 127.0.0.1 until SIGTERM or SIGINT and then prints the peer's final figures.
"""
import argparse
import asyncio
import json
import os
import signal

REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 404: "Not Found"}


class Connection(asyncio.Protocol):
    def __init__(self):
        self.buf = b""
        self.transport = None
        self.loop = asyncio.get_running_loop()
        # Answers in request order: each slot [bytes | None, keep-alive] is filled when it is ready.
        self.pending = []
        self.bad_requests = 0

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
            lines = self.buf[:end].decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) < 3:
                self.bad_request()
                self.transport.close()
                return
            method, target, version = parts[0], parts[1], parts[2]
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            if "chunked" in headers.get("transfer-encoding", "").lower():
                body, rest = self._dechunk(self.buf[end + 4:])
                if body is None:
                    return
                self.buf = rest
            else:
                length = int(headers.get("content-length", "0") or 0)
                if len(self.buf) < end + 4 + length:
                    return
                body = self.buf[end + 4:end + 4 + length]
                self.buf = self.buf[end + 4 + length:]
            conn = headers.get("connection", "").lower()
            keep = (version == "HTTP/1.1" and conn != "close") or (version == "HTTP/1.0" and conn == "keep-alive")
            path, _, query = target.partition("?")
            params = dict(p.partition("=")[::2] for p in query.split("&") if p)
            slot = [None, keep]
            self.pending.append(slot)
            self.handle(method, path, params, headers, body, slot)
            if not keep:
                self.buf = b""
                return

    def bad_request(self):
        """A request line that is not HTTP (the peer counts it)."""

    def handle(self, method, path, params, headers, body, slot):
        raise NotImplementedError

    @staticmethod
    def _dechunk(data):
        out, pos = b"", 0
        while True:
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                return None, data
            size = int(data[pos:eol].split(b";")[0] or b"0", 16)
            if size == 0:
                end = data.find(b"\r\n", eol + 2)
                if end < 0:
                    return None, data
                return out, data[end + 2:]
            if len(data) < eol + 2 + size + 2:
                return None, data
            out += data[eol + 2:eol + 2 + size]
            pos = eol + 2 + size + 2

    def answer(self, slot, status, body=b""):
        keep = slot[1]
        head = f"HTTP/1.1 {status} {REASONS.get(status, 'OK')}\r\n"
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


def serve(connection_factory, final_figures, backlog=4096):
    """Parses `--port`, `--port-file`, `--delay-ms`; serves `connection_factory(delay_ms)` on 127.0.0.1 (the port
    written to the port file once listening) until SIGTERM or SIGINT, then prints `final_figures()` as JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--delay-ms", type=float, default=0.0)
    args = ap.parse_args()

    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: connection_factory(args.delay_ms), "127.0.0.1", args.port,
                                          backlog=backlog, reuse_address=True)
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
        print(json.dumps(final_figures()), flush=True)

    try:
        import uvloop  # optional: only when the script's venv has it; stdlib asyncio otherwise
        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())
