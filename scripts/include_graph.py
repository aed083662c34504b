#!/usr/bin/env python3
"""include_graph.py: the include graph of the library's modules, and its cycles.

A module is a .c file and its .h (src/text/bpe.c and src/text/bpe.h are one module,
text/bpe). Module A depends on module B when a file of A includes B's header. A cycle
is a set of modules that depend on each other around a loop: then neither can be read,
tested or replaced without the other, which is what the folders are cut to avoid.

usage: include_graph.py [--root DIR] [--dot]   exit 1 when there is a cycle
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def modules(root):
    """{module: [files]} for every .c/.h under root/src and root/include."""
    mods = {}
    for top in ("src", "include"):
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in names:
                if n.endswith((".c", ".h")):
                    path = os.path.join(d, n)
                    rel = os.path.relpath(path, os.path.join(root, top))
                    mods.setdefault(top + ":" + rel[:-2], []).append(path)
    return mods


def resolve(root, including, name, mods):
    """The module a quoted include names: next to the including file first, then the
    -I directories (src, include), as the compiler looks."""
    for base in (os.path.dirname(including), os.path.join(root, "src"),
                 os.path.join(root, "include")):
        path = os.path.normpath(os.path.join(base, name))
        if os.path.exists(path):
            for top in ("src", "include"):
                prefix = os.path.join(root, top) + os.sep
                if path.startswith(prefix):
                    key = top + ":" + os.path.relpath(path, prefix)[:-2]
                    return key if key in mods else None
            return None
    return None  # generated (vk_spirv.h) or outside the tree


def graph(root):
    mods = modules(root)
    edges = {m: set() for m in mods}
    for m, files in mods.items():
        for f in files:
            with open(f, encoding="utf-8", errors="replace") as fh:
                for name in INCLUDE.findall(fh.read()):
                    dep = resolve(root, f, name, mods)
                    if dep and dep != m:
                        edges[m].add(dep)
    return edges


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def main():
    args = sys.argv[1:]
    root = os.path.abspath(args[args.index("--root") + 1] if "--root" in args else ".")
    edges = graph(root)
    if "--dot" in args:
        print("digraph includes {")
        for m in sorted(edges):
            for d in sorted(edges[m]):
                print(f'  "{m}" -> "{d}";')
        print("}")
        return 0
    found = cycles(edges)
    for comp in found:
        loop = [m for m in comp]
        print("include cycle: " + " <-> ".join(loop))
        for m in comp:
            deps = sorted(d for d in edges[m] if d in comp)
            print(f"  {m} includes {', '.join(deps)}")
    print(f"{len(edges)} modules, {sum(len(e) for e in edges.values())} dependencies, "
          f"{len(found)} cycles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
