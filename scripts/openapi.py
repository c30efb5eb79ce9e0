#!/usr/bin/env python3
"""Builds openapi/openapi.json from its two sources, or checks that the committed file is what a build writes.

usage: scripts/openapi.py build   writes openapi/openapi.json
       scripts/openapi.py check   exit status 1 when openapi/openapi.json is not what `build` would write, or when
                                  the sources disagree (CI runs this)

The two sources of an operation (docs/adding-a-domain.md, step 8):

1. Its route registration in Swift, in any target under Sources/ — one of
       api.add(.post, "/v1/users/{user_id}/devices", .appOrSelf, "registerDevice") { ctx in … }
       api.addAdmin(.get, "/v1/apps", "listApps") { ctx in … }
       builder.add(.get, "/healthz", options: RouteOptions(…, operationID: "healthz")) { … }
   which gives the method, the path template, the access level and the operationId.

2. Its contract entry in openapi/src/, keyed by operationId. Every *.json file there is a fragment with any of:
       "operations"      operationId → entry (below)
       "components"      schemas, responses, parameters, … merged into the document's components
       "webhooks"        merged into the document's webhooks (written out: the ping)
       "events"          event type → event entry (below): an after-event of the log, one webhook each
       "hooks"           before-event type → hook entry (below): a before-event hook call, one webhook each
       "pathParameters"  path parameter name → parameter (below), for the operations of this file
   base.json also holds the document's own top-level fields (openapi, info, servers, tags) and what several domains
   share; its pathParameters apply to every file, and a file's own mappings win over them (`application_id` is a
   friend application in friends.json, a group application in groups.json). Which file holds an entry or a component
   changes only the order of the document's components.

An entry is an OpenAPI operation without what the registration already says: tags, summary, description,
parameters (only the operation's own: query parameters and unusual ones), requestBody and responses. In an entry, a
string stands for a component: a parameter "Limit" is {"$ref": "#/components/parameters/Limit"}, a response
"404": "UserNotFound" is {"$ref": "#/components/responses/UserNotFound"}; a pathParameters value likewise names a
component parameter, or is the parameter object itself.

Generated from the registration (the rules the hand-written document followed):
  operationId, and the operation's place under paths (method, template)
  security    .app → appKey or adminKey; .appOrSelf/.appOrUser → appKey, adminKey or userToken;
              addAdmin → adminKey; a plain builder route (no request pipeline) → none
  parameters  the template's path parameters first, in template order (through pathParameters); then the entry's
              own; then ParleyAppId (app routes), IdempotencyKey (POST through the pipeline), XRequestId (always)
  headers     on every 2xx response the entry writes out: X-Request-Id (always), RateLimit-Limit/-Remaining/-Reset
              (app routes: the pipeline rate-limits them), Idempotent-Replayed (POST through the pipeline); then
              the response's own headers
An entry overrides a rule explicitly: "security" replaces the generated list (getMetrics).

An event entry (docs/events.md) holds "summary" (what happened, one sentence), "audience" (whose user streams get
it), "key" (its webhook ordering key, docs/webhooks.md#ordering), and either "data" (the schema of the Event's
`data`, app view; a string names a component schema) with an optional "example" of it, or "event" (a component
schema of the whole Event, with its own example). A hook entry (docs/webhooks.md#before-event-hooks) holds
"summary", "data" and "patchable" (the members a `modify` answer may patch; empty when a modify changes nothing).
Generated: the webhook, its headers (components/parameters Webhook*), its body (the Event, or the HookCall envelope,
with `type` fixed and `data` as given) and its answer.

The set of types is checked against the code: every string literal of Sources/ (Swift) or Migrations/ (SQL) that
has the form <domain>.<action> of a documented domain or of one a `NewEvent(type: "<domain>.…"` writes must be a
documented event or hook, or one of NOT_EVENTS; and
every documented type must occur as such a literal (a writer or a hook caller). The tests check the rest: every event
a test run writes validates against its webhook's body (EventSchemaTests), and the catalogue endpoints subscribe to
(`WebhookEventTypes`) is the documented set.

Output: paths sorted by template (related paths stay together with no order to maintain by hand), the methods of a
path in OpenAPI's order, everything else in the order of the sources (base.json first, then the other files by
name); 2-space indent, UTF-8 unescaped, trailing newline.
"""
import json
import re
import sys
from collections import namedtuple
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "Sources"
SRC = ROOT / "openapi" / "src"
OUT = ROOT / "openapi" / "openapi.json"
BASE = "base.json"

