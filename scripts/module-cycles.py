#!/usr/bin/env python3
"""Import cycles between a crate's modules (issue 34: the recorder's layering).

    scripts/module-cycles.py [CRATE_SRC_DIR] [--check]      (default: recorder/src)

Reads every .rs file under the directory, takes `crate::a::b`, `super::...` and `self::...` paths
(grouped imports such as `use super::{a, b::c}` expanded) as edges from its module to the longest
module path they name — or, for a path that names an item of a module rather than a module (a
child using its parent's `super::lock`), to that module — and prints the strongly connected
components of more than one module (each a cycle of imports), largest first, then the edges
between top-level modules that lie on a cycle, with how many references each has: the places
to cut. A parent's `mod child;` is no edge; its uses of the child's items are. Comments and
inline `#[cfg(test)]` modules are left out. Text matching, not a Rust parser: a path inside a
string literal counts.
--check exits 1 when there is a cycle (CI holds the recorder at none).
"""
import collections
import os
import re
import sys


def modules(src):
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if f.endswith(".rs"):
                path = os.path.relpath(os.path.join(root, f), src)
                name = path[:-3]
                if name.endswith("/mod"):
                    name = name[:-4]
                if name in ("lib", "main"):
                    continue
                mods[name.replace("/", "::")] = os.path.join(src, path)
    return mods


def without_comments(text):
    """The source without `/* */` blocks and `//` line comments (outside string literals)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    out = []
    for line in text.split("\n"):
        quoted, i = False, 0
        while i < len(line):
            c = line[i]
            if c == "\\" and quoted:
                i += 2
                continue
            if c == '"':
                quoted = not quoted
            elif not quoted and line.startswith("//", i):
                line = line[:i]
                break
            i += 1
        out.append(line)
    return "\n".join(out)


def expand(path):
    """`a::{b, c::{d, e}}` as the paths it names: a::b, a::c::d, a::c::e."""
    path = path.replace(" ", "").replace("\n", "")
    i = path.find("{")
    if i < 0:
        return [path]
    depth, parts, start = 0, [], i + 1
    for j in range(i, len(path)):
        if path[j] == "{":
            depth += 1
        elif path[j] == "}":
            depth -= 1
            if depth == 0:
                parts.append(path[start:j])
                break
        elif path[j] == "," and depth == 1:
            parts.append(path[start:j])
            start = j + 1
    head = path[:i]
    return [q for p in parts if p for q in expand(head + p)]


def without_tests(text):
    """The source without its inline `#[cfg(test)] mod NAME { ... }` modules (test-only imports)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*mod\s+[A-Za-z_][A-Za-z0-9_]*\s*\{", text)
        if not m:
            return text
        depth, j = 0, m.end() - 1
        while j < len(text):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        text = text[: m.start()] + text[j + 1 :]


IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def paths(text):
    """Every `crate::`, `super::` and `self::` path in the source, grouped imports expanded."""
    found = []
    for u in re.findall(r"\buse\s+([^;]*);", text):
        found.extend(p for p in expand(u) if re.match(r"(crate|super|self)::", p))
    rest = re.sub(r"\buse\s+[^;]*;", " ", text)
    found.extend(re.findall(r"\b(?:crate|super|self)(?:::" + IDENT + r")+", rest))
    return found


def edges(mods):
    e = collections.defaultdict(collections.Counter)
    for m, f in mods.items():
        text = without_tests(without_comments(open(f, encoding="utf-8").read()))
        parts = m.split("::")
        is_mod = f.endswith("mod.rs")
        for p in paths(text):
            segs = [x.split(" as ")[0] for x in p.split("::")]
            if segs[0] == "crate":
                base, segs = [], segs[1:]
            else:
                base = list(parts)
                if segs[0] == "self":
                    segs = segs[1:]
                    if not is_mod:
                        base = parts  # self:: in a file module: its own (inline) children
                else:
                    while segs and segs[0] == "super":
                        base, segs = base[:-1], segs[1:]
            # The longest module the path names; a path naming an item: the module holding it.
            target = None
            for k in range(len(segs), -1, -1):
                cand = "::".join(base + segs[:k])
                if cand in mods:
                    target = cand
                    break
            if target and target != m:
                e[m][target] += 1
    return e


def components(nodes, e):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(100000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in e.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def main():
    args = [a for a in sys.argv[1:] if a != "--check"]
    src = args[0] if args else "recorder/src"
    mods = modules(src)
    e = edges(mods)
    cycles = sorted((c for c in components(sorted(mods), e) if len(c) > 1), key=len, reverse=True)
    print(f"{len(mods)} modules; {sum(len(c) for c in cycles)} of them in {len(cycles)} cycle(s)")
    for c in cycles:
        print(f"  {len(c)}: {' '.join(sorted(c))}")
    top = lambda m: m.split("::")[0]
    te = collections.defaultdict(collections.Counter)
    for a, bs in e.items():
        for b, n in bs.items():
            if top(a) != top(b):
                te[top(a)][top(b)] += n
    reach = {}
    for t in te:
        seen, todo = set(), list(te[t])
        while todo:
            u = todo.pop()
            if u not in seen:
                seen.add(u)
                todo.extend(te.get(u, ()))
        reach[t] = seen
    print("edges between top-level modules on a cycle (references):")
    for a in sorted(te):
        for b, n in sorted(te[a].items()):
            if a in reach.get(b, ()):
                print(f"  {a} -> {b} ({n})")
    # --check: a cycle is an error (CI holds the recorder at none).
    if "--check" in sys.argv[1:] and cycles:
        sys.exit(1)


if __name__ == "__main__":
    main()
