#!/usr/bin/env python3
"""Extracts the curl examples of README.md (```sh blocks) into a bash script that runs each one and checks
its HTTP status: 2xx, or the status written after `# →` on the example's first line."""
import re
import sys

text = open(sys.argv[1], encoding="utf-8").read()
blocks = re.findall(r"```(?:sh|bash|console)\n(.*?)```", text, re.S)
print("set -euo pipefail")
print(r'''run_example() {
  local expected="$1"; shift
  local cmd="$1"
  local out status
  out=$(eval "$cmd -s -o /dev/stderr -w '%{http_code}'" 2>/tmp/parley-example-body) || { echo "FAILED (curl error): $cmd"; cat /tmp/parley-example-body; exit 1; }
  status="$out"
  if [ -n "$expected" ]; then
    [ "$status" = "$expected" ] || { echo "FAILED: expected $expected, got $status: $cmd"; cat /tmp/parley-example-body; exit 1; }
  else
    case "$status" in 2??) ;; *) echo "FAILED: status $status: $cmd"; cat /tmp/parley-example-body; exit 1;; esac
  fi
  echo "ok $status  ${cmd:0:100}"
}''')
for block in blocks:
    # Join continuation lines, then keep curl commands (and plain variable assignments used by later examples).
    lines = block.replace("\\\n", " ").splitlines()
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("$ "):
            stripped = stripped[2:]
        if re.match(r"^[A-Z_]+=\$\(", stripped):
            assignment = stripped.replace("curl ", "curl -sf ", 1)
            print(assignment.replace("http://127.0.0.1:8080", "$PARLEY").replace("http://localhost:8080", "$PARLEY"))
            continue
        if not stripped.startswith("curl "):
            continue
        expected = ""
        m = re.search(r"#\s*→\s*(\d{3})", stripped)
        if m:
            expected = m.group(1)
        cmd = re.sub(r"\s*#.*$", "", stripped)
        # Examples address the default listen address; the smoke run listens elsewhere.
        cmd = cmd.replace("http://127.0.0.1:8080", "$PARLEY").replace("http://localhost:8080", "$PARLEY")
        print("run_example %s %s" % (repr(expected) if expected else "''", "'" + cmd.replace("'", "'\"'\"'") + "'"))