# ---------------------------------------------------------------------------------------------------------------
# The routes, read from the Swift registrations

METHOD = r"\.(get|put|post|delete|options|head|patch|trace)\s*,\s*"
LITERAL = r'"([^"\\\n]*)"'
# Each form up to its operationId; whatever follows (maxBodyBytes:, queryToken:, the handler) does not matter.
APP_ROUTE = re.compile(r"\.add(?:Upload)?\(\s*" + METHOD + LITERAL + r"\s*,\s*\.(app|appOrSelf|appOrUser)\s*,\s*" + LITERAL)
ADMIN_ROUTE = re.compile(r"\.addAdmin\(\s*" + METHOD + LITERAL + r"\s*,\s*" + LITERAL)
# RouteOptions(…) may hold one level of nested parentheses (`maxBodyBytes: Int(…)`).
PLAIN_ROUTE = re.compile(
    r"\.add\(\s*" + METHOD + LITERAL + r"\s*,\s*options:\s*RouteOptions\(((?:[^()]|\([^()]*\))*)\)")
OPERATION_ID = re.compile(r"\boperationID:\s*" + LITERAL)
# String literals are matched so that a `//` inside one is not taken for a comment.
SWIFT_TOKEN = re.compile(r'"""[\s\S]*?"""|"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*[\s\S]*?\*/')

APP_ACCESS = ("app", "appOrSelf", "appOrUser")


class Route(namedtuple("Route", "method template access operation_id where")):
    """One registration: access is app, appOrSelf, appOrUser, admin, or none (a plain builder route, outside the
    request pipeline); where is file:line."""

    def __str__(self):
        return f"{self.method.upper()} {self.template} ({self.where})"


def without_comments(source):
    """The source with its comments blanked (newlines kept, so offsets still give the right line numbers)."""
    def blank(match):
        text = match.group(0)
        return text if text.startswith('"') else re.sub(r"[^\n]", " ", text)
    return SWIFT_TOKEN.sub(blank, source)


def registrations(source):
    """(offset, method, template, access, operationId or None) of each registration in a comment-free source."""
    for m in APP_ROUTE.finditer(source):
        yield m.start(), m[1], m[2], m[3], m[4]
    for m in ADMIN_ROUTE.finditer(source):
        yield m.start(), m[1], m[2], "admin", m[3]
    for m in PLAIN_ROUTE.finditer(source):
        operation_id = OPERATION_ID.search(m[3])
        yield m.start(), m[1], m[2], "none", operation_id and operation_id[1]


def scan_routes(errors):
    """Every registration in Sources/<target>/**/*.swift, in file and line order."""
    found = []
    for path in sorted(SOURCES.glob("*/**/*.swift")):
        source = without_comments(path.read_text(encoding="utf-8"))
        for offset, method, template, access, operation_id in sorted(registrations(source)):
            where = f"{path.relative_to(ROOT)}:{source.count(chr(10), 0, offset) + 1}"
            if operation_id is None:
                errors.append(f"{where}: {method.upper()} {template} is registered without an operationID")
            else:
                found.append(Route(method, template, access, operation_id, where))
    seen_ids, seen_routes = {}, {}
    for route in found:
        first = seen_ids.setdefault(route.operation_id, route)
        if first is not route:
            errors.append(f"operationId {route.operation_id} is registered twice: {first}, {route}")
        # The router treats {a} and {b} in the same place as the same route.
        shape = (route.method, re.sub(r"\{[^}]*\}", "{}", route.template))
        first = seen_routes.setdefault(shape, route)
        if first is not route:
            errors.append(f"{first} and {route} register the same route")
    return found


# ---------------------------------------------------------------------------------------------------------------
# The contract sources

FRAGMENT_KEYS = ("operations", "components", "webhooks", "events", "hooks", "pathParameters")
BASE_ONLY_KEYS = ("openapi", "info", "jsonSchemaDialect", "servers", "security", "tags", "externalDocs")
# What an entry may hold: the OpenAPI operation fields the registration does not give, and the overrides.
ENTRY_KEYS = ("tags", "summary", "description", "externalDocs", "parameters", "requestBody", "responses", "callbacks",
              "deprecated", "security", "servers")


