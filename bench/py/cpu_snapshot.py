#!/usr/bin/env python3
"""CPU seconds used so far, for the benchmarks' CPU accounting (bench/lib.sh `cpu_snapshot`).

usage: cpu_snapshot.py <parley pid> <peer pid>

Prints "parley pg peer machine_busy machine_total": Parley's own CPU; its PostgreSQL, i.e. every live descendant of
Parley plus the children its postmaster has reaped; the peer process (a loopback receiver or gateway; 0 for none);
and the machine's busy and total CPU from /proc/stat (the rest of busy is wrk and other sessions).
"""
import os, sys
hz = os.sysconf("SC_CLK_TCK")
def stat(pid):
    try:
        s = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    f = s[s.rindex(")") + 2:].split()
    return int(f[1]), int(f[11]) + int(f[12]), int(f[13]) + int(f[14])  # ppid, own, reaped children
parley, peer = int(sys.argv[1]), int(sys.argv[2])
procs = {}
for d in os.listdir("/proc"):
    if d.isdigit():
        st = stat(d)
        if st: procs[int(d)] = st
children = {}
for pid, (ppid, _, _) in procs.items(): children.setdefault(ppid, []).append(pid)
pg, todo = 0, list(children.get(parley, []))
while todo:
    pid = todo.pop()
    _, own, reaped = procs[pid]
    pg += own + reaped
    todo += children.get(pid, [])
cpu = open("/proc/stat").readline().split()[1:]
vals = [int(v) for v in cpu[:8]]
total = sum(vals); idle = vals[3] + vals[4]
print(procs.get(parley, (0, 0, 0))[1] / hz, pg / hz, procs.get(peer, (0, 0, 0))[1] / hz, (total - idle) / hz, total / hz)
