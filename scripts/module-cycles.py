#!/usr/bin/env python3
"""Import cycles between a crate's modules (issue 34: the recorder's layering).

    scripts/module-cycles.py [CRATE_SRC_DIR]      (default: recorder/src)

Reads every .rs file under the directory, takes `crate::a::b` and `super::...` paths as edges
from its module to the longest module path they name, and prints the strongly connected
components of more than one module (each a cycle of imports), largest first, then the edges
between top-level modules that lie on a cycle, with how many references each has: the places
to cut. Text matching, not a Rust parser: a path inside a comment or string counts too.
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


def edges(mods):
    e = collections.defaultdict(collections.Counter)
    for m, f in mods.items():
        text = open(f, encoding="utf-8").read()
        parts = m.split("::")
        refs = [(list(), r) for r in re.findall(r"crate::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)", text)]
        is_mod = f.endswith("mod.rs")
        for r in re.findall(r"\bsuper::((?:super::)*[a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)", text):
            segs = r.split("::")
            base = parts if is_mod else parts[:-1]
            base = base[:-1] if is_mod else base
            while segs and segs[0] == "super":
                base, segs = base[:-1], segs[1:]
            refs.append((base, "::".join(segs)))
        for base, r in refs:
            segs = r.split("::")
            for k in range(len(segs), 0, -1):
                cand = "::".join(base + segs[:k])
                if cand in mods:
                    if cand != m:
                        e[m][cand] += 1
                    break
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
    src = sys.argv[1] if len(sys.argv) > 1 else "recorder/src"
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


if __name__ == "__main__":
    main()
