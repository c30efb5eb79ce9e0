#!/usr/bin/env python3
"""Lists the SQL statements of the server and whether each is scoped to one app (Python 3 stdlib).

usage: scripts/scaling-queries.py build   rewrites the generated section of docs/scaling.md
       scripts/scaling-queries.py check   exit status 1 when that section is not what `build` would write
       scripts/scaling-queries.py list    prints every statement with its class and tables (for hand checks)

The section sits between `<!-- queries:begin -->` and `<!-- queries:end -->` in docs/scaling.md. It answers, for the
plan past one PostgreSQL (Citus, distributed by app_id), which statements a coordinator can route to the one shard of
an app and which would cross shards.

How it reads the code:

- Tables: the final set of tables after every migration of Migrations/*.sql in order (CREATE TABLE, DROP TABLE,
  ALTER TABLE … RENAME TO), and for each function of Migrations/ (including Migrations/functions/) the tables its
  body reads or writes, so that a statement calling `parley_member_at(…)` touches `group_members` and
  `group_member_history`.
- Statements: every Swift string literal of Sources/**/*.swift (single-line or `\"\"\"` multi-line) whose text starts,
  after blanks and comments, with SELECT, INSERT, UPDATE, DELETE, WITH, ANALYZE, VACUUM, TRUNCATE, LOCK or CREATE/
  ALTER/DROP. An interpolation `\\(value)` becomes a bound parameter `$?`; `\\(unsafeSQL: name)` and `\\(name)` are replaced by
  the text of a string literal bound to `name` in the same file (`static let name = "…"`, `let name: PostgresQuery =
  "…"`) when there is one, otherwise kept as `{name}`.
- Tables of a statement: the names that follow FROM, JOIN, INTO, UPDATE, USING, TABLE, ANALYZE (and the later items of
  a comma-separated FROM list), minus the names of the statement's CTEs, plus the tables of the functions it calls.
- Class of a statement:
    carries app_id   every distributed table it touches has an app_id condition, and at least one app_id is compared
                     with a value (a parameter or a function argument): `app_id = $?`, `x.app_id = $?`,
                     `app_id = ANY($?)`, `USING (app_id …)` joins to such a table, or the table is the target of an
                     INSERT whose column list names app_id. A table "has an app_id condition" when `<alias>.app_id` or
                     `<table>.app_id` appears in a comparison, or when the statement compares an unqualified `app_id`.
    crosses shards   it touches a distributed table and no app_id is compared with a value (sweeps over all apps,
                     leasing due work, retention), or one of its distributed tables has no app_id condition.
    reference only   it touches only reference or node-local tables (or no table at all).
  The class is a heuristic over text, not a parse: OVERRIDES below corrects the statements known to be read wrongly,
  each with its reason, and docs/scaling.md says where the list is known to be imprecise.
"""

import hashlib
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "scaling.md")
BEGIN = "<!-- queries:begin -->"
END = "<!-- queries:end -->"

# The plan of docs/scaling.md: tables that are not distributed by app_id. Every other table of the final schema is
# distributed by app_id (a table without an app_id column that is not listed here makes `check` fail).
REFERENCE = {
    # None today: `apps` is distributed by app_id and co-located (docs/scaling.md argues why).
}
NODE_LOCAL = {
    "live_nodes": "one row per node of the cluster, swept by every node: kept on the coordinator",
    "schema_migrations": "the migrator's bookkeeping (Sources/ParleyPostgres/Migrator.swift): coordinator only",
    "schema_functions": "the migrator's bookkeeping of Migrations/functions: coordinator only",
    "stats_samples": "the minutes the activity sampler ran in, one row each for the cluster (Sources/Parley/Ops/StatsSampler.swift): coordinator only",
}

# Statements the heuristic reads wrongly: (file, owner, digest prefix) -> (class, reason). Keep each with its reason.
# None so far: the hand check of docs/scaling.md found no statement classed wrongly.
OVERRIDES = {
}

