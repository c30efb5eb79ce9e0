#!/usr/bin/env python3
"""Idle SSE streams to the machine's limit, and a reconnect storm (bench/sse-scale.sh).

usage: sse_scale.py CLUSTER_DIR steps STREAMS,STREAMS,...   one node: opens streams up to each total in turn
       sse_scale.py CLUSTER_DIR cluster STREAMS CLIENTS      every node of the cluster together, then the storm

CLUSTER_DIR is a running scripts/cluster.sh cluster (its cluster.env, node<N>.pid, postgres.pid, run/ socket).
Streams are user streams opened with the app key and `presence=true` (each counts for presence, like a user's
own), 10 per user, by bench/py/sse_scale_client.py processes (each under the 20,000 open files cap), connecting to
the nodes directly from loopback source addresses 127.0.<client>.<1-250>.

At each step, with the streams open and only heartbeats flowing: Parley's RSS per stream (all nodes together, minus
their RSS before the first stream), the kernel's TCP memory (/proc/net/sockstat), the CPU of the nodes, their
PostgreSQL and the clients over a window, the time to accept the step's streams, the writes a stream open cost
(user_streams rows, transactions), /readyz's answer time, and a normal client's latency (alternating a user read and a
send, paced) during the window. Prints one JSON object per step, then (cluster mode) one for the storm.

The storm: every client process ends at once (SIGUSR1: each writes the last event id of every stream and exits, the
kernel closing all of its sockets together); new processes reconnect every stream with its `Last-Event-ID` while
messages keep being sent to the streams' users; when the sends stop and the streams have settled, every stream's
events since its resume point are compared with the user's event log (GET /v1/users/{id}/events/log): none twice,
none missing. Also: time until every stream is open again, presence (every user online, one row per stream).
"""
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import http.client

HERE = os.path.dirname(os.path.abspath(__file__))
PER_USER = 10
WINDOW = float(os.environ.get("BENCH_SSE_WINDOW", "30"))  # seconds of idle measurement per step (two heartbeats)
HZ = os.sysconf("SC_CLK_TCK")


def env(cluster):
    values = {}
    for line in open(os.path.join(cluster, "cluster.env")):
        key, _, value = line.strip().partition("=")
        values[key] = value.strip('"')
    return values


def pid_of(cluster, name):
    return int(open(os.path.join(cluster, name + ".pid")).read().strip())


def proc_cpu(pid):
    """utime + stime of one process, and of its reaped children, in seconds."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    return (int(fields[11]) + int(fields[12])) / HZ, (int(fields[13]) + int(fields[14])) / HZ


def tree_cpu(root):
    """CPU seconds of a process and every live descendant, plus what they reaped."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        own, reaped = proc_cpu(pid)
        total += own + reaped
        todo += children.get(pid, [])
    return total


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def sockstat():
    """TCP sockets in use and the kernel's TCP memory (KiB)."""
    for line in open("/proc/net/sockstat"):
        if line.startswith("TCP:"):
            parts = line.split()
            values = dict(zip(parts[1::2], (int(v) for v in parts[2::2])))
            return values["inuse"], values["mem"] * 4
    return 0, 0


