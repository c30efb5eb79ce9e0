#!/usr/bin/env python3
"""Loopback push gateway of bench/push.sh: HTTP/1.1 on 127.0.0.1, Python standard library only (asyncio protocol,
no per-request task), keep-alive or one request per connection, pipelining-safe (answers in order).

  POST /_matrix/push/v1/notify  a `matrix` push request (API.md §16.2): records the arrival time (time.time()), the
                                pushkeys of `notification.devices`, the event_id and type, checks the body's shape
                                (the fields §16.2 lists for every request), answers 200 {"rejected":[]} (after
                                --delay-ms, if set)
  POST <any other path>         counted as `other_paths` and answered the same way (a `generic`-format request or a
                                wrong path shows up here rather than as a failed push)
  GET  /stats                   JSON {count, unique_pushkeys, duplicates, event_ids, first, last, connections (that
                                carried a notify request), close_requested,
                                devices_per_request, by_type, problems, bad_requests, other_paths, cpu_s, …};
                                ?since=<epoch s> adds p50_ms/p99_ms/max_ms/last_ms of arrival − since, per_s
                                (arrivals in each second after since) and within (requests that arrived within ?within_s=<s>, default 5, of since);
                                ?reset=1 answers the same and then clears every figure
  GET  /arrivals                JSON object event_id -> arrival (epoch s) of its first request since the last reset
                                (push.sh joins it with the messages' timestamps)
  GET  /sample                  the first body received of each notification type since the last reset (JSON object
                                type -> body), to check fields against the spec

On SIGTERM or SIGINT it prints the /stats JSON on stdout and exits.

  push_gateway.py [--port 0] --port-file FILE [--delay-ms N]
"""
import asyncio
import json
import time

import loopback_http

REJECTED_NONE = b'{"rejected":[]}'
NOTIFY_PATH = "/_matrix/push/v1/notify"


class Stats:
    def __init__(self):
        self.generation = 0
        self.reset()

    def reset(self):
        self.arrivals = []
        self.first_arrival = {}  # event_id -> its first request's arrival (GET /arrivals)
        self.pushkeys = set()
        self.pairs = set()  # (event_id, pushkey): a repeated pair is a duplicate push
        self.event_ids = set()
        self.count = 0
        self.device_total = 0
        self.devices_per_request = {}
        self.by_type = {}
        self.problems = {}
        self.samples = {}
        self.bad = 0
        self.other_paths = 0
        self.duplicates = 0
        self.close_requested = 0  # notify requests that asked for Connection: close (or were HTTP/1.0 without keep-alive)
        self.connections = 0  # connections that carried a notify request since the reset
        self.generation += 1

    def problem(self, what):
        self.problems[what] = self.problems.get(what, 0) + 1

    def snapshot(self, since=None, within_s=5.0):
        out = {
            "count": self.count,
            "unique_pushkeys": len(self.pushkeys),
            "devices": self.device_total,
            "duplicates": self.duplicates,
            "event_ids": len(self.event_ids),
            "first": min(self.arrivals) if self.arrivals else None,
            "last": max(self.arrivals) if self.arrivals else None,
            "connections": self.connections,
            "close_requested": self.close_requested,
            "devices_per_request": {str(k): v for k, v in sorted(self.devices_per_request.items())},
            "by_type": self.by_type,
            "problems": self.problems,
            "bad_requests": self.bad,
            "other_paths": self.other_paths,
            "cpu_s": round(time.process_time(), 3),
            "loop": type(asyncio.get_event_loop_policy()).__module__.split(".")[0],
        }
        if since is not None:
            lat = sorted((a - since) * 1000.0 for a in self.arrivals)

            def pct(p):
                return round(lat[min(len(lat) - 1, int(p * len(lat)))], 1) if lat else None

            out.update({
                "since": since,
                "p50_ms": pct(0.50),
                "p99_ms": pct(0.99),
                "max_ms": round(lat[-1], 1) if lat else None,
                "last_ms": round(lat[-1], 1) if lat else None,
                "within_s": within_s,
                "within": sum(1 for x in lat if x <= within_s * 1000.0),
                # Arrivals per whole second after `since` (the bridge's pace), up to the last arrival, at most 600.
                "per_s": per_second(lat),
            })
        return out


