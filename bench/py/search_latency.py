#!/usr/bin/env python3
"""Sequential GET /v1/messages/search requests on one keep-alive connection, for bench/search.sh.

usage: search_latency.py <base url> <app key> <requests> <query template>

The template is a query string; "{user}" in it becomes u2..u2000 (random) for each request. Prints
"p50_ms p99_ms max_ms mean_items" over the requests (after 10 unmeasured warm-up requests); any status but 200 stops
the run.
"""
import http.client, json, random, sys, time, urllib.parse

base, key, count, template = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
url = urllib.parse.urlparse(base)
conn = http.client.HTTPConnection(url.hostname, url.port)
headers = {"Authorization": f"Bearer {key}"}
random.seed(22)
times, items = [], 0
for i in range(count + 10):
    query = template.replace("{user}", f"u{random.randint(2, 2000)}")
    started = time.perf_counter()
    conn.request("GET", "/v1/messages/search?" + query, headers=headers)
    response = conn.getresponse()
    body = response.read()
    elapsed = (time.perf_counter() - started) * 1000
    if response.status != 200:
        sys.exit(f"search answered {response.status}: {body[:300]!r}")
    if i >= 10:
        times.append(elapsed)
        items += len(json.loads(body)["items"])
times.sort()
print(f"{times[len(times) // 2]:.1f} {times[min(len(times) - 1, int(len(times) * 0.99))]:.1f} {times[-1]:.1f} "
      f"{items / len(times):.1f}")
