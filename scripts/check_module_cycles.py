#!/usr/bin/env python3
"""Fails when a crate's modules depend on each other in a cycle.

A module depends on another when its code (comments and `#[cfg(test)]` modules aside) names
it through a `crate::` or `super::` path. Units are a crate's top-level modules; the
resource protocols of `flotilla-services` (`service::*`) count one by one, because that
crate is layered one way (docs/architecture.md, "Module cycles"). Run from the repository
root, or with `--self-test`.
"""

import os
import re
import sys
from collections import defaultdict

# Crates whose second-level modules are units of their own: `src/<folder>` -> yes.
SPLIT = {("shared/services/src", "service")}
ROOTS = ["shared", "functions", "cli", "tests"]

PATH = re.compile(r"\b(crate|super)((?:::[a-z_][a-z0-9_]*)+)")
GROUP = re.compile(r"\b(crate|super)((?:::super)*)::\{")


def grouped(code):
    """`crate::{a::X, b}` and `super::{...}` as the paths `crate::a::X`, `crate::b`, ..."""
    for m in GROUP.finditer(code):
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        inner = code[m.end() : i - 1]
        depth, item = 0, ""
        for ch in inner + ",":
            if ch == "," and depth == 0:
                name = re.match(r"\s*([a-z_][a-z0-9_]*)", item)
                if name and name.group(1) != "self":
                    yield m.group(1), f"{m.group(2)}::{name.group(1)}"
                item = ""
                continue
            depth += {"{": 1, "}": -1}.get(ch, 0)
            item += ch


def code_of(text):
    """The text without comments and without the `#[cfg(test)]` module at the end."""
    text = re.split(r"#\[cfg\(test\)\]\s*mod\s", text)[0]
    out = []
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("//"):
            continue
        # A trailing comment (not a URL inside a string: `://`).
        line = re.sub(r"(?<![:\"])//.*$", "", line)
        out.append(line)
    return "\n".join(out)


def modules(src):
    """Module path (tuple) -> code, for every `.rs` file below a crate's `src`."""
    found = {}
    for dirpath, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            if rel and rel[0] == "bin":
                continue
            with open(path, encoding="utf-8") as f:
                found[tuple(rel)] = code_of(f.read())
    return found


def unit(src, path):
    if not path:
        return None
    if len(path) > 1 and (src, path[0]) in SPLIT:
        return "::".join(path[:2])
    return path[0]


def edges_of(src):
    mods = modules(src)
    tops = {p[0] for p in mods if p}
    edges = defaultdict(set)
    for path, code in mods.items():
        here = unit(src, path)
        if here is None:
            continue

        found = [(m.group(1), m.group(2)) for m in PATH.finditer(code)]
        for root, rest in found + list(grouped(code)):
            segs = rest.split("::")[1:]
            if root == "crate":
                target = segs
            else:
                # `super` of `a/b.rs` and of `a/b/mod.rs` alike is `a`.
                base = list(path[:-1])
                rest = segs
                while rest and rest[0] == "super":
                    base = base[:-1]
                    rest = rest[1:]
                target = base + rest
            if not target or target[0] not in tops:
                continue
            there = unit(src, tuple(target))
            if there and there != here:
                edges[here].add(there)
    return edges


def cycles(edges):
    """Each edge that lies on a cycle, as (a, b, the way back from b to a)."""
    found = []
    for a in sorted(edges):
        for b in sorted(edges[a]):
            back = way(edges, b, a)
            if back:
                found.append((a, b, back))
    return found


def way(edges, start, goal):
    seen, stack = {start}, [(start, [start])]
    while stack:
        node, trail = stack.pop()
        if node == goal:
            return trail
        for n in sorted(edges.get(node, ())):
            if n not in seen:
                seen.add(n)
                stack.append((n, trail + [n]))
    return None


def crates(root):
    for top in ROOTS:
        for dirpath, dirnames, _ in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if d not in ("target", ".venv", "node_modules")]
            if os.path.basename(dirpath) == "src" and os.path.exists(
                os.path.join(os.path.dirname(dirpath), "Cargo.toml")
            ):
                yield os.path.relpath(dirpath, root)


def self_test():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "src")
        os.makedirs(os.path.join(src, "b"))
        with open(os.path.join(src, "lib.rs"), "w") as f:
            f.write("mod a;\nmod b;\n")
        with open(os.path.join(src, "a.rs"), "w") as f:
            f.write("/// Not code: crate::b::x\nuse crate::b::Thing;\n")
        with open(os.path.join(src, "b", "mod.rs"), "w") as f:
            f.write("mod c;\n// crate::a in a comment\n")
        with open(os.path.join(src, "b", "c.rs"), "w") as f:
            f.write("fn f() { super::super::a::g() }\n")
        found = cycles(edges_of(src))
        assert [(a, b) for a, b, _ in found] == [("a", "b"), ("b", "a")], found
        with open(os.path.join(src, "b", "c.rs"), "w") as f:
            f.write("// super::super::a::g()\nfn f() {}\n")
        assert cycles(edges_of(src)) == []
        with open(os.path.join(src, "b", "c.rs"), "w") as f:
            f.write("use super::super::{x::Y, a::{g, h}};\n")
        assert [(a, b) for a, b, _ in cycles(edges_of(src))] == [("a", "b"), ("b", "a")]
    print("check_module_cycles: self-test passed")


def main():
    if "--self-test" in sys.argv:
        self_test()
        return 0
    root = os.getcwd()
    bad = 0
    for src in sorted(crates(root)):
        for a, b, back in cycles(edges_of(src)):
            print(f"{src}: {a} -> {b}, and back: {' -> '.join(back)}")
            bad += 1
    if bad:
        print(f"check_module_cycles: {bad} edges lie on module cycles")
        return 1
    print("check_module_cycles: no module cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
