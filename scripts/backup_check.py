#!/usr/bin/env python3
"""A backup taken under send load restores to a consistent snapshot (docs/backup.md; run by scripts/backup-check.sh).

1. Starts the release server on a fresh data directory (as root: under a 0700 directory, so the embedded cluster is
   relocated to /var/lib/parley/clusters, the case the README's old pg_dump recipe failed on), creates two apps with
   `parley apps create` while it runs, and populates each: users, groups, peer and group messages.
2. Sends messages from several threads while `parley backup` runs, and until a moment after it returned.
3. `parley restore` into a fresh data directory (the source's admin_key copied beside it), a server started there,
   and the two compared, app by app:
   - users and groups (written before the load): identical;
   - the event log (every event the API lists, all types): the source's and the restored ids each gap-free from 1,
     and the restored log identical, event for event (id, type, time, data), to the first events of the source's;
   - every message acknowledged (201) before the backup started is in the restored log, and the restore stopped
     before the end of the load (the source has more events: the backup really ran under load);
   - each group's stored messages: the restored history identical to the source's up to the restored last seq.
4. Checks the refusals: restore into a non-empty data directory, backup of an unreachable database (no file left),
   `parley data remove` of a cluster in use; and `parley data` (where the cluster lives), `data list`, and, after
   the source's data directory is deleted, `data remove` of its cluster.

usage: scripts/backup_check.py <parley binary> <work directory>
"""
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

BINARY, WORK = sys.argv[1], sys.argv[2]
USERS, GROUPS, SENDERS = 12, 3, 4
processes = []


def log(text):
    print(f"[backup-check] {text}", file=sys.stderr, flush=True)


def fail(text):
    log("FAILED: " + text)
    raise SystemExit(1)


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def parley(*args, data_dir, check=True):
    result = subprocess.run([BINARY, *args, "--data-dir", data_dir], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        fail(f"parley {' '.join(args)} exited {result.returncode}: {result.stderr.strip()[-1500:]}")
    return result


class Server:
    def __init__(self, data_dir, name):
        self.port, self.name = free_port(), name
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(WORK, f"{name}.log"), "w")
        self.process = subprocess.Popen([BINARY, "serve", "--data-dir", data_dir, "--listen", f"127.0.0.1:{self.port}"],
                                        stdout=self.log, stderr=subprocess.STDOUT)
        processes.append(self.process)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.process.poll() is not None:
                fail(f"the {name} server exited ({self.process.returncode}); see {self.log.name}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        fail(f"the {name} server was not ready within 60 s")

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)


def call(url, key, method, path, body=None, expect=(200, 201)):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {key}"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode()
    if expect and status not in expect:
        fail(f"{method} {path} answered {status}: {text[:300]}")
    return status, (json.loads(text) if text.strip() else None)


def pages(url, key, path):
    cursor, items = "", []
    for _ in range(100_000):
        sep = "&" if "?" in path else "?"
        _, page = call(url, key, "GET", f"{path}{sep}limit=100&cursor={cursor}")
        items += page["items"]
        cursor = page.get("next_cursor") or ""
        if not cursor:
            return items
    fail(f"{path}: too many pages")


def event_log(url, key):
    after, events = "earliest", []
    for _ in range(100_000):
        _, page = call(url, key, "GET", f"/v1/events/log?after={after}&limit=100")
        events += page["items"]
        if not page["items"]:
            return events
        after = page["next_cursor"]
    fail("event log: too many pages")


def settled_event_log(url, key):
    """The log once the sequencer numbered every pending event (two reads a moment apart agree)."""
    previous = None
    for _ in range(50):
        events = event_log(url, key)
        if previous is not None and len(events) == len(previous):
            return events
        previous = events
        time.sleep(0.3)
    fail("the event log kept growing after the load stopped")


def gap_free(events, what):
    ids = [int(e["id"]) for e in events]
    if ids != list(range(1, len(ids) + 1)):
        first_gap = next((i for i, v in enumerate(ids) if v != i + 1), None)
        fail(f"{what}: event ids are not 1…{len(ids)} without a gap (first difference at position {first_gap})")


