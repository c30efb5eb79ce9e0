#!/usr/bin/env python3
"""A job killed mid-way resumes to the same result (docs/jobs.md#guarantees), with a real SIGKILL of the server
process, not a simulated crash: run by scripts/jobs-kill-check.sh on a one-node cluster (scripts/cluster.sh).

1. Imports SPAM_PER_PEER messages from `spammer` into each of PEERS peer conversations, and as many from each peer
   back (the messages that must stay).
2. A dry run of `POST /v1/moderation/remove_messages` counts what matches.
3. The real removal starts; once its progress shows some committed steps and the job is still running, the node is
   killed with SIGKILL and started again.
4. The job must finish `succeeded` once, with the dry run's count matched and changed, after resuming from its last
   committed step (its progress never went back to 0), and the histories must say the same thing: every message of
   the spammer a tombstone, every other message untouched, one moderation log entry for the job.

usage: scripts/jobs_kill_check.py <cluster directory>
"""
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

PEERS = int(os.environ.get("JOBS_KILL_PEERS", "10"))
SPAM_PER_PEER = int(os.environ.get("JOBS_KILL_SPAM_PER_PEER", "3000"))
KEPT_PER_PEER = 200


def log(text):
    print(f"[jobs-kill-check] {text}", file=sys.stderr, flush=True)


def env(directory):
    values = {}
    with open(os.path.join(directory, "cluster.env")) as f:
        for line in f:
            line = line.strip()
            if line.startswith("export "):
                line = line[len("export "):]
            if "=" in line:
                name, value = line.split("=", 1)
                values[name] = value.strip("'\"")
    return values


class Client:
    def __init__(self, url, key):
        self.url, self.key = url.rstrip("/"), key

    def request(self, method, path, body=None, content_type="application/json", expect=(200, 201, 202, 204)):
        data = None
        headers = {"Authorization": f"Bearer {self.key}"}
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read().decode()
        if status not in expect:
            raise SystemExit(f"{method} {path} answered {status}: {text[:400]}")
        return json.loads(text) if text.strip().startswith(("{", "[")) else text

    def pages(self, path):
        cursor, items = "", []
        while True:
            sep = "&" if "?" in path else "?"
            page = self.request("GET", f"{path}{sep}limit=100&cursor={cursor}")
            items += page["items"]
            cursor = page.get("next_cursor") or ""
            if not cursor:
                return items


def cluster(directory, *args):
    subprocess.run(["bash", "scripts/cluster.sh", *args], check=True, env={**os.environ, "CLUSTER_DIR": directory},
                   stdout=subprocess.DEVNULL)


