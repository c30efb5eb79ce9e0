#!/usr/bin/env python3
"""Where a server's CPU goes, by thread and by PostgreSQL backend (bench/cpu.sh). Python 3 standard library only.

usage: cpu_breakdown.py snapshot <parley pid> <psql socket dir>      > snapshot.json
       cpu_breakdown.py diff <before.json> <after.json> <operations>  (a Markdown table of ms per operation)

A snapshot holds the CPU seconds (user + system, from /proc) of every thread of Parley, grouped by thread name with
trailing digits dropped (`pg-worker-3` → `pg-worker`), and of every live descendant process (the embedded PostgreSQL),
each backend named by its `application_name` (read with psql from `pg_stat_activity`; the writer's two connections
`parley-writer-0/1` become `parley-writer`), the postmaster's other children by their process title (walwriter,
checkpointer, autovacuum), plus what the postmaster reaped (backends that ended during the window). The diff prints
each group's CPU per operation, largest first.
"""
import json
import os
import re
import subprocess
import sys

HZ = os.sysconf("SC_CLK_TCK")


def stat(path):
    try:
        with open(path) as f:
            s = f.read()
    except OSError:
        return None
    name = s[s.index("(") + 1:s.rindex(")")]
    fields = s[s.rindex(")") + 2:].split()
    return name, int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def group_name(name):
    return re.sub(r"[-_#]?\d+$", "", name)


def snapshot(pid, socket_dir):
    out = {"parley": {}, "postgres": {}}
    for tid in os.listdir(f"/proc/{pid}/task"):
        st = stat(f"/proc/{pid}/task/{tid}/stat")
        if st:
            key = "parley:" + group_name(st[0])
            out["parley"][key] = out["parley"].get(key, 0) + st[2] / HZ
    names = {}
    try:
        rows = subprocess.run(
            ["psql", "-h", socket_dir, "-p", "5432", "-U", "parley", "-d", "postgres", "-XqtA", "-F", "\t", "-c",
             "SELECT pid, application_name, backend_type FROM pg_stat_activity"],
            capture_output=True, text=True, timeout=10).stdout
        for line in rows.splitlines():
            parts = line.split("\t")
            if len(parts) == 3:
                names[int(parts[0])] = parts[1] or parts[2]
    except (OSError, subprocess.SubprocessError):
        pass
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = stat(f"/proc/{d}/stat")
            if st:
                procs[int(d)] = st
    children = {}
    for p, st in procs.items():
        children.setdefault(st[1], []).append(p)
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        title, _, own, reaped = procs[p]
        name = names.get(p)
        if name is None:
            try:
                with open(f"/proc/{p}/cmdline") as f:
                    title = f.read().replace("\0", " ").strip() or title
            except OSError:
                pass
            title = re.sub(r"^postgres: ", "", title)
            name = "postmaster and reaped backends" if title.startswith("/") else title.split(" ")[0] + " " + \
                (title.split(" ")[1] if " " in title else "")
        key = "postgres:" + group_name(name.strip())
        # A postmaster's reaped children are the backends that ended: counted with it.
        out["postgres"][key] = out["postgres"].get(key, 0) + (own + reaped) / HZ
        todo += children.get(p, [])
    return out


def diff(before, after, operations):
    rows = []
    totals = {}
    for side in ("parley", "postgres"):
        for key, value in after[side].items():
            delta = value - before[side].get(key, 0)
            totals[side] = totals.get(side, 0) + delta
            if delta > 0.0005:
                rows.append((side, delta, key.split(":", 1)[1]))
    print("| part | thread or backend | CPU s | ms per operation |")
    print("|---|---|---:|---:|")
    for side in ("parley", "postgres"):
        for s, delta, name in sorted((r for r in rows if r[0] == side), key=lambda r: -r[1]):
            print(f"| {side} | {name} | {delta:.2f} | {1000 * delta / operations:.4f} |")
        print(f"| **{side}** | **all** | **{totals.get(side, 0):.2f}** | **{1000 * totals.get(side, 0) / operations:.4f}** |")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "snapshot":
        json.dump(snapshot(int(sys.argv[2]), sys.argv[3]), sys.stdout)
    elif len(sys.argv) == 5 and sys.argv[1] == "diff":
        with open(sys.argv[2]) as a, open(sys.argv[3]) as b:
            diff(json.load(a), json.load(b), max(1, float(sys.argv[4])))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