def per_second(lat_ms):
    if not lat_ms:
        return []
    buckets = [0] * min(600, int(max(0.0, lat_ms[-1]) // 1000) + 1)
    for x in lat_ms:
        i = int(max(0.0, x) // 1000)
        if i < len(buckets):
            buckets[i] += 1
    return buckets


STATS = Stats()


def check_notify(body):
    """Records one matrix request; returns nothing (problems are counted in STATS)."""
    now = time.time()
    try:
        doc = json.loads(body)
    except ValueError:
        STATS.bad += 1
        STATS.problem("body is not JSON")
        return
    n = doc.get("notification") if isinstance(doc, dict) else None
    if not isinstance(n, dict):
        STATS.bad += 1
        STATS.problem("no notification object")
        return
    STATS.count += 1
    STATS.arrivals.append(now)
    ntype = n.get("type")
    STATS.by_type[str(ntype)] = STATS.by_type.get(str(ntype), 0) + 1
    if str(ntype) not in STATS.samples:
        STATS.samples[str(ntype)] = doc
    event_id = n.get("event_id")
    STATS.event_ids.add(str(event_id))
    STATS.first_arrival.setdefault(str(event_id), now)
    for field, kind in (("event_id", str), ("room_id", str), ("type", str), ("sender", str), ("prio", str)):
        if not isinstance(n.get(field), kind):
            STATS.problem(f"notification.{field} missing or not a {kind.__name__}")
    if n.get("prio") not in (None, "high", "low"):
        STATS.problem("notification.prio not high/low")
    content = n.get("content")
    devices = n.get("devices")
    eid_only = isinstance(devices, list) and any(
        isinstance(d, dict) and isinstance(d.get("data"), dict) and d["data"].get("format") == "event_id_only"
        for d in devices)
    if ntype == "parley.message" and not eid_only:
        if not isinstance(content, dict):
            STATS.problem("notification.content missing (message, not event_id_only)")
        else:
            if content.get("kind") != "message":
                STATS.problem("content.kind != message")
            if not isinstance(content.get("seq"), int):
                STATS.problem("content.seq missing or not an int")
            if not isinstance(content.get("message_type"), int):
                STATS.problem("content.message_type missing or not an int")
    if not isinstance(devices, list) or not devices:
        STATS.problem("notification.devices missing or empty")
        devices = []
    STATS.devices_per_request[len(devices)] = STATS.devices_per_request.get(len(devices), 0) + 1
    for d in devices:
        if not isinstance(d, dict):
            STATS.problem("device not an object")
            continue
        key = d.get("pushkey")
        if not isinstance(key, str) or not key:
            STATS.problem("devices[].pushkey missing")
            continue
        STATS.device_total += 1
        STATS.pushkeys.add(key)
        pair = (str(event_id), key)
        if pair in STATS.pairs:
            STATS.duplicates += 1
        else:
            STATS.pairs.add(pair)
        if not isinstance(d.get("app_id"), str):
            STATS.problem("devices[].app_id missing")
        if not isinstance(d.get("pushkey_ts"), int):
            STATS.problem("devices[].pushkey_ts missing or not an int")
        data = d.get("data")
        if not isinstance(data, dict):
            STATS.problem("devices[].data missing")
        else:
            for field in ("device_id", "provider", "platform", "voip", "apptype"):
                if field not in data:
                    STATS.problem(f"devices[].data.{field} missing")


class Gateway(loopback_http.Connection):
    def __init__(self, delay_ms):
        super().__init__()
        self.delay = delay_ms / 1000.0
        self.generation = 0

    def bad_request(self):
        STATS.bad += 1

    def handle(self, method, path, params, headers, body, slot):
        if method == "GET" and path == "/stats":
            try:
                since = float(params["since"]) if "since" in params else None
                within = float(params.get("within_s", "5"))
            except ValueError:
                return self.answer(slot, 400, b'{"error":"since/within_s"}')
            out = json.dumps(STATS.snapshot(since, within)).encode()
            if params.get("reset") == "1":
                STATS.reset()
            return self.answer(slot, 200, out)
        if method == "GET" and path == "/arrivals":
            return self.answer(slot, 200, json.dumps(STATS.first_arrival).encode())
        if method == "GET" and path == "/sample":
            return self.answer(slot, 200, json.dumps(STATS.samples).encode())
        if method != "POST":
            return self.answer(slot, 404, b"")
        if path == NOTIFY_PATH:
            if not slot[1]:
                STATS.close_requested += 1
            if self.generation != STATS.generation:
                self.generation = STATS.generation
                STATS.connections += 1
            check_notify(body)
        else:
            STATS.other_paths += 1
        if self.delay > 0:
            self.loop.call_later(self.delay, self.answer, slot, 200, REJECTED_NONE)
        else:
            self.answer(slot, 200, REJECTED_NONE)


if __name__ == "__main__":
    loopback_http.serve(Gateway, STATS.snapshot)