def slab_kib():
    """The kernel's slab memory (sockets, their inodes, dentries, epoll items live there)."""
    for line in open("/proc/meminfo"):
        if line.startswith("Slab:"):
            return int(line.split()[1])
    return 0


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Cluster:
    def __init__(self, directory):
        self.dir = directory
        e = env(directory)
        self.key = e["PARLEY_KEY"]
        self.ports = [int(p) for p in e["NODE_PORTS"].split()]
        self.nodes = [pid_of(directory, f"node{n + 1}") for n in range(len(self.ports))]
        self.postgres = pid_of(directory, "postgres")
        self.connections = {}

    def request(self, method, path, body=None, port=None, timeout=30):
        """One request on this thread's keep-alive connection to the port; a connection the server closed while it
        was idle (its idle timeout) is replaced once."""
        port = port or self.ports[0]
        reused = (threading.get_ident(), port) in self.connections
        try:
            return self.request_once(method, path, body, port, timeout)
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            if not reused:
                raise
            return self.request_once(method, path, body, port, timeout)

    def request_once(self, method, path, body, port, timeout):
        conn = self.connections.get((threading.get_ident(), port))
        if conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            self.connections[(threading.get_ident(), port)] = conn
        headers = {"Authorization": f"Bearer {self.key}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            del self.connections[(threading.get_ident(), port)]
            raise
        return response.status, payload

    def ok(self, method, path, body=None, port=None):
        status, payload = self.request(method, path, body, port)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {payload[:300]!r}")
        return json.loads(payload) if payload else None

    def sql(self, statement):
        out = subprocess.run(["psql", "-h", os.path.join(self.dir, "run"), "-U", "parley", "-d", "postgres", "-Atc", statement],
                             check=True, capture_output=True, text=True).stdout
        return out.strip()

    def write_counters(self):
        """user_streams rows inserted (PostgreSQL's statistics, flushed ≤ 1 s late), WAL bytes written and WAL flushes
        (durable commits, several grouped into one flush when they come together) so far."""
        row = self.sql("SELECT (SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'user_streams'),"
                       " pg_current_wal_lsn() - '0/0'::pg_lsn, (SELECT wal_sync FROM pg_stat_wal)")
        inserted, wal_bytes, syncs = row.split("|")
        return int(inserted), int(float(wal_bytes)), int(syncs)

    def nodes_cpu(self):
        return sum(sum(proc_cpu(pid)) for pid in self.nodes)

    def nodes_rss(self):
        return sum(rss_kib(pid) for pid in self.nodes)


def import_users(cluster, count):
    for first in range(1, count + 1, 100):
        users = [{"user_id": f"u{i}", "name": f"User {i}"} for i in range(first, min(first + 100, count + 1))]
        cluster.ok("POST", "/v1/users/import", {"users": users})


def client_limits():
    """In each client process before it runs: the 20,000 open files cap, and an end with this driver (SIGKILL when
    it dies, however it dies)."""
    import ctypes
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Clients:
    """The client processes of one phase."""
    everyone = []  # every instance, so that an error stops their processes (main)

    def __init__(self, cluster, work):
        self.cluster, self.work, self.procs = cluster, work, []
        Clients.everyone.append(self)

    def start(self, index, users, ports, resume=None, tag="open"):
        ready = os.path.join(self.work, f"ready-{tag}-{index}.json")
        state = os.path.join(self.work, f"state-{index}.jsonl")
        for path in (ready,):
            if os.path.exists(path):
                os.remove(path)
        argv = [sys.executable, os.path.join(HERE, "sse_scale_client.py"), "--ports", ",".join(map(str, ports)),
                "--key", self.cluster.key, "--users", users, "--per-user", str(PER_USER),
                "--source", f"127.0.{index + 1}", "--ready", ready, "--state", state, "--path-query", "presence=true"]
        if resume:
            argv += ["--resume", resume]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, preexec_fn=client_limits)
        self.procs.append((index, proc, ready, state))
        return proc

    def wait_ready(self, procs, timeout=900):
        deadline = time.monotonic() + timeout
        results = []
        for index, proc, ready, _ in procs:
            while not os.path.exists(ready):
                if proc.poll() is not None:
                    raise RuntimeError(f"client {index} exited ({proc.returncode}) before its streams opened")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"client {index}: streams not open after {timeout} s")
                time.sleep(0.05)
            results.append(json.load(open(ready)))
        return results

    def cpu(self):
        return sum(sum(proc_cpu(p.pid)) for _, p, _, _ in self.procs if p.poll() is None)

    def stop_all(self):
        for _, proc, _, _ in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for _, proc, _, _ in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def probe(cluster, seconds, rate=20, users=1000):
    """A normal client during the window: paced requests alternating GET /v1/users/{id} and a 1:1 send, round robin
    over the nodes; returns latencies in ms and the failures."""
    latencies, failures = [], []
    interval = 1.0 / rate
    started = time.monotonic()
    n = 0
    while time.monotonic() - started < seconds:
        port = cluster.ports[n % len(cluster.ports)]
        began = time.monotonic()
        try:
            if n % 2 == 0:
                status, _ = cluster.request("GET", f"/v1/users/u{1 + n % users}", port=port)
            else:
                status, _ = cluster.request("POST", "/v1/messages", {
                    "from": f"u{1 + n % users}", "to": f"u{1 + (n + 1) % users}", "conversation_type": "peer",
                    "type": 1, "body": {"text": f"probe {n}"}}, port=port)
            if status >= 300:
                failures.append(status)
        except OSError as error:
            failures.append(repr(error))
        latencies.append((time.monotonic() - began) * 1000)
        n += 1
        pause = started + n * interval - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    return latencies, failures


