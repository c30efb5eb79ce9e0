#!/usr/bin/env python3
"""Extracts the examples of Markdown pages (```sh blocks), in the order given and in page order, into a bash script
that runs each one and checks it: a curl example must answer 2xx, or the status written after `# →` on its line
(`# → 404`); a `.build/release/parley …` command must exit 0, or the status written as `# → exit N`. Plain
variable assignments (`NAME=$(curl …)`) run as they are, for later examples to use. Blocks fenced without `sh` (the
server's own start, streams that never end) are not run.

usage: readme_examples.py README.md docs/tutorial.md > examples.sh"""
import re
import sys

PARLEY_BINARY = ".build/release/parley "

print("set -euo pipefail")
# README_SMOKE_BODIES=1 prints the start of every answer, to read what each example really shows.
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
  if [ "${README_SMOKE_BODIES:-0}" = 1 ]; then head -c 600 /tmp/parley-example-body | tr '\n' ' '; echo; fi
}
run_command() {
  local expected="$1"; shift
  local cmd="$1"
  local status=0
  eval "$cmd" >/tmp/parley-example-body 2>&1 || status=$?
  [ "$status" = "$expected" ] || { echo "FAILED: expected exit $expected, got $status: $cmd"; cat /tmp/parley-example-body; exit 1; }
  echo "ok exit $status  ${cmd:0:100}"
  if [ "${README_SMOKE_BODIES:-0}" = 1 ]; then head -c 600 /tmp/parley-example-body | tr '\n' ' '; echo; fi
}''')


def shell_quoted(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


def local_address(command):
    # Examples address the default listen address; the smoke run listens elsewhere.
    return command.replace("http://127.0.0.1:8080", "$PARLEY").replace("http://localhost:8080", "$PARLEY")


for page in sys.argv[1:]:
    text = open(page, encoding="utf-8").read()
    print("echo '== %s'" % page)
    for block in re.findall(r"```(?:sh|bash|console)\n(.*?)```", text, re.S):
        # Join continuation lines, then keep the commands (and plain variable assignments used by later examples).
        for line in block.replace("\\\n", " ").splitlines():
            stripped = line.strip()
            if stripped.startswith("$ "):
                stripped = stripped[2:]
            if re.match(r"^[A-Z_]+=\$\(", stripped):
                print(local_address(stripped.replace("curl ", "curl -sf ", 1)))
                continue
            expected = re.search(r"#\s*→\s*(exit\s+)?(\d{1,3})\s*$", stripped)
            command = local_address(re.sub(r"\s+#.*$", "", stripped))
            if stripped.startswith(PARLEY_BINARY):
                print("run_command %s %s" % (expected.group(2) if expected and expected.group(1) else "0", shell_quoted(command)))
            elif stripped.startswith("curl "):
                status = expected.group(2) if expected and not expected.group(1) else ""
                print("run_example %s %s" % (shell_quoted(status), shell_quoted(command)))