def load_json(path):
    """A JSON file, refusing duplicate keys (json.load would silently keep the last one: an entry would vanish)."""
    def no_duplicates(pairs):
        keys = [key for key, _ in pairs]
        for key in keys:
            if keys.count(key) > 1:
                raise ValueError(f"key {key!r} appears twice in one object")
        return dict(pairs)
    with open(path, encoding="utf-8") as f:
        return json.load(f, object_pairs_hook=no_duplicates)


def load_fragments(errors):
    """(file, fragment) for base.json first, then every other file by name; file is the path from the repository."""
    paths = sorted(SRC.glob("*.json"), key=lambda p: (p.name != BASE, p.name))
    if not paths or paths[0].name != BASE:
        errors.append(f"{SRC.relative_to(ROOT)}/{BASE} is missing")
    fragments = []
    for path in paths:
        try:
            fragment = load_json(path)
        except ValueError as e:  # json.JSONDecodeError is a ValueError
            errors.append(f"{path.relative_to(ROOT)}: {e}")
            continue
        allowed = FRAGMENT_KEYS + (BASE_ONLY_KEYS if path.name == BASE else ())
        for key in fragment:
            if key not in allowed:
                errors.append(f"{path.relative_to(ROOT)}: unknown top-level key {key!r} (known: {', '.join(allowed)})")
        fragments.append((str(path.relative_to(ROOT)), fragment))
    return fragments


# ---------------------------------------------------------------------------------------------------------------
# The rules

SECURITY = {
    "none": [],
    "admin": [{"adminKey": []}],
    "app": [{"appKey": []}, {"adminKey": []}],
    "appOrSelf": [{"appKey": []}, {"adminKey": []}, {"userToken": []}],
    "appOrUser": [{"appKey": []}, {"adminKey": []}, {"userToken": []}],
}


def idempotent(route):
    """The pipeline replays an Idempotency-Key on every POST it runs (docs/errors.md#retrying-safely)."""
    return route.method == "post" and route.access != "none"


def standard_parameters(route):
    """The component parameters after the entry's own."""
    app = ["ParleyAppId"] if route.access in APP_ACCESS else []
    return app + (["IdempotencyKey"] if idempotent(route) else []) + ["XRequestId"]


def standard_headers(route):
    """The component headers every 2xx response carries before its own."""
    rate_limit = ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"] if route.access in APP_ACCESS else []
    return ["X-Request-Id"] + rate_limit + (["Idempotent-Replayed"] if idempotent(route) else [])


def component(kind, value):
    """A string in an entry names a component; anything else is written out as it is."""
    return {"$ref": f"#/components/{kind}/{value}"} if isinstance(value, str) else value


def with_headers(response, names):
    """The response with the standard headers first in its `headers` (description, headers, then the rest)."""
    headers = {name: component("headers", name) for name in names}
    headers.update(response.get("headers", {}))
    out = {key: response[key] for key in ("description",) if key in response}
    if headers:
        out["headers"] = headers
    out.update({key: value for key, value in response.items() if key not in out and key != "headers"})
    return out


# The key order of a generated operation (the hand-written document's); any other key follows in the entry's order.
OPERATION_ORDER = ("operationId", "tags", "summary", "description", "security", "parameters", "requestBody",
                   "responses")


def operation(route, entry, path_parameters, file, errors):
    """The OpenAPI operation of one route: its entry plus everything the registration implies."""
    for key in entry:
        if key not in ENTRY_KEYS:
            errors.append(f"{file}: {route.operation_id}: unknown key {key!r} (the registration gives operationId, "
                          "method and path)")
    names = re.findall(r"\{([^}]*)\}", route.template)
    for name in names:
        if name not in path_parameters:
            errors.append(f"{route}: no pathParameters mapping for {{{name}}} "
                          f"(add one to {file} or {SRC.relative_to(ROOT)}/{BASE})")
    generated = {
        "operationId": route.operation_id,
        "security": entry.get("security", SECURITY[route.access]),
        "parameters": [component("parameters", path_parameters.get(name, {})) for name in names]
        + [component("parameters", p) for p in entry.get("parameters", [])]
        + [component("parameters", p) for p in standard_parameters(route)],
        "responses": {},
    }
    headers = standard_headers(route)
    for status, response in entry.get("responses", {}).items():
        response = component("responses", response)
        written_out = status.startswith("2") and "$ref" not in response
        generated["responses"][status] = with_headers(response, headers) if written_out else response
    fields = {**entry, **generated}
    ordered = [key for key in OPERATION_ORDER if key in fields] + [key for key in fields if key not in OPERATION_ORDER]
    return {key: fields[key] for key in ordered}


