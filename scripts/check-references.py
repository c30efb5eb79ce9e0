#!/usr/bin/env python3
"""Fails when the code cites something a reader of the repository cannot open (Python 3 stdlib).

The code explains itself by citing pages of docs/ (with an anchor, e.g. `docs/events.md#polling-the-log`) or
README.md, or by saying the rule in words. It must not cite files that live outside the repository (the team's API
contract and design notes), nor number sections of such a file with a section sign.

usage: scripts/check-references.py   exit status 1, listing file:line, when a file of Sources/, Tests/, scripts/ or
                                      openapi/src/
                                       - names the contract or the design notes as a file (the upper-case names
                                         of PATTERN below, case-sensitive);
                                       - holds a section sign;
                                       - cites a page of docs/ (or README.md) that does not exist, or an anchor
                                         that names no heading of that page.

Relative links of README.md and docs/*.md are checked by `scripts/api-docs.py check`.
"""

import os
import importlib.util
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRS = ["Sources", "Tests", "scripts", "openapi/src"]
EXTENSIONS = (".swift", ".py", ".sh", ".json", ".yaml", ".yml", ".md", ".txt", ".sql", ".js", ".html", ".css")

# Built from parts so that this file does not match itself.
SECTION_SIGN = "\u00a7"
OUTSIDE_FILES = ["API" + ".md", "DESIGN" + ".md"]
PATTERN = re.compile(r"(?<!\w)(?:%s)\b|%s" % ("|".join(re.escape(n) for n in OUTSIDE_FILES), SECTION_SIGN))
# A page of docs/ or README.md, with or without an anchor, as the code cites it (a path from the repository's root).
CITATION = re.compile(r"(?<![\w/.-])((?:docs/[\w.-]+\.md|README\.md)(?:#[\w-]+)?)")


def _api_docs():
    """scripts/api-docs.py as a module: its anchor rule is the one every docs link is checked with."""
    spec = importlib.util.spec_from_file_location("api_docs", os.path.join(os.path.dirname(os.path.abspath(__file__)), "api-docs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def anchors(path, cache={}):
    """The GitHub anchors of a Markdown file's headings (the rule of scripts/api-docs.py)."""
    if path not in cache:
        cache[path] = _api_docs().anchors(path)
    return cache[path]


def files():
    for d in DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, d)):
            dirnames[:] = sorted(n for n in dirnames if not n.startswith(".") and n != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(EXTENSIONS):
                    yield os.path.join(dirpath, name)


def main():
    problems = []
    checked = 0
    for path in files():
        rel = os.path.relpath(path, ROOT)
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
        except UnicodeDecodeError:
            continue
        checked += 1
        for number, line in enumerate(lines, 1):
            for match in PATTERN.finditer(line):
                if match.group(0) == SECTION_SIGN:
                    what = "a section sign (a numbered section of a file outside the repository)"
                else:
                    what = "%s (a file outside the repository)" % match.group(0)
                problems.append("%s:%d: %s: cite a page of docs/ or say the rule in words\n    %s"
                                % (rel, number, what, line.strip()))
            for match in CITATION.finditer(line):
                target = match.group(1).rstrip(".")
                page, _, fragment = target.partition("#")
                full = os.path.join(ROOT, page)
                if not os.path.isfile(full):
                    problems.append("%s:%d: cites %s, which does not exist" % (rel, number, page))
                elif fragment and fragment not in anchors(full):
                    problems.append("%s:%d: cites %s, but #%s names no heading of %s"
                                    % (rel, number, target, fragment, page))
    for p in problems:
        print(p)
    if problems:
        print("references: %d problem(s) in %s" % (len(problems), ", ".join(DIRS)))
        return 1
    print("references: %d files of %s cite only pages of the repository" % (checked, ", ".join(DIRS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