def readyz_ms(cluster):
    worst = 0.0
    for port in cluster.ports:
        began = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as r:
            r.read()
            assert r.status == 200, r.status
        worst = max(worst, (time.monotonic() - began) * 1000)
    return round(worst, 1)


def measure_idle(cluster, clients, streams, baseline, opened_info, users):
    """The figures of one step: the streams are open and idle."""
    time.sleep(5)  # the last presence rows and the first heartbeat pass settle
    inuse, tcp_kib = sockstat()
    ready_before = readyz_ms(cluster)
    cpu_nodes, cpu_pg, cpu_clients = cluster.nodes_cpu(), tree_cpu(cluster.postgres), clients.cpu()
    began = time.monotonic()
    latencies, failures = probe(cluster, WINDOW, users=users)
    elapsed = time.monotonic() - began
    d_nodes = cluster.nodes_cpu() - cpu_nodes
    d_pg = tree_cpu(cluster.postgres) - cpu_pg
    d_clients = clients.cpu() - cpu_clients
    probe_requests = len(latencies)
    rss = cluster.nodes_rss()
    baseline_rss, baseline_slab = baseline
    slab = slab_kib()
    return {
        "streams": streams,
        "nodes": len(cluster.ports),
        "open_seconds": opened_info["seconds"],
        "opened": opened_info["opened"],
        "failed": opened_info["failed"],
        "failures": opened_info["failures"],
        "retried": opened_info.get("retried", 0),
        "retry_reasons": opened_info.get("retry_reasons", []),
        "rss_mib": round(rss / 1024, 1),
        "rss_per_stream_kib": round((rss - baseline_rss) / max(streams, 1), 2),
        "fds": sum(fds(pid) for pid in cluster.nodes),
        "tcp_inuse": inuse,
        "tcp_mem_mib": round(tcp_kib / 1024, 1),
        "tcp_mem_per_socket_kib": round(tcp_kib / max(inuse, 1), 2),
        # Both ends of every stream are on this machine: the slab growth per stream covers two sockets.
        "slab_per_stream_kib": round((slab - baseline_slab) / max(streams, 1), 2),
        # CPU while idle, as a share of one core; the probe's own requests are in it (probe_requests over the window)
        "cpu_nodes_pct": round(100 * d_nodes / elapsed, 1),
        "cpu_pg_pct": round(100 * d_pg / elapsed, 1),
        "cpu_clients_pct": round(100 * d_clients / elapsed, 1),
        "probe_requests": probe_requests,
        "probe_failures": len(failures),
        "probe_p50_ms": round(percentile(latencies, 0.50), 1),
        "probe_p99_ms": round(percentile(latencies, 0.99), 1),
        "probe_max_ms": round(max(latencies), 1),
        "readyz_ms": max(ready_before, readyz_ms(cluster)),
        "rows_per_stream": opened_info.get("rows_per_stream"),
        "wal_bytes_per_stream": opened_info.get("wal_bytes_per_stream"),
        "wal_flushes_per_stream": opened_info.get("wal_flushes_per_stream"),
    }


def writes_per_stream(info, before, after, opened):
    if opened:
        info["rows_per_stream"] = round((after[0] - before[0]) / opened, 2)
        info["wal_bytes_per_stream"] = round((after[1] - before[1]) / opened)
        info["wal_flushes_per_stream"] = round((after[2] - before[2]) / opened, 3)


def open_phase(cluster, clients, index, users, ports, tag="open"):
    """Starts one client and waits for its streams; returns its ready info with the writes per stream."""
    before = cluster.write_counters()
    began = time.monotonic()
    proc_info = clients.start(index, users, ports, tag=tag)
    info = clients.wait_ready([clients.procs[-1]])[0]
    info["seconds"] = round(time.monotonic() - began, 2)
    time.sleep(1.5)
    writes_per_stream(info, before, cluster.write_counters(), info["opened"])
    del proc_info
    return info


def steps(cluster, work, totals):
    users_needed = (max(totals) + PER_USER - 1) // PER_USER
    import_users(cluster, users_needed + 1000)
    time.sleep(3)
    baseline = cluster.nodes_rss(), slab_kib()
    clients = Clients(cluster, work)
    results, opened_total, next_user = [], 0, 1
    try:
        for index, total in enumerate(totals):
            add = total - opened_total
            users = (add + PER_USER - 1) // PER_USER
            info = open_phase(cluster, clients, index, f"{next_user}-{next_user + users - 1}", cluster.ports)
            next_user += users
            opened_total += info["opened"]
            result = measure_idle(cluster, clients, opened_total, baseline, info, users_needed)
            result["step_streams"] = add
            print(json.dumps(result), flush=True)
            results.append(result)
    finally:
        clients.stop_all()
    return results


