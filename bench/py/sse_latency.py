#!/usr/bin/env python3
"""SSE commit-to-delivery latency of peer messages (bench/send.sh). Python 3 standard library only.

usage: sse_latency.py PORT KEY SENDS INTERVAL_MS MAX_SECONDS [USERS]

Opens one app-level stream (GET /v1/events?types=message.sent with the app key), then sends up to SENDS peer
texts (POST /v1/messages on one keep-alive connection, a random pair of u1..u<USERS> (50), each with a unique
client_msg_id), one at a time: one every INTERVAL_MS, or as soon as the previous one answered when that takes
longer; it stops sending after MAX_SECONDS. Each message's `message.sent` event is matched on the stream by its
client_msg_id. For each message it measures
  - post_to_event: from writing the POST to the stream receiving the event (the commit happened in between, so
    this is an upper bound of commit-to-delivery; under load it includes the POST's own wait for the server);
  - response_to_event: from the POST's response to the event (a lower bound; negative when the event came first);
  - post: the POST's round trip.
Waits up to 5 s after the last send for late events, then prints one JSON line: counts, and p50/p99/max in ms."""
import http.client
import json
import os
import random
import re
import sys
import threading
import time

PREFIX = f"sse-probe-{os.getpid()}-{int(time.time())}-"
CLIENT_MSG_ID = re.compile(rb'"client_msg_id":"(' + re.escape(PREFIX.encode()) + rb'[0-9]+)"')


class Stream(threading.Thread):
    """Reads the SSE stream and stamps the arrival (time.monotonic) of each probe message's event."""

    def __init__(self, port, key):
        super().__init__(daemon=True)
        self.port, self.key = port, key
        self.arrivals = {}  # client_msg_id -> monotonic time the chunk holding its complete event arrived
        self.events = 0     # message.sent events seen (the probe's and everybody else's)
        self.ready = threading.Event()
        self.error = None
        self.lock = threading.Lock()

    def run(self):
        try:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            connection.request("GET", "/v1/events?types=message.sent",
                               headers={"Authorization": f"Bearer {self.key}", "Accept": "text/event-stream"})
            response = connection.getresponse()
            if response.status != 200:
                raise RuntimeError(f"stream answered {response.status}: {response.read(300)!r}")
            connection.sock.settimeout(None)
            pending = b""
            while True:
                chunk = response.read1(65536)  # decodes the chunked transfer coding; returns what has arrived
                if not chunk:
                    raise RuntimeError("the stream ended")
                now = time.monotonic()
                pending += chunk
                if not self.ready.is_set() and b"retry:" in pending:
                    self.ready.set()
                # Complete events end with a blank line; keep the unfinished tail for the next read.
                cut = pending.rfind(b"\n\n")
                if cut < 0:
                    continue
                complete, pending = pending[:cut + 2], pending[cut + 2:]
                found = CLIENT_MSG_ID.findall(complete)
                with self.lock:
                    self.events += complete.count(b"event: message.sent")
                    for client_msg_id in found:
                        self.arrivals.setdefault(client_msg_id.decode(), now)
        except Exception as error:  # noqa: BLE001 - reported by the main thread
            self.error = repr(error)
            self.ready.set()


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] if values else None


def summary(values):
    if not values:
        return {"p50": None, "p99": None, "max": None}
    return {"p50": round(percentile(values, 50), 1), "p99": round(percentile(values, 99), 1), "max": round(max(values), 1)}


def main():
    port, key = int(sys.argv[1]), sys.argv[2]
    sends, interval, max_seconds = int(sys.argv[3]), float(sys.argv[4]) / 1000, float(sys.argv[5])
    users = int(sys.argv[6]) if len(sys.argv) > 6 else 50
    stream = Stream(port, key)
    stream.start()
    if not stream.ready.wait(30) or stream.error:
        sys.exit(f"sse_latency: the stream did not open: {stream.error}")

    sender = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    sent = {}  # client_msg_id -> (POST written, response received)
    failures = []
    started = time.monotonic()
    for n in range(sends):
        due = started + n * interval
        now = time.monotonic()
        if now - started >= max_seconds:
            break
        if due > now:
            time.sleep(due - now)
        a = random.randint(1, users)
        b = (a + random.randint(1, users - 1) - 1) % users + 1
        client_msg_id = f"{PREFIX}{n}"
        body = json.dumps({"from": f"u{a}", "conversation_type": "peer", "to": f"u{b}", "type": 1,
                           "body": {"text": "sse latency probe"}, "client_msg_id": client_msg_id})
        posted = time.monotonic()
        try:
            sender.request("POST", "/v1/messages", body=body, headers=headers)
            response = sender.getresponse()
            answer = response.read()
        except (OSError, http.client.HTTPException) as error:
            failures.append(repr(error))
            sender.close()
            sender = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            continue
        answered = time.monotonic()
        if response.status != 201:
            failures.append(f"{response.status} {answer[:200]!r}")
            continue
        sent[client_msg_id] = (posted, answered)
    sending_seconds = time.monotonic() - started

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not stream.error:
        with stream.lock:
            if all(c in stream.arrivals for c in sent):
                break
        time.sleep(0.01)

    with stream.lock:
        arrivals = dict(stream.arrivals)
        events = stream.events
    post_to_event, response_to_event, post = [], [], []
    for client_msg_id, (posted, answered) in sent.items():
        post.append((answered - posted) * 1000)
        if client_msg_id in arrivals:
            post_to_event.append((arrivals[client_msg_id] - posted) * 1000)
            response_to_event.append((arrivals[client_msg_id] - answered) * 1000)
    result = {
        "sent": len(sent), "delivered": len(post_to_event), "missing": len(sent) - len(post_to_event),
        "failed_sends": len(failures), "first_failures": failures[:3], "stream_error": stream.error,
        "sending_seconds": round(sending_seconds, 1), "stream_events": events,
    }
    for name, values in (("post_to_event", post_to_event), ("response_to_event", response_to_event), ("post", post)):
        for stat, value in summary(values).items():
            result[f"{name}_{stat}_ms"] = value
    print(json.dumps(result))
    sys.exit(0 if sent and not result["missing"] and not failures else 1)


main()