def main():
    root = os.geteuid() == 0
    # The work directory (mktemp: 0700) opened, so that the restored data directory's cluster stays in it.
    os.chmod(WORK, 0o755)
    if root:
        # A 0700 parent: user postgres cannot enter it, so the source's cluster is relocated.
        closed = os.path.join(WORK, "home")
        os.makedirs(closed)
        os.chmod(closed, 0o700)
        source_dir = os.path.join(closed, "parley-data")
    else:
        source_dir = os.path.join(WORK, "source-data")
    restored_dir = os.path.join(WORK, "restored-data")
    archive = os.path.join(WORK, "parley.dump")

    source = Server(source_dir, "source")
    shown = parley("data", data_dir=source_dir).stdout
    log("parley data (source, running):\n" + shown.rstrip())
    if "running" not in shown or (root and "relocated" not in shown):
        fail("parley data does not say the source's cluster runs (relocated as root)")
    if not os.path.islink(os.path.join(source_dir, "pg")) and root:
        fail("the source's cluster was not relocated")

    keys = {}
    for app in ("alpha", "beta"):
        out = parley("apps", "create", app, data_dir=source_dir).stdout.strip().splitlines()
        keys[app] = out[-1].strip()
    log("apps created with `parley apps create` while the server runs: " + ", ".join(keys))

    users = [f"u{i}" for i in range(USERS)]
    for app, key in keys.items():
        for user in users:
            call(source.url, key, "POST", "/v1/users", {"user_id": user, "name": f"{app} {user}"})
        for g in range(GROUPS):
            members = users[g::2][:6]
            call(source.url, key, "POST", "/v1/groups",
                 {"group_id": f"g{g}", "name": f"group {g}", "operator": members[0], "members": members})
        for i in range(60):
            call(source.url, key, "POST", "/v1/messages",
                 {"from": users[i % USERS], "to": users[(i + 1) % USERS], "conversation_type": "peer", "type": 1,
                  "body": {"text": f"peer {i} ✓"}})

    # The load: senders alternate apps and conversations; each acknowledged send is recorded with its time.
    acknowledged, errors, stop = [], [], threading.Event()
    lock = threading.Lock()

    def sender(n):
        i = 0
        while not stop.is_set() and i < 100_000:
            app = ("alpha", "beta")[i % 2]
            group = f"g{(n + i) % GROUPS}"
            members = users[(n + i) % GROUPS::2][:6]
            body = ({"from": members[i % len(members)], "to": group, "conversation_type": "group", "type": 1,
                     "body": {"text": f"load {n}-{i}"}} if i % 3 else
                    {"from": users[n], "to": users[(n + 1 + i % (USERS - 1)) % USERS], "conversation_type": "peer", "type": 1,
                     "body": {"text": f"load {n}-{i}"}})
            status, message = call(source.url, keys[app], "POST", "/v1/messages", body, expect=None)
            if status == 201:
                with lock:
                    acknowledged.append((time.time(), app, message["message_id"]))
            elif status == 429:
                time.sleep(0.05)
            else:
                errors.append(f"load send answered {status}: {message}")
                return
            i += 1

    threads = [threading.Thread(target=sender, args=(n,), daemon=True) for n in range(SENDERS)]
    for t in threads:
        t.start()
    time.sleep(2)
    backup_started = time.time()
    result = parley("backup", archive, data_dir=source_dir)
    backup_seconds = time.time() - backup_started
    log(result.stdout.strip() + f" under load; {len(acknowledged)} load sends acknowledged so far")
    time.sleep(1.5)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    if errors:
        fail(errors[0])
    before = {(app, mid) for (t, app, mid) in acknowledged if t < backup_started}
    log(f"load stopped: {len(acknowledged)} sends acknowledged, {len(before)} before the backup started")

    # Refusals: a failing backup leaves no file; a non-empty target is refused; a cluster in use stays.
    bogus = os.path.join(WORK, "bogus.dump")
    result = subprocess.run([BINARY, "backup", bogus, "--database-url", "postgresql://nobody@127.0.0.1:1/none"],
                            capture_output=True, text=True, timeout=60)
    if result.returncode == 0 or os.path.exists(bogus) or any(n.startswith(".bogus") for n in os.listdir(WORK)):
        fail(f"a failing backup left a file or succeeded: {result.stderr.strip()}")
    result = parley("restore", archive, data_dir=source_dir, check=False)
    if result.returncode == 0 or "server runs" not in result.stderr:
        fail(f"restore into the running source was not refused: {result.stderr.strip()}")

    parley("restore", archive, data_dir=restored_dir)
    result = parley("restore", archive, data_dir=restored_dir, check=False)
    if result.returncode == 0 or "not empty" not in result.stderr:
        fail(f"a second restore into the same data directory was not refused: {result.stderr.strip()}")
    log("refusals: failing backup leaves no file; restore into a running or non-empty target refused")
    admin_key = open(os.path.join(source_dir, "admin_key")).read()
    with open(os.path.join(restored_dir, "admin_key"), "w") as f:
        f.write(admin_key)
    os.chmod(os.path.join(restored_dir, "admin_key"), 0o600)

    if os.path.islink(os.path.join(restored_dir, "pg")):
        fail("the restored data directory's cluster was relocated: it should live in the data directory")
    restored = Server(restored_dir, "restored")
    compared_events = compared_messages = 0
    for app, key in keys.items():
        s_users, r_users = pages(source.url, key, "/v1/users"), pages(restored.url, key, "/v1/users")
        if s_users != r_users:
            fail(f"{app}: users differ")
        s_groups, r_groups = pages(source.url, key, "/v1/groups"), pages(restored.url, key, "/v1/groups")
        if [g["group_id"] for g in s_groups] != [g["group_id"] for g in r_groups]:
            fail(f"{app}: groups differ")
        source_events = settled_event_log(source.url, key)
        restored_events = settled_event_log(restored.url, key)
        gap_free(source_events, f"{app} source")
        gap_free(restored_events, f"{app} restored")
        if len(restored_events) >= len(source_events):
            fail(f"{app}: the restore has all {len(source_events)} events: the backup did not run under load")
        for mine, theirs in zip(restored_events, source_events):
            if mine != theirs:
                fail(f"{app}: restored event {mine['id']} differs from the source's:\n{mine}\n{theirs}")
        restored_messages = {e["data"].get("message_id") or (e["data"].get("message") or {}).get("message_id")
                             for e in restored_events if e["type"] == "message.sent"}
        missing = [mid for (a, mid) in before if a == app and mid not in restored_messages]
        if missing:
            fail(f"{app}: {len(missing)} messages acknowledged before the backup started are not restored: {missing[:5]}")
        for group in s_groups:
            path = f"/v1/groups/{group['group_id']}/messages"
            s_history, r_history = pages(source.url, key, path), pages(restored.url, key, path)
            last = max((m["seq"] for m in r_history), default=0)
            s_prefix = [m for m in s_history if m["seq"] <= last]
            if sorted(r_history, key=lambda m: m["seq"]) != sorted(s_prefix, key=lambda m: m["seq"]):
                fail(f"{app}: group {group['group_id']}: the restored history is not the source's up to seq {last}")
            compared_messages += len(r_history)
        compared_events += len(restored_events)
        log(f"{app}: {len(restored_events)} of the source's {len(source_events)} events restored, identical and gap-free")
    log(f"compared {compared_events} events and {compared_messages} group messages; backup took {backup_seconds:.1f} s")
    restored.stop()

    # The relocated-cluster commands.
    listed = subprocess.run([BINARY, "data", "list"], capture_output=True, text=True, timeout=60).stdout
    if root:
        name = re.search(r"/clusters/([0-9a-f]{16})/pg", shown)
        if not name or name.group(1) not in listed:
            fail(f"parley data list does not list the source's cluster:\n{listed}")
        name = name.group(1)
        result = subprocess.run([BINARY, "data", "remove", name], capture_output=True, text=True, timeout=60)
        if result.returncode == 0 or "runs" not in result.stderr:
            fail(f"data remove of a running cluster was not refused: {result.stderr}")
        source.stop()
        result = subprocess.run([BINARY, "data", "remove", name], capture_output=True, text=True, timeout=60)
        if result.returncode == 0 or "links to it" not in result.stderr:
            fail(f"data remove of a cluster its data directory links to was not refused: {result.stderr}")
        subprocess.run(["rm", "-rf", source_dir], check=True)
        result = subprocess.run([BINARY, "data", "remove", source_dir], capture_output=True, text=True, timeout=60)
        if result.returncode != 0 or os.path.exists(f"/var/lib/parley/clusters/{name}"):
            fail(f"data remove of the cluster of a deleted data directory failed: {result.stderr}")
        log(f"parley data remove: refused while running and while linked; removed once the data directory was gone")
    else:
        source.stop()
    log("passed")


try:
    main()
finally:
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()
