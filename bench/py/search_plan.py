#!/usr/bin/env python3
"""The generic plan of a statement the server ran, for bench/search.sh.

usage: search_plan.py <pg.log> <marker>

Reads the embedded PostgreSQL's log (written with log_min_duration_statement = 0) and takes the last statement the
server executed whose text contains <marker>, with the parameters logged for it; prints a psql script that prepares
that exact text and runs EXPLAIN (ANALYZE, BUFFERS) on it under plan_cache_mode = force_generic_plan, the pool's
setting. The statement is the server's own, so this never explains a copy that has drifted from MessageSearch.
"""
import re, sys

text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
marker = sys.argv[2]
# An entry (the default log_line_prefix, "%m [%p] "): "<time> [pid] LOG:  duration: 1.234 ms  execute <name>: <statement,
# possibly over several lines>" then "<time> [pid] DETAIL:  parameters: $1 = '…', $2 = '…'" on one line.
entry = re.compile(
    r"LOG:  duration: [0-9.]+ ms  execute [^:\n]*: (.*?)\n\d{4}-\d\d-\d\d [^\n]*?DETAIL:  parameters: ([^\n]*)", re.S)
found = [m for m in entry.finditer(text) if marker in m.group(1)]
if not found:
    sys.exit(f"no statement containing {marker!r} in the log")
statement, parameters = found[-1].group(1), found[-1].group(2)
values = re.findall(r"\$\d+ = ('(?:[^']|'')*'|NULL)", parameters)
print("SET plan_cache_mode = force_generic_plan;")
print(f"PREPARE bench_search AS {statement};")
print(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE bench_search({', '.join(values)});")
print("DEALLOCATE bench_search;")
