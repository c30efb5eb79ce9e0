#!/usr/bin/env python3
"""The HTTP side of bench/calls.sh: calls created in a burst, and the test-clock advance that times them out.
Python standard library only (http.client, one keep-alive connection per thread), kept light so that it does not
take the CPU the server and its PostgreSQL need on the same cores.

usage:
  call_driver.py create  PORT CALLS INVITEES TIMEOUT_S THREADS [FIRST_USER]
      CALLS general calls, POST /v1/calls with the app key ($PARLEY_KEY): call i (0-based) from caller
      u<FIRST_USER + i·(1+INVITEES)> to the next INVITEES users, `timeout_s` TIMEOUT_S, over THREADS keep-alive
      connections (each takes the next call when its previous one answered). A call counts as created when the answer
      is 200 with the call `started` and every invitee's result ok. Prints one JSON line: counts, errors by status,
      seconds, calls/s, POST p50/p99, the wall times (epoch s) of the first request and the last answer, and the
      driver's own CPU seconds (getrusage).
  call_driver.py advance PORT MS
      POST /v1/test/clock/advance {"ms": MS} with the server admin key ($PARLEY_ADMIN_KEY): the server fires every
      timer due at the new time before it answers (API.md §17). Prints one JSON line: status, seconds (from writing the
      request to reading the whole answer), wall start/end (epoch s), the answer's body.
"""
import http.client
import json
import os
import resource
import sys
import threading
import time

TIMEOUT = 120.0


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, max(0, int(round(p / 100.0 * len(values) + 0.5)) - 1))]


def create(port, calls, invitees, timeout_s, threads, first_user):
    key = os.environ["PARLEY_KEY"]
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    lock = threading.Lock()
    state = {"next": 0}
    ok, errors, latencies, samples = [0], {}, [], []
    stride = 1 + invitees

    def body(i):
        caller = first_user + i * stride
        return json.dumps({
            "caller": f"u{caller}",
            "invitees": [f"u{caller + k}" for k in range(1, invitees + 1)],
            "timeout_s": timeout_s,
        })

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
        mine_ok, mine_lat, mine_err = 0, [], {}
        while True:
            with lock:
                i = state["next"]
                if i >= calls:
                    break
                state["next"] = i + 1
            payload = body(i)
            t = time.monotonic()
            try:
                conn.request("POST", "/v1/calls", payload, headers)
                resp = conn.getresponse()
                data = resp.read()
                status = resp.status
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
                status, data = type(e).__name__, b""
            mine_lat.append(time.monotonic() - t)
            good = False
            if status == 200:
                try:
                    doc = json.loads(data)
                    results = doc.get("results", [])
                    good = (doc["call"]["state"] == "started" and len(results) == invitees
                            and all("error" not in r and r.get("ok", True) is not False for r in results))
                except (ValueError, KeyError, TypeError):
                    good = False
                if not good and len(samples) < 3:
                    samples.append(data[:300].decode("utf-8", "replace"))
            elif len(samples) < 3:
                samples.append(f"{status}: {data[:300].decode('utf-8', 'replace')}")
            if good:
                mine_ok += 1
            else:
                k = str(status) if status != 200 else "200 but not created"
                mine_err[k] = mine_err.get(k, 0) + 1
        conn.close()
        with lock:
            ok[0] += mine_ok
            latencies.extend(mine_lat)
            for k, v in mine_err.items():
                errors[k] = errors.get(k, 0) + v

    wall_start = time.time()
    t0 = time.monotonic()
    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    seconds = time.monotonic() - t0
    wall_end = time.time()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({
        "calls": calls, "invitees": invitees, "timeout_s": timeout_s, "threads": threads, "created": ok[0],
        "errors": errors, "error_samples": samples, "seconds": round(seconds, 3),
        "calls_per_s": round(calls / seconds, 1) if seconds > 0 else None,
        "post_p50_ms": round(1000 * percentile(latencies, 50), 1) if latencies else None,
        "post_p99_ms": round(1000 * percentile(latencies, 99), 1) if latencies else None,
        "wall_start": wall_start, "wall_end": wall_end,
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
    }))
    return 0 if ok[0] == calls else 1


def advance(port, ms):
    key = os.environ["PARLEY_ADMIN_KEY"]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    conn.connect()  # the connection is set up before the clock starts
    payload = json.dumps({"ms": ms})
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    wall_start = time.time()
    t0 = time.monotonic()
    conn.request("POST", "/v1/test/clock/advance", payload, headers)
    resp = conn.getresponse()
    data = resp.read()
    seconds = time.monotonic() - t0
    wall_end = time.time()
    conn.close()
    try:
        answer = json.loads(data)
    except ValueError:
        answer = data[:300].decode("utf-8", "replace")
    print(json.dumps({"status": resp.status, "seconds": round(seconds, 4), "wall_start": wall_start, "wall_end": wall_end,
                      "answer": answer}))
    return 0 if resp.status == 200 else 1


def main(argv):
    if len(argv) >= 7 and argv[1] == "create":
        first = int(argv[7]) if len(argv) > 7 else 1
        return create(int(argv[2]), int(argv[3]), int(argv[4]), int(argv[5]), int(argv[6]), first)
    if len(argv) == 4 and argv[1] == "advance":
        return advance(int(argv[2]), int(argv[3]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