# ---------------------------------------------------------------------------------------------------------------
# The events and hooks

EVENT_KEYS = ("summary", "audience", "key", "data", "example", "event")
HOOK_KEYS = ("summary", "data", "patchable")
DELIVERED = ("Delivered at least once to every enabled webhook endpoint whose `event_types` match, on the SSE streams "
             "and in the event log (see docs/events.md, docs/webhooks.md).")


def header(name, schema):
    return {"name": name, "in": "header", "required": True, "schema": schema}


def event_webhook(event_type, entry, file, errors):
    """The webhook of one after-event: its delivery's headers and body, the Event with this type's data."""
    for key in entry:
        if key not in EVENT_KEYS:
            errors.append(f"{file}: event {event_type}: unknown key {key!r} (known: {', '.join(EVENT_KEYS)})")
    for key in ("summary", "audience", "key"):
        if key not in entry:
            errors.append(f"{file}: event {event_type}: {key!r} is missing")
    if ("data" in entry) == ("event" in entry):
        errors.append(f"{file}: event {event_type}: give one of 'data' (the payload) or 'event' (the whole Event)")
    if "event" in entry:
        schema = component("schemas", entry["event"])
    else:
        schema = {"allOf": [{"$ref": "#/components/schemas/Event"}, {
            "type": "object",
            "properties": {"type": {"const": event_type}, "data": component("schemas", entry.get("data", {}))},
        }]}
    media = {"schema": schema}
    if "example" in entry:
        media["example"] = {"id": "1042", "type": event_type, "app_id": "demo", "created_at": 1730000000000,
                            "data": entry["example"]}
    return {"post": {
        "summary": f"`{event_type}`: {entry.get('summary', '')}",
        "description": f"{entry.get('summary', '')} Audience: {entry.get('audience', '')}. "
                       f"Ordering key: {entry.get('key', '')}. {DELIVERED}",
        "tags": ["Events"],
        "parameters": [{"$ref": "#/components/parameters/WebhookEventId"},
                       {"$ref": "#/components/parameters/WebhookTimestamp"},
                       {"$ref": "#/components/parameters/WebhookSignature"},
                       header("Parley-Event-Type", {"type": "string", "const": event_type}),
                       {"$ref": "#/components/parameters/WebhookDeliveryAttempt"}],
        "requestBody": {"required": True, "content": {"application/json": media}},
        "responses": {"2XX": {"description": "Any 2xx within 10 s acknowledges the delivery; anything else is retried."}},
    }}


def hook_webhook(hook_type, entry, file, errors):
    """The webhook of one before-event hook: the call's headers and body, and the answer the server reads."""
    for key in entry:
        if key not in HOOK_KEYS:
            errors.append(f"{file}: hook {hook_type}: unknown key {key!r} (known: {', '.join(HOOK_KEYS)})")
    for key in HOOK_KEYS:
        if key not in entry:
            errors.append(f"{file}: hook {hook_type}: {key!r} is missing")
    patchable = entry.get("patchable", [])
    patch = ("A `modify` answer's `patch` may change " + ", ".join(f"`{name}`" for name in patchable) + "."
             if patchable else "A `modify` answer changes nothing (the action goes on as with `allow`).")
    return {"post": {
        "summary": f"`{hook_type}` hook: {entry.get('summary', '')}",
        "description": f"{entry.get('summary', '')} Called synchronously, within the endpoint's `timeout_ms`, on the one "
                       f"enabled endpoint that lists `{hook_type}` exactly; never written to the log, never retried. "
                       f"{patch} A timeout, another status or an unreadable answer counts as `allow` when the endpoint's "
                       "`fail_open` is true, else fails the request with 503 `7000502` "
                       "(see docs/webhooks.md#before-event-hooks).",
        "tags": ["Webhooks"],
        "parameters": [{"$ref": "#/components/parameters/WebhookHookCallId"},
                       {"$ref": "#/components/parameters/WebhookTimestamp"},
                       {"$ref": "#/components/parameters/WebhookSignature"},
                       header("Parley-Event-Type", {"type": "string", "const": hook_type}),
                       {"$ref": "#/components/parameters/WebhookDeliveryAttempt"}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": {"allOf": [
            {"$ref": "#/components/schemas/HookCall"},
            {"type": "object", "properties": {"type": {"const": hook_type}, "data": component("schemas", entry.get("data", {}))}},
        ]}}}},
        "responses": {"200": {
            "description": "The hook's verdict. " + patch,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/HookVerdict"}}},
        }},
    }}


