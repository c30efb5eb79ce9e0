#!/usr/bin/env python3
"""CPU seconds used so far by some threads of a process and by some other processes (bench/push.sh): the share of
one part of Parley (its push bridge thread, its sender threads) and of its PostgreSQL backend.

usage: thread_cpu.py <pid> <thread name>[,<thread name>…] … [--pids <pid>,<pid>…]

Prints one figure per thread-name group (the sum over the process's threads whose name, as /proc shows it, is one of
the group's names), then one for the --pids processes together (0 when none is given or they are gone).
"""
import os
import sys

hz = os.sysconf("SC_CLK_TCK")


def ticks(path):
    try:
        s = open(path).read()
    except OSError:
        return None, 0
    name = s[s.index("(") + 1:s.rindex(")")]
    f = s[s.rindex(")") + 2:].split()
    return name, int(f[11]) + int(f[12])


args = sys.argv[1:]
pids = []
if "--pids" in args:
    i = args.index("--pids")
    pids = [int(p) for p in args[i + 1].split(",") if p.strip()]
    args = args[:i] + args[i + 2:]
pid, groups = int(args[0]), [set(g.split(",")) for g in args[1:]]
sums = [0] * len(groups)
try:
    tasks = os.listdir(f"/proc/{pid}/task")
except OSError:
    tasks = []
for tid in tasks:
    name, t = ticks(f"/proc/{pid}/task/{tid}/stat")
    for i, g in enumerate(groups):
        if name in g:
            sums[i] += t
other = sum(ticks(f"/proc/{p}/stat")[1] for p in pids)
print(" ".join(f"{v / hz:.2f}" for v in sums + [other]))
