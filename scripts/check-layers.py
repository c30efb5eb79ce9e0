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

Two more rules, read from the same files:
  Routes translate   a file that registers routes (`api.add(`) parses, calls a service and renders: it names no
                     `…Store`, opens no transaction and holds no SQL (docs/adding-a-domain.md, "The shape of a domain").
  Tables have owners every table a statement writes (INSERT INTO, UPDATE, DELETE FROM in a string literal) belongs to
                     one folder (TABLE_OWNERS); a write from another folder fails unless it is listed in
                     SHARED_WRITES with the reason it is deliberate.

usage: scripts/check-layers.py [--graph]   (exit status 1 on an upward dependency, a route file with SQL or a Store,
                                             or a write to another folder's table that is not listed)
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Sources")
# Each module, lowest first: the layer it is, or None when each of its folders is a layer.
MODULES = {"ParleyCore": "Core", "ParleyAPI": None, "ParleyDomains": None, "ParleyLive": "Live", "Parley": None}
# The event log and the app records sit below the request pipeline (which appends events and resolves apps);
# their routes live above it (Live/EventRoutes.swift, Ops/AppRoutes.swift).
DOMAINS = ["Jobs", "Moderation", "Users", "Devices", "Presence", "Social", "Files", "Messages", "Groups", "Rooms", "Conversations", "Push", "Calls", "Webhooks", "Reports", "Privacy"]
ORDER = ["Core", "Events", "Outbound", "Apps", "API"] + DOMAINS + ["Live", "Ops", "App"]
DECL = re.compile(r'^(?:(?:public|internal|private|fileprivate|package|final|indirect|nonisolated|@\w+(?:\([^)]*\))?)\s+)*'
                  r'(?:struct|enum|class|protocol|typealias|actor)\s+([A-Z]\w*)', re.M)
TOPFUNC = re.compile(r'^(?:(?:public|internal|package)\s+)?func\s+([a-z]\w*)', re.M)
IDENT = re.compile(r'\b[A-Za-z_]\w*\b')


# The folder that owns each table: its Store holds the statements that write it.
TABLE_OWNERS = {
    "Events": ["events", "event_heads", "pending_events"],
    "Outbound": ["webhooks", "webhook_deliveries", "webhook_before_hooks", "webhook_cursors"],
    "Apps": ["apps", "app_keys"],
    "API": ["idempotency_keys"],
    "Jobs": ["jobs"],
    "Moderation": ["moderation_actions", "blocklists", "blocklist_versions"],
    "Users": ["users"],
    "Devices": ["devices", "push_rules"],
    "Presence": ["user_statuses", "status_subscriptions"],
    "Social": ["friends", "friend_applications", "blacklist"],
    "Files": ["files", "file_blobs", "file_chunks", "file_usage", "file_uploads"],
    "Messages": ["messages", "message_keys", "message_files", "conversation_seqs", "message_combines", "message_edits", "message_hidden",
                 "message_reactions", "message_reaction_types", "message_receipt_reads", "room_recent_messages",
                 "message_receipt_deliveries", "message_delivery_notices", "scheduled_messages",
                 "retention_policies", "legal_holds", "retention_runs"],
    "Groups": ["groups", "group_members", "group_member_history", "group_applications"],
    "Rooms": ["rooms", "room_members", "room_member_history", "room_attributes", "room_member_attributes"],
    "Conversations": ["conversations"],
    "Push": ["push_attempts", "push_cursors"],
    "Calls": ["calls", "call_users"],
    "Reports": ["reports", "automod_strikes"],
    "Live": ["live_nodes", "user_streams"],
    "Ops": ["stats_minutes", "stats_samples"],
}
OWNER = {table: folder for folder, tables in TABLE_OWNERS.items() for table in tables}
# Writes into another folder's table, each deliberate: (writer, table) -> why.
SHARED_WRITES = {
    ("Apps", "event_heads"): "a new app starts its event log's head in the transaction that creates it",
    ("Apps", "events"): "deleting an app clears its log, which has no foreign key to apps (write volume)",
    ("Apps", "pending_events"): "deleting an app clears its unsequenced events (no foreign key, as above)",
    ("Apps", "idempotency_keys"): "deleting an app clears its stored answers (no foreign key, as above)",
    ("Events", "group_members"): "numbering a batch stamps the event ids of the joins it holds in the same statement, "
                                 "so no reader sees an event before the membership interval it opens",
    ("Events", "group_member_history"): "the same stamping, for the intervals of past members",
    ("Events", "room_members"): "the same stamping, for rooms",
    ("Events", "room_member_history"): "the same stamping, for rooms' past members",
    ("Live", "events"): "retention trims the log it serves (docs/operations.md)",
    ("Live", "event_heads"): "retention moves the trim point with the trim",
    ("Live", "room_member_history"): "retention drops room membership intervals older than the trimmed log",
    ("Messages", "conversations"): "a send updates both sides' conversation entries in the statement that writes it",
    ("Groups", "conversations"): "joining, leaving and dismissing a group open and close its members' entries in the "
                                 "group's transaction",
    ("Conversations", "group_members"): "a member's group alias is a conversation setting, written with the entry",
    ("Push", "devices"): "a device whose key the gateway rejected is removed where the rejection is recorded",
}
WRITE = re.compile(r'\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+([a-z_][a-z0-9_]*)')
SQL = re.compile(r'\b(?:SELECT\s[\s\S]*\bFROM|INSERT\s+INTO|UPDATE\s+[a-z_]+\s+(?:[a-z]+\s+)?SET|DELETE\s+FROM)\b')


def literals(source):
    """The string literals of a source without comments (multi-line ones first)."""
    source = re.sub(r'//[^\n]*', '', source)
    multi = re.findall(r'"""[\s\S]*?"""', source)
    single = re.findall(r'"(?:\\.|[^"\\\n])*"', re.sub(r'"""[\s\S]*?"""', '""', source))
    return [re.sub(r'--[^\n]*', '', text) for text in multi + single]  # without SQL comments


def route_problems(path, raw, stripped):
    """A route file's Store names, transactions and SQL."""
    if "api.add(" not in stripped and "api.addAdmin(" not in stripped:
        return []
    found = set(re.findall(r'\b([A-Z]\w*Store)\b', stripped))
    problems = [f"names {name}" for name in sorted(found)]
    if re.search(r'\.transaction\b', stripped):
        problems.append("opens a transaction")
    if any(SQL.search(text) for text in literals(raw)):
        problems.append("holds SQL")
    return problems


def write_problems(folder, raw):
    """The tables a folder's file writes that belong to another folder and are not listed as shared."""
    problems = []
    for text in literals(raw):
        for table in WRITE.findall(text):
            owner = OWNER.get(table)
            if owner is None:
                problems.append(f"writes {table}, which has no owner in TABLE_OWNERS")
            elif owner != folder and (folder, table) not in SHARED_WRITES:
                problems.append(f"writes {table}, owned by {owner}")
    return sorted(set(problems))


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
    raws = {}
    for dirpath, _, names in (walk for module in MODULES for walk in os.walk(os.path.join(ROOT, module))):
        for name in names:
            if name.endswith(".swift"):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    raws[path] = f.read()
                    files[path] = strip(raws[path])
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

    failures = len(upward)
    routes = 0
    for path in sorted(files):
        problems = route_problems(path, raws[path], files[path])
        if "api.add(" in files[path]:
            routes += 1
        for problem in problems:
            print(f"check-layers: error: route file {os.path.relpath(path, ROOT)} {problem} (routes parse, call a service "
                  "and render)")
        failures += len(problems)
    writes = 0
    for path in sorted(files):
        for problem in write_problems(folder_of(path), raws[path]):
            print(f"check-layers: error: {os.path.relpath(path, ROOT)} {problem} (list it in SHARED_WRITES with the "
                  "reason, or move the statement to the owner's Store)")
            writes += 1
    failures += writes
    used = {(folder_of(p), t) for p in files for text in literals(raws[p]) for t in WRITE.findall(text)}
    for stale in sorted(set(SHARED_WRITES) - used):
        print(f"check-layers: error: SHARED_WRITES lists {stale[0]} writing {stale[1]}, which no statement does any more")
        failures += 1
    print(f"check-layers: {routes} route files without SQL or Stores; {len(OWNER)} tables with owners, "
          f"{len(SHARED_WRITES)} shared writes listed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