def wait_job(client, job_id, done, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        job = client.request("GET", f"/v1/jobs/{job_id}")
        if done(job):
            return job
        time.sleep(0.05)
    raise SystemExit(f"job {job_id} did not get there in {seconds} s: {job}")


def main():
    directory = sys.argv[1]
    values = env(directory)
    client = Client(values["CLUSTER_URL"], values["PARLEY_KEY"])
    peers = [f"peer{i}" for i in range(PEERS)]
    client.request("PATCH", "/v1/settings", {"rate_limit_app_rps": 100000})
    client.request("POST", "/v1/users/import", {"users": [{"user_id": u} for u in ["spammer"] + peers]})

    # History to remove and history to keep, imported in files of at most 10,000 lines.
    started = int(time.time() * 1000) - 86_400_000
    lines = []
    for p, peer in enumerate(peers):
        for i in range(SPAM_PER_PEER + KEPT_PER_PEER):
            sender, to = ("spammer", peer) if i < SPAM_PER_PEER else (peer, "spammer")
            lines.append(json.dumps({"conversation_type": "peer", "from": sender, "to": to, "type": 1,
                                     "body": {"text": f"{sender} {i}"}, "timestamp": started + p * 100_000 + i,
                                     "client_msg_id": f"{sender}-{peer}-{i}"}))
    for first in range(0, len(lines), 10_000):
        client.request("POST", "/v1/messages/import", "\n".join(lines[first:first + 10_000]).encode() + b"\n",
                       content_type="application/x-ndjson")
    log(f"imported {len(lines)} messages in {PEERS} conversations ({SPAM_PER_PEER} of the spammer's in each)")

    selection = {"user_id": "spammer", "from": 0, "to": int(time.time() * 1000) + 60_000, "mode": "delete"}
    dry = client.request("POST", "/v1/moderation/remove_messages", {**selection, "dry_run": True})
    dry = wait_job(client, dry["job_id"], lambda j: j["state"] in ("succeeded", "failed"), 120)
    matched = dry["result"]["matched"]
    if dry["state"] != "succeeded" or matched != PEERS * SPAM_PER_PEER:
        raise SystemExit(f"the dry run answered {dry}, expected {PEERS * SPAM_PER_PEER} matched")
    log(f"dry run: {matched} matched")

    job = client.request("POST", "/v1/moderation/remove_messages", {**selection, "dry_run": False})
    job_id = job["job_id"]
    total = matched
    before_kill = wait_job(client, job_id, lambda j: j["state"] != "queued" and j["progress"]["done"] >= 1000, 120)
    if before_kill["state"] != "running" or before_kill["progress"]["done"] >= total:
        raise SystemExit(f"the job was not caught mid-way: {before_kill}")
    cluster(directory, "kill", "1")
    done_at_kill = before_kill["progress"]["done"]
    log(f"node killed with SIGKILL while the job ran, {done_at_kill} of {total} done")
    cluster(directory, "start", "1")
    restarted = time.monotonic()
    after_restart = client.request("GET", f"/v1/jobs/{job_id}")
    if after_restart["progress"]["done"] < done_at_kill:
        raise SystemExit(f"progress went back after the kill: {done_at_kill} then {after_restart}")
    # The dead node's lease runs out (30 s without a step), then the restarted node claims the job again.
    finished = wait_job(client, job_id, lambda j: j["state"] in ("succeeded", "failed", "cancelled"), 180)
    log(f"job {finished['state']} {time.monotonic() - restarted:.1f} s after the restart: {finished['result']}")
    problems = []
    if finished["state"] != "succeeded":
        problems.append(f"the job ended {finished['state']}: {finished.get('problem')}")
    result = finished.get("result") or {}
    if result.get("matched") != matched or result.get("changed") != matched:
        problems.append(f"result {result} is not the dry run's {matched} matched and changed")

    # What the histories say, read as the app (tombstones included).
    tombstones = kept = spam_left = other_changed = 0
    for peer in peers:
        for item in client.pages(f"/v1/users/{peer}/conversations/peer/spammer/messages?include_hidden=true"):
            if item["from"] == "spammer":
                if item.get("deleted"):
                    tombstones += 1
                else:
                    spam_left += 1
            elif item.get("deleted") or not item.get("body"):
                other_changed += 1
            else:
                kept += 1
    if (tombstones, spam_left) != (matched, 0):
        problems.append(f"{tombstones} tombstones and {spam_left} of the spammer's messages left, expected {matched} and 0")
    if (kept, other_changed) != (PEERS * KEPT_PER_PEER, 0):
        problems.append(f"{kept} other messages kept and {other_changed} changed, expected {PEERS * KEPT_PER_PEER} and 0")
    entries = client.pages("/v1/moderation/log?action=remove_messages")  # a dry run writes none
    if len(entries) != 1:
        problems.append(f"{len(entries)} moderation log entries for the removal, expected 1: {entries[:3]}")
    log(f"histories: {tombstones} tombstones, {kept} other messages kept; {len(entries)} log entry")
    if problems:
        for problem in problems:
            log(f"FAILED: {problem}")
        raise SystemExit(1)
    log("passed: the killed job resumed from its last committed step to the dry run's result")


if __name__ == "__main__":
    main()
