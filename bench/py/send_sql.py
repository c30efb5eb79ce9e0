#!/usr/bin/env python3
"""Generates the pgbench script of a send from a template in bench/sql/ and the server's Swift sources (bench/send.sh,
bench/group.sh). Python 3 standard library only.

usage: send_sql.py TEMPLATE OUTPUT ROOT BINARY

The send's SQL is composed by the server (the writer's statement depends on what a batch holds), so the bench keeps no
copy of it that could drift: each run asks the release binary for the current text (`parley sql send <part>...`,
`parley sql events`) and pastes it into its pgbench script. A template is a pgbench script in which a block

    @MessageWrite.statement[peer,keyed,checked,policy](
    $1 := <SQL expression>
    );

stands for that statement (a line `@<name>(`, or `@MessageWrite.statement[<parts>](` naming the parts of the batch, opens the block, a line `);` closes it; each `$n := ` line starts the
value of parameter $n, which runs to the next one, a trailing comma dropped). The block becomes the statement's text,
its common indentation stripped as Swift strips it, with every `$n` replaced by `(<value>)`, and a `;`. Other lines
are copied as they are.

Checks, each fatal (exit status 1, the reason on stderr), so a changed statement stops the bench at once rather than
measuring something else:
  - every parameter the statement uses has a value in the block, and every value a parameter;
  - for MessageWrite.statement: the $1 item names (the `'name',` keys of its json_build_object) are exactly the
    columns of the statement's `json_to_recordset($1::json) AS i(...)`, which are exactly the keys `itemRecords`
    (MessageWrite.swift) writes per item;
  - pgbench's view of the result: pgbench replaces `:name` anywhere in an SQL command (also inside literals and
    comments) by a variable, so every `:name` must be a variable the script sets (`\\set`) or a pgbench built-in;
    write a literal colon as `\\x3a` in an E'' string.
"""
import os
import re
import sys

# name -> the `parley sql` arguments that print it (MessageWrite.statement adds the template's parts).
SOURCES = {
    "MessageWrite.statement": ["sql", "send"],
    "EventLog.appendNumbered": ["sql", "events"],
}
# Where itemRecords writes the item keys (checked against the statement's columns).
ITEMS_SOURCE = "Sources/ParleyDomains/Messages/Sending/MessageWrite.swift"
PGBENCH_BUILTINS = {"client_id", "scale", "random_seed", "default_seed"}


def fail(message):
    print(f"send_sql.py: {message}", file=sys.stderr)
    sys.exit(1)


def statement_text(binary, name, parts):
    """The statement `name` as the binary prints it."""
    import subprocess
    command = [binary] + SOURCES[name] + (parts if name == "MessageWrite.statement" else [])
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"{name}: `{' '.join(command)}` failed: {result.stderr.strip()}")
    return result.stdout.rstrip("\n")


def item_keys(root):
    """The keys `MessageWrite.itemRecords` writes per item: the names of `MessageWrite.itemFields`, in order."""
    path = os.path.join(root, ITEMS_SOURCE)
    with open(path, encoding="utf-8") as f:
        source = f.read()
    body = re.search(r"static let itemFields: \[ItemField\] = \[.*?\n    \]\n", source, re.S)
    if not body:
        fail(f"no itemFields table in {path}")
    return re.findall(r'ItemField\(name: "(\w+)"', body.group(0))


def recordset_columns(statement):
    """The column names of `json_to_recordset($1::json) AS i(...)`."""
    m = re.search(r"json_to_recordset\(\$1::json\)\s+AS\s+\w+\(", statement)
    if not m:
        fail("MessageWrite.statement: no json_to_recordset($1::json) AS i(...) column list")
    depth, i = 1, m.end()
    while depth and i < len(statement):
        depth += {"(": 1, ")": -1}.get(statement[i], 0)
        i += 1
    columns = statement[m.end():i - 1]
    return [c.split()[0] for c in re.sub(r"\s+", " ", columns).split(",") if c.strip()]