def sender(cluster, stop, sent, users, rate=50):
    """1:1 sends to random users of the streams at a steady rate until `stop` is set."""
    n = 0
    started = time.monotonic()
    while not stop.is_set():
        target = random.randint(2, users)
        port = cluster.ports[n % len(cluster.ports)]
        try:
            status, _ = cluster.request("POST", "/v1/messages", {
                "from": "u1", "to": f"u{target}", "conversation_type": "peer", "type": 1,
                "body": {"text": f"storm {n}"}}, port=port)
            sent.append(status)
        except OSError as error:
            sent.append(repr(error))
        n += 1
        pause = started + n / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)


def user_log(cluster, user, after):
    ids, cursor = [], str(after)
    while True:
        page = cluster.ok("GET", f"/v1/users/{user}/events/log?after={cursor}&limit=100")
        items = page.get("items") or []
        ids += [int(item["id"]) for item in items]
        if not items or not page.get("next_cursor"):
            return ids
        cursor = page["next_cursor"]


def check_exact(cluster, states):
    """Every stream's ids since its resume point against its user's log: (exact, inexact examples, log reads)."""
    by_user = {}
    for s in states:
        by_user.setdefault(s["user"], []).append(s)
    exact, inexact, reads = 0, [], 0
    for user, streams in by_user.items():
        low = min(int(s["resumed_from"]) for s in streams)
        log = user_log(cluster, user, low)
        reads += 1
        for s in streams:
            expected = [i for i in log if i > int(s["resumed_from"])]
            if s["ids"] == expected and not s["ended"]:
                exact += 1
            elif len(inexact) < 5:
                got = set(s["ids"])
                inexact.append({"user": user, "from": s["resumed_from"], "got": len(s["ids"]), "expected": len(expected),
                                "missing": sorted(set(expected) - got)[:5], "extra": sorted(got - set(expected))[:5],
                                "twice": len(s["ids"]) - len(got), "ended": s["ended"]})
    return exact, inexact, reads