# Statements composed at run time from fragments (the message writer's statement holds only the parts a batch needs):
# (file, owner) -> owners whose fragments it also takes in. The statement is listed once, as the text of every string
# literal of its owner and of those owners, in source order: every part it can hold, with their tables and app_id
# conditions. The owners it takes in are not listed on their own.
COMPOSED = {
    ("Sources/ParleyDomains/Messages/Sending/MessageWrite.swift", "MessageWrite.composeStatement"): ["MessageWrite.checked"],
    ("Sources/ParleyDomains/Messages/Sending/MessageWrite.swift", "MessageWrite.checkStatement"): ["MessageWrite.checked"],
}

SQL_START = re.compile(
    r"^(SELECT|INSERT|UPDATE|DELETE|WITH|ANALYZE|VACUUM|TRUNCATE|LOCK|CREATE|ALTER|DROP|SET|LISTEN|UNLISTEN|NOTIFY|"
    r"COPY|DO|CALL|REFRESH)\b",
    re.I,
)
CLASSES = ("carries app_id", "crosses shards", "reference only")


# --- Migrations -------------------------------------------------------------------------------------------------

def comment_end(text, i, line_marker):
    """Where the comment starting at `i` ends (`line_marker` to the end of the line, or /* … */); None when none
    starts there."""
    if text.startswith(line_marker, i):
        j = text.find("\n", i)
        return len(text) if j < 0 else j
    if text.startswith("/*", i):
        j = text.find("*/", i + 2)
        return len(text) if j < 0 else j + 2
    return None


def strip_sql_comments(text):
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        skipped = comment_end(text, i, "--") if c in "-/" else None
        if skipped is not None:
            i = skipped
        elif c == "'":
            j = i + 1
            while j < n:
                if text[j] == "'":
                    if j + 1 < n and text[j + 1] == "'":
                        j += 2
                        continue
                    break
                j += 1
            out.append("''")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def migration_files():
    folder = os.path.join(ROOT, "Migrations")
    files = sorted(f for f in os.listdir(folder) if f.endswith(".sql"))
    functions = os.path.join(folder, "functions")
    extra = sorted(os.path.join("functions", f) for f in os.listdir(functions) if f.endswith(".sql")) if os.path.isdir(functions) else []
    return [os.path.join(folder, f) for f in files + extra]


