#!/usr/bin/env python3
"""Lists the dependencies between the folders of Sources/Parley; fails when a domain folder uses a domain above it
(so no cycle between domains can form), and warns of any other upward dependency (docs/adding-a-domain.md,
"Layers").

A folder depends on another when its code names a type or a top-level function declared there. The Swift compiler
does not check this inside one module, so this script does: it reads every declaration (`struct`, `enum`, `class`,
`protocol`, `typealias`, `actor`, top-level `func`), then every identifier of every file, with comments and string
literals removed.

Layers, lowest first; a folder may use its own layer and the ones below it:
  Core                         values, JSON, errors, crypto, the clock, metrics (no domain)
  Events                       the event log and its sequencer
  Apps                         apps, keys and settings (the tenant every request resolves)
  API                          the request pipeline, contexts, shared readers, timers
  domains                      Users, Devices, Presence, Social, Messages, Groups, Conversations (+ later ones), in
                               that order: a domain may use the domains listed before it, never one after it
  Live                         streams, the hub, event-log reads and retention
  Ops                          statistics, metrics, OpenAPI, app administration routes
  App                          wiring: builds the node, registers every route, lists the timers

Domains reach what they need from a domain above them through hooks the app layer wires (Users/UserHooks.swift).
Any other upward dependency is listed as a warning (none today).

usage: scripts/check-layers.py [--graph]   (exit status 1 when a domain uses a domain above it)
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Sources", "Parley")
DOMAINS = ["Apps", "Users", "Devices", "Presence", "Social", "Messages", "Groups", "Conversations"]
# The event log and the app records sit below the request pipeline (which appends events and resolves apps);
# their routes live above it (Live/EventRoutes.swift, Ops/AppRoutes.swift).
ORDER = ["Core", "Events", "Apps", "API"] + DOMAINS[1:] + ["Live", "Ops", "App"]
# Module-level files at the root of Sources/Parley belong to Core.
DECL = re.compile(r'^(?:(?:public|internal|private|fileprivate|package|final|indirect|nonisolated|@\w+(?:\([^)]*\))?)\s+)*'
                  r'(?:struct|enum|class|protocol|typealias|actor)\s+([A-Z]\w*)', re.M)
TOPFUNC = re.compile(r'^(?:(?:public|internal|package)\s+)?func\s+([a-z]\w*)', re.M)
IDENT = re.compile(r'\b[A-Za-z_]\w*\b')


def strip(source):
    """The source without comments and string literals (so prose and SQL never count as references)."""
    source = re.sub(r'"""[\s\S]*?"""', '""', source)
    source = re.sub(r'//[^\n]*', '', source)
    source = re.sub(r'/\*[\s\S]*?\*/', '', source)
    source = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', source)
    return source


def folder_of(path):
    rel = os.path.relpath(path, ROOT)
    return rel.split(os.sep)[0] if os.sep in rel else "Core"


def main():
    files = {}
    for dirpath, _, names in os.walk(ROOT):
        for name in names:
            if name.endswith(".swift"):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    files[path] = strip(f.read())
    owner = {}
    for path, text in files.items():
        folder = folder_of(path)
        nested_depth_free = text
        for name in DECL.findall(nested_depth_free) + TOPFUNC.findall(text):
            owner.setdefault(name, folder)
    unknown = sorted({folder_of(p) for p in files} - set(ORDER))
    if unknown:
        print(f"check-layers: folders with no layer: {', '.join(unknown)} (add them to ORDER)")
        return 1
    edges = {}
    for path, text in files.items():
        src = folder_of(path)
        for ident in set(IDENT.findall(text)):
            dst = owner.get(ident)
            if dst and dst != src:
                edges.setdefault((src, dst), set()).add((os.path.relpath(path, ROOT), ident))
    rank = {name: i for i, name in enumerate(ORDER)}
    upward = sorted(((s, d) for (s, d) in edges if rank[d] > rank[s]), key=lambda e: (rank[e[0]], rank[e[1]]))
    errors = [(s, d) for (s, d) in upward if s in DOMAINS and d in DOMAINS]
    if "--graph" in sys.argv:
        for (s, d) in sorted(edges, key=lambda e: (rank[e[0]], rank[e[1]])):
            print(f"{s} -> {d}{'   (upward)' if (s, d) in upward else ''}")

    def describe(s, d):
        uses = sorted(edges[(s, d)])
        shown = ", ".join(f"{ident} in {path}" for path, ident in uses[:4])
        return f"{s} uses {d}: {shown}{' …' if len(uses) > 4 else ''}"

    for (s, d) in upward:
        if (s, d) not in errors:
            print(f"check-layers: warning: {describe(s, d)}")
    for (s, d) in errors:
        print(f"check-layers: error: {describe(s, d)} (a domain may use only the domains before it: {' < '.join(DOMAINS)})")
    print(f"check-layers: {len(edges)} folder dependencies; {len(errors)} between domains against their order; "
          f"{len(upward) - len(errors)} upward through infrastructure still to move")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
