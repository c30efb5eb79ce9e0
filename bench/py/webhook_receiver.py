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
import asyncio
import json
import time

import loopback_http

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


class Receiver(loopback_http.Connection):
    def __init__(self, default_delay_ms):
        super().__init__()
        self.default_delay = default_delay_ms / 1000.0

    def bad_request(self):
        STATS.bad += 1

    def handle(self, method, path, params, headers, body, slot):
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


if __name__ == "__main__":
    loopback_http.serve(Receiver, STATS.snapshot, backlog=1024)