# Literals of the form <domain>.<action> that are not events of the log nor hooks, and why.
NOT_EVENTS = {
    "conversation.signal": "ephemeral: sent only to the user streams open at that moment, never logged nor delivered to "
                           "webhooks (docs/events.md#live-streams-server-sent-events)",
    "blacklist.json": "a file name of a user's export (docs/privacy.md)",
    "webhook.ping": "the ping's body, written out under webhooks (not an event of the log)",
}
SWIFT_LITERAL = re.compile(r'"([a-z]+)\.([a-z_]+)"')
SQL_LITERAL = re.compile(r"'([a-z]+)\.([a-z_]+)'")
# A writer naming its type in place, whose domain counts even when nothing of it is documented yet.
WRITER = re.compile(r'\bNewEvent\(\s*type:\s*"([a-z]+)\.')


def written_types(domains):
    """type → the first place a literal of it occurs, for every <domain>.<action> literal of a documented domain."""
    found = {}
    sources = [(path, SWIFT_LITERAL, without_comments) for path in sorted(SOURCES.glob("*/**/*.swift"))]
    sources += [(path, SQL_LITERAL, lambda text: re.sub(r"--[^\n]*", "", text))
                for path in sorted((ROOT / "Migrations").glob("**/*.sql"))]
    for path, literal, strip in sources:
        source = strip(path.read_text(encoding="utf-8"))
        for m in literal.finditer(source):
            if m[1] in domains:
                where = f"{path.relative_to(ROOT)}:{source.count(chr(10), 0, m.start()) + 1}"
                found.setdefault(f"{m[1]}.{m[2]}", where)
    return found


def check_types_against_code(events, hooks, errors):
    """The documented types are exactly the ones the code writes or calls hooks for (see the module's doc)."""
    documented = set(events) | set(hooks)
    domains = {name.split(".")[0] for name in documented}
    for path in sorted(SOURCES.glob("*/**/*.swift")):
        domains.update(WRITER.findall(without_comments(path.read_text(encoding="utf-8"))))
    written = written_types(domains)
    for name, where in sorted(written.items()):
        if name not in documented and name not in NOT_EVENTS:
            errors.append(f"{where}: {name} looks like an event type but is not documented: add it to the \"events\" "
                          f"or \"hooks\" of {SRC.relative_to(ROOT)}/events.json (or to NOT_EVENTS in this script)")
    for name in sorted(documented - set(written)):
        errors.append(f"{name} is documented but no literal of it occurs in Sources/ or Migrations/: nothing writes it")


# ---------------------------------------------------------------------------------------------------------------
# The document

PATH_ITEM_ORDER = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def merge(into, items, what, owners, name, errors):
    """Adds items to `into`, refusing a name two files define."""
    for key, value in items.items():
        if key in into:
            errors.append(f"{what} {key} is defined in both {owners[(what, key)]} and {name}")
            continue
        into[key] = value
        owners[(what, key)] = name


