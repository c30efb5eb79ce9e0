#!/usr/bin/env python3
"""Lists the dependencies between Parley's layers and fails on an upward one (docs/adding-a-domain.md, "Layers").

The layers are SwiftPM modules, lowest first: ParleyCore, ParleyAPI, ParleyDomains, ParleyLive, Parley. A module
can import only the ones below it, so the compiler already rejects an upward reference between modules. Inside a
module it cannot: this script checks the folders within ParleyAPI (Events < Outbound < Apps < API), ParleyDomains (the domains
in their order: a domain may use the domains listed before it, never one after it) and Parley (Ops < App).

A folder depends on another when its code names a type or a top-level function declared there. The script reads
every declaration (`struct`, `enum`, `class`, `protocol`, `typealias`, `actor`, top-level `func`), then every
identifier of every file, with comments and string literals removed.

Layers, lowest first; a folder may use its own layer and the ones below it:
  Core           (ParleyCore)     values, JSON, errors, crypto, the clock, metrics, configuration (no domain)
  Events         (ParleyAPI)      the event log and its sequencer
  Outbound       (ParleyAPI)      webhook models, the delivery outbox and its dispatcher, before-event hook calls
  Apps           (ParleyAPI)      apps, keys and settings (the tenant every request resolves)
  API            (ParleyAPI)      the request pipeline, contexts, shared readers, timers
  domains        (ParleyDomains)  Users, Devices, Presence, Social, Messages, Groups, Conversations (+ later ones)
  Live           (ParleyLive)     streams, the hub, event-log reads and retention
  Ops            (Parley)         statistics, metrics, OpenAPI, app administration routes
  App            (Parley)         wiring: builds the node, registers every route, lists the timers

Domains reach what they need from a domain above them through hooks the app layer wires (Users/UserHooks.swift).

usage: scripts/check-layers.py [--graph]   (exit status 1 on an upward dependency)
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Sources")
# Each module, lowest first: the layer it is, or None when each of its folders is a layer.
MODULES = {"ParleyCore": "Core", "ParleyAPI": None, "ParleyDomains": None, "ParleyLive": "Live", "Parley": None}
# The event log and the app records sit below the request pipeline (which appends events and resolves apps);
# their routes live above it (Live/EventRoutes.swift, Ops/AppRoutes.swift).
DOMAINS = ["Users", "Devices", "Presence", "Social", "Messages", "Groups", "Rooms", "Conversations", "Push", "Calls", "Webhooks"]
ORDER = ["Core", "Events", "Outbound", "Apps", "API"] + DOMAINS + ["Live", "Ops", "App"]
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
    """The layer of a source file: its module's, or for modules split into folders, its folder's."""
    parts = os.path.relpath(path, ROOT).split(os.sep)
    return MODULES[parts[0]] or (parts[1] if len(parts) > 2 else parts[0])


def main():
    files = {}
    for dirpath, _, names in (walk for module in MODULES for walk in os.walk(os.path.join(ROOT, module))):
        for name in names:
            if name.endswith(".swift"):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    files[path] = strip(f.read())
    owner = {}
    for path, text in files.items():
        for name in DECL.findall(text) + TOPFUNC.findall(text):
            owner.setdefault(name, folder_of(path))
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
    if "--graph" in sys.argv:
        for (s, d) in sorted(edges, key=lambda e: (rank[e[0]], rank[e[1]])):
            print(f"{s} -> {d}{'   (upward)' if (s, d) in upward else ''}")

    def describe(s, d):
        uses = sorted(edges[(s, d)])
        shown = ", ".join(f"{ident} in {path}" for path, ident in uses[:4])
        return f"{s} uses {d}: {shown}{' …' if len(uses) > 4 else ''}"

    for (s, d) in upward:
        print(f"check-layers: error: {describe(s, d)} (a layer may use only the ones before it: {' < '.join(ORDER)})")
    print(f"check-layers: {len(edges)} layer dependencies, {len(upward)} upward")
    return 1 if upward else 0


if __name__ == "__main__":
    sys.exit(main())