def cluster_mode(cluster, work, total, client_count):
    users = (total + PER_USER - 1) // PER_USER
    import_users(cluster, users)
    time.sleep(3)
    baseline = cluster.nodes_rss(), slab_kib()
    clients = Clients(cluster, work)
    per_client = (users + client_count - 1) // client_count
    ranges = [(c * per_client + 1, min(users, (c + 1) * per_client)) for c in range(client_count)]
    before = cluster.write_counters()
    began = time.monotonic()
    for c, (first, last) in enumerate(ranges):
        clients.start(c, f"{first}-{last}", cluster.ports)
    infos = clients.wait_ready(list(clients.procs))
    opened = sum(i["opened"] for i in infos)
    info = {"seconds": round(time.monotonic() - began, 2), "opened": opened, "failed": sum(i["failed"] for i in infos),
            "failures": [f for i in infos for f in i["failures"]][:5], "retried": sum(i.get("retried", 0) for i in infos),
            "retry_reasons": sorted({r for i in infos for r in i.get("retry_reasons", [])})[:5]}
    time.sleep(1.5)
    writes_per_stream(info, before, cluster.write_counters(), opened)
    hold = measure_idle(cluster, clients, opened, baseline, info, users)
    print(json.dumps(hold), flush=True)

    # Events before the storm, so the streams resume from different points.
    for n in range(200):
        cluster.ok("POST", "/v1/messages", {"from": "u1", "to": f"u{random.randint(2, users)}", "conversation_type": "peer",
                                            "type": 1, "body": {"text": f"before {n}"}})
    time.sleep(3)
    replay_before = metric_sum(cluster, "parley_sse_replay_reads_total")
    stop, sent = threading.Event(), []
    thread = threading.Thread(target=sender, args=(cluster, stop, sent, users), daemon=True)
    thread.start()
    time.sleep(1)
    dropped_at = time.monotonic()
    for _, proc, _, _ in clients.procs:
        proc.send_signal(signal.SIGUSR1)
    for _, proc, _, _ in clients.procs:
        proc.wait(60)
    states = [s for _, _, _, s in clients.procs]
    drop_seconds = round(time.monotonic() - dropped_at, 2)
    old = clients.procs
    clients.procs = []
    reconnect_began = time.monotonic()
    for (c, (first, last)), (_, _, _, state) in zip(enumerate(ranges), old):
        resume = os.path.join(work, f"resume-{c}.jsonl")
        os.replace(state, resume)
        clients.start(c, f"{first}-{last}", cluster.ports, resume=resume, tag="storm")
    infos = clients.wait_ready(list(clients.procs))
    reconnect_seconds = round(time.monotonic() - reconnect_began, 2)
    reopened = sum(i["opened"] for i in infos)
    time.sleep(2)
    stop.set()
    thread.join()
    # Presence settles (its status events are part of the users' logs), then every stream catches up and is compared.
    settle_began = time.monotonic()
    rows = online = None
    while time.monotonic() - settle_began < 600:
        rows, online = (int(v) for v in cluster.sql(
            "SELECT (SELECT count(*) FROM user_streams), (SELECT count(*) FROM user_statuses WHERE online_status = 'online')").split("|"))
        if rows == reopened and online == users:
            break
        time.sleep(1)
    settled_seconds = round(time.monotonic() - reconnect_began, 1)
    time.sleep(5)
    ready_after = readyz_ms(cluster)
    # A stream not yet exact may still be catching up (a late event is not a lost one): compared again, up to three
    # times 20 s apart, until every stream is exact; the first and the last comparison are reported.
    checks = []
    for attempt in range(4):
        if attempt:
            time.sleep(20)
        for _, proc, _, _ in clients.procs:
            proc.send_signal(signal.SIGUSR2)
        time.sleep(3)
        states = []
        for _, _, _, state in clients.procs:
            states += [json.loads(line) for line in open(state)]
        checks.append((round(time.monotonic() - settle_began, 1),) + check_exact(cluster, [s for s in states if s["resumed_from"] is not None]))
        if checks[-1][1] == len(states):
            break
    first_exact = checks[0][1]
    check_after, exact, inexact, reads = checks[-1]
    replay_after = metric_sum(cluster, "parley_sse_replay_reads_total")
    storm = {
        "streams": opened, "drop_seconds": drop_seconds, "reconnect_seconds": reconnect_seconds, "reopened": reopened,
        "reopen_failed": sum(i["failed"] for i in infos), "reopen_failures": [f for i in infos for f in i["failures"]][:5],
        "reopen_retried": sum(i.get("retried", 0) for i in infos),
        "reopen_retry_reasons": sorted({r for i in infos for r in i.get("retry_reasons", [])})[:5],
        "sent_during": len(sent), "send_failures": sum(1 for s in sent if not (isinstance(s, int) and s < 300)),
        "checked_streams": sum(1 for s in states if s["resumed_from"] is not None),
        "exact": exact, "inexact": inexact, "log_reads": reads, "exact_at_first_check": first_exact,
        "checked_after_seconds": check_after,
        "replay_queries": (replay_after - replay_before) if replay_before is not None else None,
        "presence_rows": rows, "presence_online_users": online, "users": users,
        "presence_settled_seconds": settled_seconds, "readyz_ms": ready_after,
        "streams_with_events": sum(1 for s in states if s["ids"]),
    }
    print(json.dumps(storm), flush=True)
    clients.stop_all()


def metric_sum(cluster, name):
    total, found = 0, False
    for port in cluster.ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name) and not line.startswith("#"):
                    total += float(line.rsplit(" ", 1)[1])
                    found = True
    return int(total) if found else None


def main():
    # A stop (SIGTERM) unwinds like an error, so the `finally` below ends the client processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    directory, mode = sys.argv[1], sys.argv[2]
    cluster = Cluster(directory)
    cluster.ok("PATCH", "/v1/settings", {"rate_limit_app_rps": 100000, "user_send_rate_per_s": 1000})
    work = os.path.join(directory, "sse-scale")
    os.makedirs(work, exist_ok=True)
    try:
        if mode == "steps":
            steps(cluster, work, [int(x) for x in sys.argv[3].split(",")])
        elif mode == "cluster":
            cluster_mode(cluster, work, int(sys.argv[3]), int(sys.argv[4]))
        else:
            sys.exit(f"unknown mode {mode}")
    finally:
        for clients in Clients.everyone:
            for _, proc, _, _ in clients.procs:
                if proc.poll() is None:
                    proc.kill()


main()
