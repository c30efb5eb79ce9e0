#!/usr/bin/env python3
"""The chaos run of scripts/chaos.sh (read its header first): sends under kill -9 of the server and of its embedded
postmaster, then the checks. Standard library only; loopback only; every process it starts is stopped by its pid.

usage: scripts/chaos.py <parley binary> <temporary directory>
"""
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

BINARY, TMP = sys.argv[1], sys.argv[2]
DATA = os.path.join(TMP, "data")
SERVER_KILLS = int(os.environ.get("CHAOS_SERVER_KILLS", "20"))
PG_KILLS = int(os.environ.get("CHAOS_PG_KILLS", "5"))
SENDERS = int(os.environ.get("CHAOS_SENDERS", "8"))
MAX_MESSAGES = int(os.environ.get("CHAOS_MESSAGES", "200000"))
MAX_SECONDS = float(os.environ.get("CHAOS_MAX_SECONDS", "900"))
MAX_GAP = float(os.environ.get("CHAOS_MAX_GAP_S", "3"))
SEED = int(os.environ.get("CHAOS_SEED", str(random.randrange(1 << 31))))
USERS = 20
ADMIN_KEY = "chaos-admin-key-" + "%016x" % random.randrange(1 << 64)
STARTED = time.monotonic()


def log(text):
    print(f"[chaos] {text}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT = free_port()


def request(method, path, body=None, key=None, headers=None, timeout=10):
    """One request on a fresh connection: (status, headers, parsed JSON or None). Raises on connection errors."""
    connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
    try:
        all_headers = {"Content-Type": "application/json"} if body is not None else {}
        if key:
            all_headers["Authorization"] = f"Bearer {key}"
        all_headers.update(headers or {})
        connection.request(method, path, body=None if body is None else json.dumps(body), headers=all_headers)
        response = connection.getresponse()
        data = response.read()
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = None
        return response.status, dict(response.getheaders()), parsed
    finally:
        connection.close()


def ready():
    try:
        return request("GET", "/readyz", timeout=2)[0] == 200
    except OSError:
        return False


class Server:
    """The one `parley serve` process of the run; its pid is in TMP/server.pid for chaos.sh's clean-up."""

    def __init__(self):
        self.process = None
        self.starts = 0
        self.failed_starts = 0

    def start(self):
        """Starts it and waits (≤ 60 s) for /readyz 200; True when it is ready. A start that exits is retried."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self.starts += 1
            logfile = open(os.path.join(TMP, f"parley-{self.starts}.log"), "wb")
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PARLEY_ADMIN_KEY": ADMIN_KEY, "PARLEY_LOG_LEVEL": "warn"}
            self.process = subprocess.Popen(
                [BINARY, "serve", "--listen", f"127.0.0.1:{PORT}", "--data-dir", DATA],
                env=env, stdout=logfile, stderr=logfile, stdin=subprocess.DEVNULL)
            logfile.close()
            with open(os.path.join(TMP, "server.pid"), "w") as f:
                f.write(str(self.process.pid))
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    self.failed_starts += 1
                    log(f"the server exited during start-up (status {self.process.returncode}); see parley-{self.starts}.log")
                    break
                if ready():
                    return True
                time.sleep(0.02)
        return False

    def kill(self):
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def postmaster_pid():
    try:
        with open(os.path.join(DATA, "pg", "postmaster.pid")) as f:
            return int(f.readline().strip())
    except (OSError, ValueError):
        return None


class Ledger:
    """What the senders know: acknowledged sends by client_msg_id, retries, sends never acknowledged."""

    def __init__(self):
        self.lock = threading.Lock()
        self.acked = {}  # client_msg_id -> (pair, message_id, seq)
        self.retries = 0
        self.key_released = 0  # retries sent without the Idempotency-Key after a 409 7000004 (claim of a killed server)
        self.duplicate_answers = 0
        self.unexpected = []
        self.unacked = 0


def sender(index, key, ledger, stop, hard_stop):
    rng = random.Random(SEED * 1000 + index)
    n = 0
    while not stop.is_set():
        n += 1
        a = rng.randrange(1, USERS + 1)
        b = (a + rng.randrange(1, USERS) - 1) % USERS + 1
        client_msg_id = f"c{index}-{n}"
        body = {"from": f"u{a}", "conversation_type": "peer", "to": f"u{b}", "type": 1,
                "body": {"text": f"chaos {client_msg_id}"}, "client_msg_id": client_msg_id}
        headers = {"Idempotency-Key": client_msg_id}
        while True:
            if hard_stop.is_set():
                with ledger.lock:
                    ledger.unacked += 1
                return
            try:
                status, answer_headers, answer = request("POST", "/v1/messages", body, key=key, headers=headers)
            except OSError:
                status, answer_headers, answer = 0, {}, None
            if status in (200, 201) and answer and answer.get("message_id"):
                with ledger.lock:
                    ledger.acked[client_msg_id] = (tuple(sorted((a, b))), answer["message_id"], answer.get("seq"))
                    if status == 200:
                        ledger.duplicate_answers += 1
                break
            if status == 409 and answer and answer.get("code") == 7000004:
                # The first try's claim on the key belongs to a server that was killed mid-request: it is released
                # only after a minute. The client_msg_id alone still makes the retry safe.
                headers = {}
                with ledger.lock:
                    ledger.key_released += 1
            elif status not in (0, 429) and status < 500:
                with ledger.lock:
                    ledger.unexpected.append((status, answer))
                break
            with ledger.lock:
                ledger.retries += 1
            time.sleep(0.05)


def history(key, a, b):
    """Every message of the pair's conversation, in seq order."""
    items, after = [], 0
    while True:
        status, _, page = request(
            "GET", f"/v1/users/u{a}/conversations/peer/u{b}/messages?direction=forward&after_seq={after}&limit=100", key=key)
        if status != 200:
            raise RuntimeError(f"history u{a}/u{b}: {status} {page}")
        batch = page.get("items", [])
        items += batch
        if len(batch) < 100:
            return items
        after = batch[-1]["seq"]


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main():
    random.seed(SEED)
    log(f"seed {SEED}; {SERVER_KILLS} server kills, {PG_KILLS} postmaster kills, {SENDERS} senders; port {PORT}")
    os.makedirs(DATA, mode=0o755)
    server = Server()
    if not server.start():
        log("the server did not start")
        return 1
    try:
        status, _, created = request("POST", "/v1/apps", {"app_id": "chaos", "name": "chaos"}, key=ADMIN_KEY)
        assert status == 201, (status, created)
        key = created["key"]["secret"]
        assert request("PATCH", "/v1/settings", {"rate_limit_app_rps": 100000}, key=key)[0] == 200
        users = [{"user_id": f"u{i}", "name": f"User {i}"} for i in range(1, USERS + 1)]
        assert request("POST", "/v1/users/import", {"users": users}, key=key)[0] in (200, 201)

        ledger, stop, hard_stop = Ledger(), threading.Event(), threading.Event()
        threads = [threading.Thread(target=sender, args=(i, key, ledger, stop, hard_stop), daemon=True) for i in range(SENDERS)]
        for t in threads:
            t.start()
        kills = ["server"] * SERVER_KILLS + ["postmaster"] * PG_KILLS
        random.shuffle(kills)
        recovery = {"server": [], "postmaster": []}
        for number, kind in enumerate(kills, 1):
            time.sleep(random.uniform(0.5, MAX_GAP))
            if time.monotonic() - STARTED > MAX_SECONDS or len(ledger.acked) >= MAX_MESSAGES:
                log("time or message budget reached; no more kills")
                break
            if kind == "server":
                server.kill()
                killed = time.monotonic()
                if not server.start():
                    log("the server did not come back")
                    return 1
                recovery["server"].append(time.monotonic() - killed)
            else:
                pid = postmaster_pid()
                if pid is None:
                    log("no postmaster.pid; skipping this kill")
                    continue
                os.kill(pid, signal.SIGKILL)
                killed = time.monotonic()
                deadline = killed + 60
                while time.monotonic() < deadline:
                    current = postmaster_pid()
                    if current not in (None, pid) and ready():
                        break
                    time.sleep(0.02)
                else:
                    log("the postmaster was not restarted within 60 s")
                    return 1
                recovery["postmaster"].append(time.monotonic() - killed)
            log(f"kill {number}/{len(kills)} ({kind}): serving again after {recovery[kind][-1]:.2f} s; {len(ledger.acked)} acknowledged")
        # Let the senders finish what they are retrying, bounded.
        stop.set()
        for t in threads:
            t.join(timeout=60)
        hard_stop.set()
        for t in threads:
            t.join(timeout=15)

        log("reading every conversation's history")
        found, seen, gaps = {}, {}, []
        for a in range(1, USERS + 1):
            for b in range(a + 1, USERS + 1):
                items = history(key, a, b)
                seqs = [item["seq"] for item in items]
                if seqs != list(range(1, len(seqs) + 1)):
                    gaps.append((a, b, seqs[:5], len(seqs)))
                for item in items:
                    cid = item.get("client_msg_id")
                    seen[cid] = seen.get(cid, 0) + 1
                    found[cid] = item["message_id"]
        acked = ledger.acked
        lost = [cid for cid, (_, message_id, _) in acked.items() if found.get(cid) != message_id]
        duplicates = [cid for cid, count in seen.items() if count > 1]
        stored_without_ack = len([cid for cid in found if cid not in acked])
        server_times, pg_times = recovery["server"], recovery["postmaster"]
        figures = {
            "seed": SEED,
            "server_kills": len(server_times),
            "postmaster_kills": len(pg_times),
            "failed_restarts": server.failed_starts,
            "acknowledged": len(acked),
            "found": len(acked) - len(lost),
            "lost": len(lost),
            "duplicates": len(duplicates),
            "conversations_with_seq_gaps": len(gaps),
            "stored_but_never_acknowledged": stored_without_ack,
            "retries": ledger.retries,
            "duplicate_answers": ledger.duplicate_answers,
            "idempotency_key_dropped_after_409": ledger.key_released,
            "unexpected_answers": len(ledger.unexpected),
            "server_restart_s_p50": round(percentile(server_times, 50), 2),
            "server_restart_s_max": round(max(server_times, default=float("nan")), 2),
            "postmaster_recovery_s_p50": round(percentile(pg_times, 50), 2),
            "postmaster_recovery_s_max": round(max(pg_times, default=float("nan")), 2),
            "run_s": round(time.monotonic() - STARTED, 1),
        }
        print(json.dumps(figures, indent=2))
        if lost:
            log(f"lost, first ones: {lost[:5]}")
        if duplicates:
            log(f"duplicates, first ones: {duplicates[:5]}")
        if gaps:
            log(f"seq gaps, first ones: {gaps[:3]}")
        if ledger.unexpected:
            log(f"unexpected answers, first ones: {ledger.unexpected[:3]}")
        return 0 if not lost and not duplicates and not gaps and not ledger.unexpected and server.failed_starts == 0 else 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