def read_schema():
    """(tables: name -> {"columns": set, "app_id": bool}, functions: name -> body text)."""
    tables, functions = {}, {}
    for path in migration_files():
        with open(path, encoding="utf-8") as f:
            text = strip_sql_comments_keep_bodies(f.read())
        for m in re.finditer(r"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)\s*\((.*?)\n\);", text, re.S | re.I):
            columns = set()
            for line in m.group(2).split("\n"):
                word = re.match(r"\s*(\w+)\s", line)
                if word and word.group(1).upper() not in ("PRIMARY", "UNIQUE", "FOREIGN", "CHECK", "CONSTRAINT", "EXCLUDE"):
                    columns.add(word.group(1))
            tables[m.group(1)] = columns
        for m in re.finditer(r"ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(\w+)\s+ADD\s+COLUMN\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", text, re.I):
            tables.setdefault(m.group(1), set()).add(m.group(2))
        for m in re.finditer(r"ALTER\s+TABLE\s+(\w+)\s+RENAME\s+TO\s+(\w+)", text, re.I):
            tables[m.group(2)] = tables.pop(m.group(1), set())
        for m in re.finditer(r"DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?(\w+)", text, re.I):
            tables.pop(m.group(1), None)
        for m in re.finditer(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(\w+)\s*\(.*?\$\$(.*?)\$\$", text, re.S | re.I):
            functions[m.group(1)] = m.group(2)
        for m in re.finditer(r"DROP\s+FUNCTION\s+(?:IF\s+EXISTS\s+)?(\w+)", text, re.I):
            functions.pop(m.group(1), None)
    # The migrator's own table is created from Swift (Sources/ParleyPostgres/Migrator.swift).
    for name in migrator_tables():
        tables.setdefault(name, set())
    return tables, functions


def strip_sql_comments_keep_bodies(text):
    return re.sub(r"--[^\n]*", "", text)


def migrator_tables():
    path = os.path.join(ROOT, "Sources", "ParleyPostgres", "Migrator.swift")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return sorted(set(re.findall(r"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", f.read(), re.I)))


# --- Swift string literals --------------------------------------------------------------------------------------

DECLARATION = re.compile(
    r"\b(?:func\s+(?P<func>[\w`]+|[^\s(]+)|(?P<init>init)\b|(?P<kind>struct|enum|class|extension|actor|protocol)\s+(?P<type>[\w.]+)|"
    r"(?:var)\s+(?P<var>\w+)\s*:[^=\n{]*\{|let\s+(?P<let>\w+))"
)


def swift_literals(text):
    """Yields (offset, parts, scopes) for each string literal: parts is a list of ("text", s) and ("interp", expr);
    scopes the enclosing declarations, outermost first, as (kind, name, offset of the declaration)."""
    i, n = 0, len(text)
    stack, pending = [], None
    while i < n:
        c = text[i]
        skipped = comment_end(text, i, "//") if c == "/" else None
        if skipped is not None:
            i = skipped
        elif c == '"' or (c == "#" and text.startswith('#"', i)):
            start = i
            hashes = 0
            while i < n and text[i] == "#":
                hashes += 1
                i += 1
            multi = text.startswith('"""', i)
            i += 3 if multi else 1
            parts, i = read_literal(text, i, multi, hashes)
            if multi:
                parts = dedent_multiline(parts)
            yield start, parts, [s for s in stack if s]
        elif c == "{":
            stack.append(pending)
            pending = None
            i += 1
        elif c == "}":
            if stack:
                stack.pop()
            i += 1
        elif (c.isalpha() or c == "_") and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "_.")):
            m = DECLARATION.match(text, i)
            if m:
                if m.group("func"):
                    pending = ("func", m.group("func").strip("`"), i)
                elif m.group("init"):
                    pending = ("func", "init", i)
                elif m.group("type"):
                    pending = ("type", m.group("type"), i)
                elif m.group("var"):
                    pending = ("func", m.group("var"), i)
                elif m.group("let") and not any(sc and sc[0] in ("func", "let") for sc in stack):
                    pending = ("let", m.group("let"), i)
                i = m.start() + len(m.group(0).split()[0])
            else:
                j = i
                while j < n and (text[j].isalnum() or text[j] == "_"):
                    j += 1
                i = j
        else:
            i += 1


def read_literal(text, i, multi, hashes):
    n = len(text)
    close = ('"""' if multi else '"') + "#" * hashes
    escape = "\\" + "#" * hashes
    parts, buf = [], []
    while i < n:
        if text.startswith(close, i):
            i += len(close)
            break
        if text.startswith(escape, i):
            j = i + len(escape)
            if j < n and text[j] == "(":
                depth, k = 1, j + 1
                while k < n and depth:
                    if text[k] == "(":
                        depth += 1
                    elif text[k] == ")":
                        depth -= 1
                    elif text[k] == '"':
                        _, k = read_literal(text, k + 1, False, 0)
                        continue
                    k += 1
                if buf:
                    parts.append(("text", "".join(buf)))
                    buf = []
                parts.append(("interp", text[j + 1:k - 1].strip()))
                i = k
                continue
            if j < n:
                buf.append({"n": "\n", "t": "\t", "0": "\0"}.get(text[j], text[j] if text[j] != "\n" else ""))
                i = j + 1
                continue
        if not multi and text[i] == "\n":
            break
        buf.append(text[i])
        i += 1
    if buf:
        parts.append(("text", "".join(buf)))
    return parts, i


def dedent_multiline(parts):
    """The text of a multi-line literal without its first line break and with whitespace collapsed later."""
    if parts and parts[0][0] == "text":
        parts[0] = ("text", parts[0][1].lstrip("\n"))
    return parts


def literal_text(parts):
    return "".join(p[1] if p[0] == "text" else "\0" for p in parts)


# --- Statements -------------------------------------------------------------------------------------------------

