#!/usr/bin/env python3
"""Fails when a tracked file reaches outside the repository.

A user's clone has nothing beside it, so no test, script, doc or code may read or cite a path
above the repository root. The only exception is the optional ParqDB conformance switch in
scripts/test.sh (a line naming FLOTILLA_PARQDB_CONFORMANCE_DIR), which is used only when the
directory exists. Docs also may not cite the design documents the project was built from by
number ("seed 004") or name ("API.md"): docs and comments describe the project itself.

Usage: scripts/check_self_contained.py [REPO_ROOT]   (exit 1 and a list of offending lines)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
SWITCH = "FLOTILLA_PARQDB_CONFORMANCE_DIR"
# `../shared/...`, `../../shared/...`: resolved against the file's directory and, for Rust,
# its crate directory (CARGO_MANIFEST_DIR-relative paths).
UP_REF = re.compile(r"((?:\.\./)+)([\w.-]+(?:/[\w.-]+)*)")
# Names of the brief's material, whatever the path in front of them.
BRIEF = re.compile(r"(?:\.\./)+shared/(?:seeds|specs|hooks|API\.md|DESIGN\.md|STYLE\.md|INTEROP\.md)\b")
SEED_CITATION = re.compile(r"\bseeds?[\s-]+[`'\"]?0\d\d(?:\b|_)|\bseeds/0\d\d", re.IGNORECASE)
# The brief's documents by name, bare or under a path (`shared/API.md`, the ParqDB
# `FORMAT.md`); the project's own docs are lowercase: docs/api.md, docs/parqdb.md.
BRIEF_NAME = re.compile(r"(?<![\w.-])(?:API|DESIGN|STYLE|INTEROP|FORMAT)\.md\b|/work/shared\b")
SKIP_SUFFIXES = (".lock", ".png", ".jpg", ".ico", ".woff", ".woff2", ".parquet", ".avro", ".gz")


def tracked_files():
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p]


def crate_dir(rel):
    """The nearest directory above `rel` holding a Cargo.toml (for CARGO_MANIFEST_DIR paths)."""
    d = os.path.dirname(os.path.join(ROOT, rel))
    while d.startswith(ROOT):
        if os.path.isfile(os.path.join(d, "Cargo.toml")):
            return d
        d = os.path.dirname(d)
    return ROOT


def escapes(base, ups, rest):
    target = os.path.normpath(os.path.join(base, ups, rest))
    return not (target == ROOT or target.startswith(ROOT + os.sep))


def main():
    problems = []
    for rel in tracked_files():
        if rel.endswith(SKIP_SUFFIXES) or rel == "scripts/check_self_contained.py":
            continue
        path = os.path.join(ROOT, rel)
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for n, line in enumerate(lines, 1):
            # A Rust path next to CARGO_MANIFEST_DIR is relative to the crate directory;
            # any other relative path (include_str!, docs links) to the file's directory.
            near = "".join(lines[max(0, n - 3):n])
            base = crate_dir(rel) if rel.endswith(".rs") and "CARGO_MANIFEST_DIR" in near else os.path.dirname(path)
            if SWITCH in line:
                continue
            where = f"{rel}:{n}: {line.strip()[:160]}"
            if BRIEF.search(line):
                problems.append(where)
                continue
            for m in UP_REF.finditer(line):
                if escapes(base, m.group(1), m.group(2)):
                    problems.append(where)
                    break
            else:
                if SEED_CITATION.search(line) or BRIEF_NAME.search(line):
                    problems.append(where)
    if problems:
        print("these tracked lines reach outside the repository or cite the design documents by number:")
        print("\n".join(f"  {p}" for p in problems))
        return 1
    print(f"self-contained: no tracked file reaches outside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
