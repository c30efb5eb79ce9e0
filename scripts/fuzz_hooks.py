"""schemathesis hooks for scripts/fuzz.sh: keep the fuzzer from disarming itself, and count what it reached.

Without them a run measured far less than its case count said: schemathesis lowered the app's own rate limit through
`PATCH /v1/settings` (55 % of one run then answered 429 before any handler), and drew the same `Idempotency-Key` value
for many different requests (8,042 answers of 422 `7000003` in another run, again before any handler). So:

- every schema-valid `Idempotency-Key` schemathesis draws is replaced by a fresh one (invalid ones are kept: they test
  the header's own validation); replays are tested by the Swift tests, not here;
- after each successful `PATCH /v1/settings` the app's settings are put back as they were when the run started
  (FUZZ_RESTORE_SETTINGS=1), so the run goes on against the same limits and hooks;
- every answer is counted by what it says about the request's path through the server, and the counts are written to
  FUZZ_COUNTS as JSON when schemathesis exits.
"""

import atexit
import json
import os
import re
import threading
import urllib.request
import uuid

import schemathesis

BASE = os.environ["FUZZ_BASE"]
KEY = os.environ["FUZZ_KEY"]
COUNTS_FILE = os.environ["FUZZ_COUNTS"]
VALID_KEY = re.compile(r"^[\x20-\x7E]{1,255}$")

_lock = threading.Lock()
_counts = {"requests": 0, "reached_handler": 0, "rate_limited_429": 0, "idempotency_key_reused_422": 0,
           "credentials_401_403": 0, "server_error_5xx": 0, "settings_restored": 0}


def _call(method, path, body=None):
    request = urllib.request.Request(BASE + path, method=method, data=None if body is None else json.dumps(body).encode())
    request.add_header("Authorization", "Bearer " + KEY)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=20) as response:
        return json.loads(response.read() or b"null")


ORIGINAL_SETTINGS = _call("GET", "/v1/settings") if os.environ.get("FUZZ_RESTORE_SETTINGS") == "1" else None


@schemathesis.hook
def before_call(context, case, **kwargs):
    headers = case.headers or {}
    for name in list(headers):
        if name.lower() == "idempotency-key" and isinstance(headers[name], str) and VALID_KEY.match(headers[name]):
            headers[name] = "fuzz-" + uuid.uuid4().hex


@schemathesis.hook
def after_call(context, case, response):
    status = response.status_code
    code = None
    if status == 422:
        try:
            code = json.loads(response.content).get("code")
        except (ValueError, AttributeError):
            pass
    with _lock:
        _counts["requests"] += 1
        if status == 429:
            _counts["rate_limited_429"] += 1
        elif status == 422 and code == 7000003:
            _counts["idempotency_key_reused_422"] += 1
        elif status in (401, 403):
            _counts["credentials_401_403"] += 1
        elif status >= 500:
            _counts["server_error_5xx"] += 1
        else:
            _counts["reached_handler"] += 1
    if ORIGINAL_SETTINGS is not None and case.operation.method.upper() == "PATCH" and case.operation.path == "/v1/settings" \
            and status == 200:
        _call("PATCH", "/v1/settings", ORIGINAL_SETTINGS)
        with _lock:
            _counts["settings_restored"] += 1


@atexit.register
def _write_counts():
    with open(COUNTS_FILE, "w") as out:
        json.dump(_counts, out)