NAMED = re.compile(r"(?:static\s+)?(?:let|var)\s+(\w+)\s*(?::\s*[\w.]+\s*)?=\s*$")


def owner_of(text, lines, offset, scopes):
    """(Type.member, doc) of the declaration that encloses a literal: its innermost function (or computed property),
    else a `static let name = …` it is bound to, within its innermost type."""
    types = [s for s in scopes if s[0] == "type"]
    funcs = [s for s in scopes if s[0] in ("func", "let")]
    member, doc = None, ""
    if funcs:
        kind, member, at = funcs[-1]
        doc = doc_above(lines, text.count("\n", 0, at))
    else:
        line_start = text.rfind("\n", 0, offset) + 1
        m = NAMED.search(text[line_start:offset])
        lets = list(re.finditer(r"\blet\s+(\w+)", text[types[-1][2] if types else 0:offset]))
        if m:
            member = m.group(1)
            doc = doc_above(lines, text.count("\n", 0, offset))
        elif lets:
            member = lets[-1].group(1)
            at = (types[-1][2] if types else 0) + lets[-1].start()
            doc = doc_above(lines, text.count("\n", 0, at))
    if member is not None and not doc and types and (not funcs or funcs[-1][0] == "let"):
        # A type-level constant without its own comment (a timer's `kind`): the type's comment says what it is.
        doc = doc_above(lines, text.count("\n", 0, types[-1][2]))
    member = member or "(type level)"
    return (types[-1][1] + "." + member if types else member), doc


def doc_above(lines, k):
    docs = []
    j = k - 1
    while j >= 0 and lines[j].strip().startswith("@"):
        j -= 1
    while j >= 0 and lines[j].strip().startswith("///"):
        docs.append(lines[j].strip()[3:].strip())
        j -= 1
    text = " ".join(reversed(docs)).strip()
    if not text:
        return ""
    # References to pages of docs/ are left out: the table sits in docs/scaling.md, where a path from the root of the
    # repository would not resolve, and the page it cites is beside the point there.
    text = re.sub(r"\s*\((?:see )?docs/[\w-]+\.md(?:#[\w-]+)?\)", "", text)
    text = re.sub(r"[,;]?\s*docs/[\w-]+\.md(?:#[\w-]+)?(?=[,;)])", "", text)
    text = re.sub(r"\(\s*[,;]\s*", "(", text)
    sentence = re.split(r"(?<=[.:])\s", text, maxsplit=1)[0].rstrip(".:;")
    sentence = sentence.replace("``", "`").replace("|", "\\|")
    if len(sentence) > 110:
        sentence = sentence[:107].rsplit(" ", 1)[0] + " …"
    return sentence


def named_literals(text):
    """name -> literal text, for `let name = "…"` / `static let name: PostgresQuery = "…"` in a file."""
    names = {}
    for offset, parts, _ in swift_literals(text):
        line_start = text.rfind("\n", 0, offset) + 1
        m = NAMED.search(text[line_start:offset].rstrip() + " ")
        m = NAMED.search(text[line_start:offset]) or m
        if m:
            names.setdefault(m.group(1), parts)
    return names


def render(parts, names, depth=0):
    out = []
    for kind, value in parts:
        if kind == "text":
            out.append(value)
            continue
        expr = value
        fragment = expr.startswith("unsafeSQL:")
        if fragment:
            expr = expr[len("unsafeSQL:"):].strip()
        bare = re.sub(r"^(?:Self|self|\w+)\.", "", expr)
        if re.fullmatch(r"\w+", bare) and bare in names and depth < 4:
            out.append(render(names[bare], names, depth + 1))
        elif fragment:
            out.append("{" + expr + "}")
        else:
            out.append("$?")
    return "".join(out)


def normalise(sql):
    sql = strip_sql_comments(sql)
    return re.sub(r"\s+", " ", sql).strip()


TARGET = re.compile(r"(?:\b(?:var|let)\s+)?(\w+)\s*(?::\s*PostgresQuery\s*)?(\+?=)\s*$")