def json_object_keys(expression):
    """The keys of the first json_build_object(...) in an SQL expression: its arguments at even positions, split at
    top-level commas (parentheses, brackets and quoted literals respected), each a literal 'name'."""
    m = re.search(r"json_build_object\(", expression)
    if not m:
        fail("the template's $1 has no json_build_object(...) item")
    args, current, depth, i = [], [], 1, m.end()
    while i < len(expression) and depth:
        c = expression[i]
        if c == "'":
            escapes = expression[i - 1:i] in ("E", "e")
            j = i + 1
            while j < len(expression):
                if escapes and expression[j] == "\\":
                    j += 2
                    continue
                if expression[j] == "'":
                    if expression[j + 1:j + 2] == "'":
                        j += 2
                        continue
                    break
                j += 1
            current.append(expression[i:j + 1])
            i = j + 1
            continue
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        if depth == 1 and c == ",":
            args.append("".join(current).strip())
            current = []
        elif depth:
            current.append(c)
        i += 1
    args.append("".join(current).strip())
    keys = args[0::2]
    bad = [k for k in keys if not re.fullmatch(r"'\w+'", k)]
    if bad or len(args) % 2:
        fail(f"the template's $1 item is not json_build_object('name', value, ...): {bad or args[-1:]}")
    return [k.strip("'") for k in keys]


def expand(root, binary, name, parts, params):
    statement = statement_text(binary, name, parts)
    used = set(re.findall(r"\$(\d+)(?!\d)", statement))
    given = set(params)
    if used != given:
        fail(f"{name} uses parameters {sorted(used, key=int)}, the template gives {sorted(given, key=int)}")
    if name == "MessageWrite.statement":
        columns, keys = recordset_columns(statement), item_keys(root)
        if sorted(columns) != sorted(keys):
            fail(f"MessageWrite: the statement's json_to_recordset columns and the keys itemRecords writes differ (columns "
                 f"only: {sorted(set(columns) - set(keys))}, keys only: {sorted(set(keys) - set(columns))})")
        named = json_object_keys(params["1"])
        if sorted(named) != sorted(columns):
            missing, extra = sorted(set(columns) - set(named)), sorted(set(named) - set(columns))
            fail(f"the template's $1 item does not match the statement's columns (missing {missing}, not columns {extra})")
    return re.sub(r"\$(\d+)(?!\d)", lambda m: "(" + params[m.group(1)] + ")", statement) + ";"


def pgbench_variables(text):
    """The `:name` references pgbench finds in an SQL command (its parseVariable rules: `::` is skipped)."""
    names, i = [], 0
    while (i := text.find(":", i)) >= 0:
        j = i + 1
        m = re.match(r"[A-Za-z0-9_\x80-\U0010ffff]+", text[j:])
        if text[j:j + 1] == ":":
            while text[j:j + 1] == ":":
                j += 1
        elif m:
            names.append(m.group(0))
            j += m.end()
        i = j
    return names


def generate(root, binary, template_path):
    with open(template_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, i = [], 0
    while i < len(lines):
        opening = re.fullmatch(r"@([\w.]+)(?:\[([\w,]*)\])?\(\s*", lines[i])
        if not opening:
            out.append(lines[i])
            i += 1
            continue
        name = opening.group(1)
        parts = [p for p in (opening.group(2) or "").split(",") if p]
        if name not in SOURCES:
            fail(f"{template_path}:{i + 1}: unknown statement {name} (known: {', '.join(SOURCES)})")
        params, current, i = {}, None, i + 1
        while i < len(lines) and lines[i].strip() != ");":
            p = re.match(r"\s*\$(\d+) := (.*)", lines[i])
            if p:
                current = p.group(1)
                if current in params:
                    fail(f"{template_path}:{i + 1}: ${current} given twice")
                params[current] = [p.group(2)]
            elif current is None:
                fail(f"{template_path}:{i + 1}: expected `$n := value` in the {name} block")
            else:
                params[current].append(lines[i])
            i += 1
        if i == len(lines):
            fail(f"{template_path}: the {name} block has no closing `);` line")
        values = {k: re.sub(r",\s*$", "", "\n".join(v).strip()) for k, v in params.items()}
        out.append(expand(root, binary, name, parts, values))
        i += 1
    text = "\n".join(out)
    defined = set(re.findall(r"^\\set\s+(\w+)", text, re.M)) | PGBENCH_BUILTINS
    sql = "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("\\"))
    unknown = sorted(set(pgbench_variables(sql)) - defined)
    if unknown:
        fail(f"pgbench would read {', '.join(':' + n for n in unknown)} as variables the script does not set "
             "(write a literal colon as \\x3a in an E'' string)")
    return text


def main():
    if len(sys.argv) != 5:
        fail("usage: send_sql.py TEMPLATE OUTPUT ROOT BINARY")
    text = generate(sys.argv[3], sys.argv[4], sys.argv[1])
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