def build(errors):
    """The document, or None when the sources do not agree (the reasons appended to errors)."""
    routes = scan_routes(errors)
    loaded = len(errors)
    fragments = load_fragments(errors)
    if len(errors) > loaded:  # a source that does not load: the rest would only be noise
        return None
    base = fragments[0][1]
    shared_parameters = base.get("pathParameters", {})
    document = {key: value for key, value in base.items() if key not in FRAGMENT_KEYS}
    webhooks, components, owners = {}, {}, {}
    entries = {}  # operationId → (file, entry, the file's path parameters)
    events, hooks = {}, {}
    for name, fragment in fragments:
        merge(events, fragment.get("events", {}), "event", owners, name, errors)
        merge(hooks, fragment.get("hooks", {}), "hook", owners, name, errors)
        merge(webhooks, {event_type: event_webhook(event_type, entry, name, errors)
                         for event_type, entry in fragment.get("events", {}).items()}, "webhook", owners, name, errors)
        merge(webhooks, {hook_type: hook_webhook(hook_type, entry, name, errors)
                         for hook_type, entry in fragment.get("hooks", {}).items()}, "webhook", owners, name, errors)
        merge(webhooks, fragment.get("webhooks", {}), "webhook", owners, name, errors)
        for kind, items in fragment.get("components", {}).items():
            merge(components.setdefault(kind, {}), items, f"components.{kind}", owners, name, errors)
        parameters = {**shared_parameters, **fragment.get("pathParameters", {})}
        for operation_id, entry in fragment.get("operations", {}).items():
            if operation_id in entries:
                errors.append(f"operationId {operation_id} has entries in both {entries[operation_id][0]} and {name}")
            entries.setdefault(operation_id, (name, entry, parameters))

    paths = {}
    for route in routes:
        if route.operation_id not in entries:
            errors.append(f"{route.operation_id}: {route} has no contract entry in {SRC.relative_to(ROOT)}/")
            continue
        name, entry, parameters = entries[route.operation_id]
        paths.setdefault(route.template, {})[route.method] = operation(route, entry, parameters, name, errors)
    check_types_against_code(events, hooks, errors)
    registered = {route.operation_id for route in routes}
    for operation_id, (name, _, _) in entries.items():
        if operation_id not in registered:
            errors.append(f"{name}: {operation_id} has no route registered in Sources/")

    document["paths"] = {
        template: {method: paths[template][method] for method in PATH_ITEM_ORDER if method in paths[template]}
        for template in sorted(paths)
    }
    if webhooks:
        document["webhooks"] = webhooks
    document["components"] = components
    for at, ref in refs(document):
        if not resolves(ref, document):
            errors.append(f"{render(at)}: $ref {ref} does not resolve")
    return None if errors else document


def refs(value, at=()):
    """(where, $ref) for every reference in the document."""
    if isinstance(value, dict):
        for key, member in value.items():
            if key == "$ref" and isinstance(member, str):
                yield at, member
            else:
                yield from refs(member, at + (key,))
    elif isinstance(value, list):
        for i, member in enumerate(value):
            yield from refs(member, at + (i,))


def resolves(ref, document):
    """Whether a local reference (#/components/schemas/User) points at something in the document."""
    if not ref.startswith("#/"):
        return False
    node = document
    for token in ref[2:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        else:
            return False
    return True


def render(at):
    return " › ".join(str(part) for part in at) or "(the document)"


def text(document):
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# check: the committed file against the build

def differences(old, new, at=()):
    """(where, how) for each place the committed document and the built one differ; key order is ignored."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [key for key in new if key not in old]:
            if key not in new:
                yield at + (key,), "only in the committed file"
            elif key not in old:
                yield at + (key,), "only in the build"
            else:
                yield from differences(old[key], new[key], at + (key,))
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            yield from differences(a, b, at + (i,))
    elif type(old) is not type(new) or old != new:
        yield at, f"{brief(old)} in the committed file, {brief(new)} in the build"


def brief(value):
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= 60 else shown[:57] + "…"


def check(built):
    """Problems of the committed openapi/openapi.json against the built text (none when they are the same)."""
    out = OUT.relative_to(ROOT)
    if not OUT.exists():
        return [f"{out} is missing"]
    committed = OUT.read_text(encoding="utf-8")
    if committed == text(built):
        return []
    try:
        old = json.loads(committed)
    except ValueError as e:
        return [f"{out} is not valid JSON: {e}"]
    found = list(differences(old, built))
    if not found:
        return [f"{out} has the built content, but not the layout build writes (key order or formatting)"]
    shown = [f"{out}: {render(at)}: {how}" for at, how in found[:20]]
    more = [f"… and {len(found) - 20} more"] if len(found) > 20 else []
    return shown + more


def main():
    command = sys.argv[1] if len(sys.argv) == 2 else None
    if command not in ("build", "check"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    errors = []
    document = build(errors)
    if document is not None and command == "build":
        OUT.write_text(text(document), encoding="utf-8")
        print(f"wrote {OUT.relative_to(ROOT)} ({len(document['paths'])} paths)")
        return 0
    if document is not None:
        errors = check(document)
        if errors:
            errors.append(f"{OUT.relative_to(ROOT)} is generated: edit {SRC.relative_to(ROOT)}/, then run "
                          "`python3 scripts/openapi.py build`")
    for error in errors:
        print(f"openapi: {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