def statements():
    """Every SQL statement of Sources: dicts with file, owner, doc, sql.

    A literal bound to a name that other literals of the file interpolate (a shared column list, a SELECT head that
    callers complete with their WHERE) is a fragment, not a statement: it is read inside the statements that use it.
    Literals appended to one variable in one function (`query += "…"`) are read as one statement."""
    found = []
    sources = os.path.join(ROOT, "Sources")
    for folder, dirs, files in os.walk(sources):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(".swift"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            upper = text.upper()
            if not any(word in upper for word in ("SELECT", "INSERT", "UPDATE", "DELETE")):
                continue
            literals = list(swift_literals(text))
            names = named_literals(text)
            used = set()
            for _, parts, _ in literals:
                for kind, value in parts:
                    if kind == "interp":
                        used.add(re.sub(r"^(?:Self|self|\w+)\.", "", value[len("unsafeSQL:"):].strip() if value.startswith("unsafeSQL:") else value))
            for m in re.finditer(r"(?:Self\.)?(\w+)\s*\+\s*[\"\w]|[^+]\+\s*(?:Self\.)?(\w+)", text):
                used.add(m.group(1) or m.group(2))
            lines = text.split("\n")
            groups = {}
            for offset, parts, scopes in literals:
                line_start = text.rfind("\n", 0, offset) + 1
                before = text[line_start:offset]
                prefix = re.search(r"(?:Self\.)?(\w+)\s*\+\s*$", text[text.rfind("\n", 0, max(line_start - 1, 0)) + 1:offset])
                if prefix and prefix.group(1) in names:
                    parts = list(names[prefix.group(1)]) + [("text", " ")] + list(parts)
                target = TARGET.search(before)
                func = next((sc for sc in reversed(scopes) if sc[0] in ("func", "let")), None)
                if target and func and target.group(1) not in ("let", "var"):
                    key = (func[2], target.group(1))
                    if key in groups and target.group(2) == "+=":
                        groups[key]["parts"] += [("text", " ")] + parts
                        continue
                    if target.group(2) == "=" or key not in groups:
                        groups[key] = {"offset": offset, "parts": list(parts), "scopes": scopes}
                        found_item = groups[key]
                        found_item["file_text"] = True
                        continue
                groups[(offset, None)] = {"offset": offset, "parts": list(parts), "scopes": scopes}
            for item in sorted(groups.values(), key=lambda g: g["offset"]):
                offset, parts, scopes = item["offset"], item["parts"], item["scopes"]
                head = normalise(literal_text(parts).replace("\0", " "))
                if not SQL_START.match(head) or not looks_like_sql(head):
                    continue
                line_start = text.rfind("\n", 0, offset) + 1
                bound = NAMED.search(text[line_start:offset])
                if bound and bound.group(1) in used and not any(sc[0] in ("func", "let") for sc in scopes):
                    continue
                sql = normalise(render(parts, names))
                owner, doc = owner_of(text, lines, offset, scopes)
                found.append({"file": os.path.relpath(path, ROOT), "owner": owner, "doc": doc, "sql": sql})
            found = composed(found, os.path.relpath(path, ROOT), text, lines, literals, names)
    return found


def composed(found, file, text, lines, literals, names):
    """`found` with the statements of COMPOSED owners of `file` put together from all their fragments."""
    wanted = {owner: extra for (f, owner), extra in COMPOSED.items() if f == file}
    if not wanted:
        return found
    fragments, docs = {}, {}
    for offset, parts, scopes in literals:
        owner, doc = owner_of(text, lines, offset, scopes)
        fragments.setdefault(owner, []).append(render(parts, names))
        docs.setdefault(owner, doc)
    taken_in = {o for extra in wanted.values() for o in extra}
    kept = [s for s in found if not (s["file"] == file and (s["owner"] in wanted or s["owner"] in taken_in))]
    for owner, extra in wanted.items():
        pieces = fragments.get(owner, []) + [piece for o in extra for piece in fragments.get(o, [])]
        if not pieces:
            sys.exit(f"scaling-queries.py: COMPOSED names {file} {owner}, which has no string literal")
        kept.append({"file": file, "owner": owner, "doc": docs.get(owner, ""), "sql": normalise(" ".join(pieces))})
    return kept


def looks_like_sql(text):
    """A literal that starts with an SQL word and reads as SQL, not as prose ("Select a …", "Update the …")."""
    word = text.split(" ", 1)[0].upper()
    rest = text[len(word):]
    if word == "SELECT":
        return bool(re.search(r"\bFROM\b|\$\?|\(|\bAS\b|^\s*\d|'", rest)) and not re.match(r"\s+(a|an|the)\b", rest)
    if word == "INSERT":
        return bool(re.match(r"\s+INTO\b", rest))
    if word == "UPDATE":
        return bool(re.match(r"\s+\w+(\s+(AS\s+)?\w+)?\s+SET\b", rest))
    if word == "DELETE":
        return bool(re.match(r"\s+FROM\b", rest))
    if word == "WITH":
        return bool(re.match(r"\s+(RECURSIVE\s+)?\w+\s*(\([^)]*\)\s*)?AS\b", rest))
    if word in ("ANALYZE", "VACUUM", "TRUNCATE", "LISTEN", "UNLISTEN", "NOTIFY"):
        return bool(re.match(r"\s+[\w\"{]", rest)) and word.isupper() is True and text.split(" ", 1)[0].isupper()
    if word in ("CREATE", "ALTER", "DROP", "LOCK", "COPY", "CALL", "DO", "SET", "REFRESH"):
        return text.split(" ", 1)[0].isupper() and bool(re.match(r"\s+[A-Z]", rest))
    return False


# --- Classification ---------------------------------------------------------------------------------------------

REF_WORDS = r"FROM|JOIN|INTO|UPDATE|USING|TABLE|ANALYZE|ONLY"


def table_refs(sql, tables, functions):
    """(set of (table, alias)) of a statement."""
    cte = set(re.findall(r"(?:\bWITH\s+(?:RECURSIVE\s+)?|,\s*)(\w+)\s*(?:\([^)]*\)\s*)?AS\s+(?:NOT\s+)?(?:MATERIALIZED\s+)?\(", sql, re.I))
    refs = set()
    for m in re.finditer(r"\b(?:%s)\s+" % REF_WORDS, sql, re.I):
        pos = m.end()
        while True:
            item = re.match(r"(\w+)(?:\s+(?:AS\s+)?(?!(?:WHERE|SET|ON|USING|JOIN|LEFT|RIGHT|INNER|FULL|CROSS|NATURAL|"
                            r"GROUP|ORDER|LIMIT|RETURNING|VALUES|SELECT|DEFAULT|FOR|WINDOW|HAVING|UNION|EXCEPT|"
                            r"INTERSECT|OFFSET|FETCH|LATERAL|WITH|AND|OR|WHEN|THEN|ELSE|END|DO|OVERRIDING)\b)(\w+))?\s*",
                            sql[pos:], re.I)
            if not item:
                break
            name = item.group(1)
            if name in tables and name not in cte:
                refs.add((name, item.group(2) or name))
            pos += item.end()
            if sql[pos:pos + 1] == "," and m.group(0).strip().upper() in ("FROM", "USING"):
                pos += 1
                while sql[pos:pos + 1] == " ":
                    pos += 1
                continue
            break
    return refs


def called_functions(sql, functions):
    return sorted(name for name in functions if re.search(r"\b%s\s*\(" % re.escape(name), sql))


def function_tables(functions, tables):
    """name -> set of tables its body touches (following calls to other functions)."""
    direct = {}
    for name, body in functions.items():
        flat = normalise(body)
        direct[name] = {t for t, _ in table_refs(flat, tables, functions)}
    closed = {}
    for name in functions:
        seen, todo, result = set(), [name], set()
        while todo:
            f = todo.pop()
            if f in seen:
                continue
            seen.add(f)
            result |= direct.get(f, set())
            todo += called_functions(normalise(functions[f]), functions)
        closed[name] = result
    return closed


VALUE = r"(?:\$\?|\$\d+|p_app\b|'[^']*'|\{[\w.]+\})"


def classify(sql, tables, functions, ftables):
    refs = table_refs(sql, tables, functions)
    calls = called_functions(sql, functions)
    touched = {t for t, _ in refs}
    for f in calls:
        touched |= ftables.get(f, set())
    distributed = sorted(t for t in touched if t not in REFERENCE and t not in NODE_LOCAL)
    if not distributed:
        return "reference only", sorted(touched), calls
    bound = re.search(r"(?:\b\w+\.)?app_id\s*(?:=|IN\b)\s*(?:ANY\s*\(\s*)?\(?\s*%s" % VALUE, sql, re.I) \
        or re.search(r"%s\s*=\s*(?:\w+\.)?app_id\b" % VALUE, sql, re.I) \
        or re.search(r"\bINSERT\s+INTO\s+\w+(?:\s+AS\s+\w+)?\s*\([^)]*\bapp_id\b[^)]*\)\s*(?:VALUES|SELECT)\s*\(?\s*%s" % VALUE, sql, re.I) \
        or any(re.search(r"\b%s\s*\(\s*%s" % (re.escape(f), VALUE), sql) for f in calls)
    if not bound:
        return "crosses shards", sorted(touched), calls
    unqualified = re.search(r"(?<![\w.])app_id\s*(?:=|IN\b)", sql, re.I) or re.search(r"=\s*app_id\b", sql, re.I)
    for name, alias in refs:
        if name not in distributed:
            continue
        if unqualified or re.search(r"\b(?:%s|%s)\.app_id\b" % (re.escape(alias), re.escape(name)), sql):
            continue
        if re.search(r"\bINSERT\s+INTO\s+%s\b(?:\s+AS\s+\w+)?\s*\([^)]*\bapp_id\b" % re.escape(name), sql, re.I):
            continue
        if re.search(r"\bUSING\s*\(\s*app_id\b", sql, re.I):
            continue
        return "crosses shards", sorted(touched), calls
    return "carries app_id", sorted(touched), calls


def digest(sql):
    return hashlib.sha1(sql.encode()).hexdigest()[:8]


def analyse():
    tables, functions = read_schema()
    ftables = function_tables(functions, tables)
    rows = []
    for order, s in enumerate(statements()):
        s["order"] = order  # the order of the sources: stable while a function's statements keep their order
        cls, touched, calls = classify(s["sql"], tables, functions, ftables)
        s["class"], s["tables"], s["calls"], s["digest"] = cls, touched, calls, digest(s["sql"])
        for (file, owner, prefix), (fixed, reason) in OVERRIDES.items():
            if s["file"] == file and s["owner"] == owner and s["digest"].startswith(prefix):
                s["class"], s["override"] = fixed, reason
        rows.append(s)
    rows.sort(key=lambda s: (s["file"], s["owner"], s["order"]))
    # The doc numbers the statements of one owner 1, 2, … instead of naming their digest, so an edit of a statement's
    # text leaves the list alone unless its class or tables change.
    seen = {}
    for s in rows:
        key = (s["file"], s["owner"])
        seen[key] = seen.get(key, 0) + 1
        s["number"] = seen[key]
    return tables, functions, ftables, rows


# --- The section ------------------------------------------------------------------------------------------------

def section(tables, functions, ftables, rows):
    out = []
    counts = {c: sum(1 for r in rows if r["class"] == c) for c in CLASSES}
    out.append("Generated by `python3 scripts/scaling-queries.py build` from `Sources/**/*.swift` and `Migrations/`; do not")
    out.append("edit by hand (`python3 scripts/scaling-queries.py check` fails when it is stale). How a statement is classed:")
    out.append("see [the script's header](../scripts/scaling-queries.py) and the limits below.")
    out.append("")
    out.append("| Class | Statements |")
    out.append("|---|---|")
    for c in CLASSES:
        out.append("| %s | %d |" % (c, counts[c]))
    out.append("| total | %d |" % len(rows))
    out.append("")
    dist = sorted(t for t in tables if t not in REFERENCE and t not in NODE_LOCAL)
    out.append("Tables of the final schema (%d): distributed by `app_id`: %s. Node-local or coordinator only: %s." % (
        len(tables), ", ".join("`%s`" % t for t in dist),
        ", ".join("`%s`" % t for t in sorted(NODE_LOCAL) if t in tables) or "none"))
    out.append("")
    out.append("### Statements that cross shards")
    out.append("")
    out.append("| File | Owner | Tables | What |")
    out.append("|---|---|---|---|")
    cross = [r for r in rows if r["class"] == "crosses shards"]
    for r in cross:
        what = r["doc"] or "`%s`" % r["owner"].split(".")[-1]
        out.append("| [%s](../%s) | `%s` | %s | %s |" % (
            os.path.basename(r["file"]), r["file"], r["owner"], ", ".join("`%s`" % t for t in r["tables"]), what))
    out.append("")
    out.append("### Statements that carry app_id, per table")
    out.append("")
    per = {}
    for r in rows:
        if r["class"] != "carries app_id":
            continue
        for t in r["tables"]:
            per[t] = per.get(t, 0) + 1
    cross_per = {}
    for r in cross:
        for t in r["tables"]:
            cross_per[t] = cross_per.get(t, 0) + 1
    out.append("| Table | Carry app_id | Cross shards |")
    out.append("|---|---|---|")
    for t in sorted(tables):
        if t in NODE_LOCAL:
            continue
        out.append("| `%s` | %d | %d |" % (t, per.get(t, 0), cross_per.get(t, 0)))
    out.append("")
    if OVERRIDES:
        out.append("Overrides of the heuristic (in the script, each with its reason): %d." % len(OVERRIDES))
        out.append("")
    out.append("<details><summary>Every statement (%d)</summary>" % len(rows))
    out.append("")
    out.append("| File | Owner | # | Class | Tables |")
    out.append("|---|---|---|---|---|")
    for r in rows:
        out.append("| %s | `%s` | %d | %s | %s |" % (
            r["file"].replace("Sources/", ""), r["owner"], r["number"], r["class"],
            ", ".join("`%s`" % t for t in r["tables"]) or "—"))
    out.append("")
    out.append("</details>")
    return "\n".join(out) + "\n"


def current_doc():
    with open(DOC, encoding="utf-8") as f:
        return f.read()


def replace_section(doc, body):
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise SystemExit("docs/scaling.md: the markers %s and %s are missing" % (BEGIN, END))
    return doc[:start + len(BEGIN)] + "\n" + body + doc[end:]


def main(argv):
    if len(argv) != 2 or argv[1] not in ("build", "check", "list"):
        print(__doc__.split("\n\n")[0] + "\n" + __doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    tables, functions, ftables, rows = analyse()
    if argv[1] == "list":
        for r in rows:
            print("%-15s %s %s [%s]\n    %s\n" % (r["class"], r["file"], r["owner"], ", ".join(r["tables"]), r["sql"]))
        return 0
    body = section(tables, functions, ftables, rows)
    doc = current_doc()
    wanted = replace_section(doc, body)
    if argv[1] == "build":
        if wanted != doc:
            with open(DOC, "w", encoding="utf-8") as f:
                f.write(wanted)
        print("docs/scaling.md: %d statements (%s)" % (len(rows), ", ".join(
            "%s %d" % (c, sum(1 for r in rows if r["class"] == c)) for c in CLASSES)))
        return 0
    if wanted != doc:
        old = doc[doc.find(BEGIN):doc.find(END)].split("\n")
        new = wanted[wanted.find(BEGIN):wanted.find(END)].split("\n")
        gone = [l for l in old if l not in set(new)]
        added = [l for l in new if l not in set(old)]
        print("docs/scaling.md: the statement list is stale; run `python3 scripts/scaling-queries.py build`.", file=sys.stderr)
        for l in added[:20]:
            print("  + " + l, file=sys.stderr)
        for l in gone[:20]:
            print("  - " + l, file=sys.stderr)
        return 1
    print("docs/scaling.md: the statement list is up to date (%d statements)" % len(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
