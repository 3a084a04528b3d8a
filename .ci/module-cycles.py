#!/usr/bin/env python3
"""Import circles between the source files of each crate.

Reads every `crate::…` and `super::…` path in a crate's `src/` (use declarations and inline
paths, comments, strings and a trailing `#[cfg(test)] mod` skipped) and maps it to the file
that owns the module it names: the imports that run across or up the module tree. A parent's
bare path into its own child module (`child::f`) is the tree itself and is not counted.
Prints each strongly connected set of files (a circle) and exits 1 when a set is larger than
`--max` files, or when any circle lies in a crate named by `--strict`.
"""
import argparse
import os
import re
import sys


def module_files(src):
    """module path tuple -> file path, for the crate rooted at src."""
    out = {}
    for root, _dirs, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            p = os.path.join(root, f)
            rel = os.path.relpath(p, src)[:-3].split(os.sep)
            if rel[-1] in ("lib", "main") and len(rel) == 1:
                mod = ()
            elif rel[-1] == "mod":
                mod = tuple(rel[:-1])
            else:
                mod = tuple(rel)
            if rel[0] == "bin":
                continue
            out[mod] = p
    return out


COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING = re.compile(r'r#*"(?:.|\n)*?"#*|"(?:\\.|[^"\\])*"')
PATH = re.compile(r"\b(crate|super)((?:::\w+)+)")
GROUP = re.compile(r"\b(crate|super)((?:::\w+)*)::\{([^;]*?)\}\s*;", re.S)


def owner(files, mod):
    while mod not in files and mod:
        mod = mod[:-1]
    return files.get(mod)


def targets(files, here, base, rest):
    if base == "crate":
        start = ()
    else:
        start = here[:-1]
        while rest and rest[0] == "super":
            start, rest = start[:-1], rest[1:]
    return owner(files, start + tuple(rest))


def edges(files):
    inv = {v: k for k, v in files.items()}
    g = {p: set() for p in files.values()}
    for path, mod in inv.items():
        text = open(path, encoding="utf-8").read()
        text = STRING.sub('""', COMMENT.sub("", text))
        # `#[cfg(test)] mod tests { … }` at the end of a file: test code, not the module's imports.
        cut = re.search(r"#\[cfg\(test\)\]\s*mod \w+\s*\{", text)
        if cut:
            text = text[: cut.start()]
        here = mod if os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs") else mod
        # For a non-mod file `a/b.rs`, `super` is `a`; for `a/b/mod.rs`, `super` is `a` too.
        ctx = here + ("_",) if os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs") else here
        for m in GROUP.finditer(text):
            base, head, inner = m.group(1), m.group(2), m.group(3)
            head = [s for s in head.split("::") if s]
            for item in re.split(r"[,{}]", inner):
                item = item.strip().split(" as ")[0].strip()
                if not item or item == "self":
                    t = targets(files, ctx, base, head)
                else:
                    t = targets(files, ctx, base, head + [s for s in item.split("::") if s])
                if t and t != path:
                    g[path].add(t)
        for m in PATH.finditer(text):
            base, rest = m.group(1), [s for s in m.group(2).split("::") if s]
            t = targets(files, ctx, base, rest)
            if t and t != path:
                g[path].add(t)
    return g


def sccs(g):
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
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
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=2, help="largest circle allowed (files)")
    ap.add_argument("--strict", action="append", default=[], help="crate with no circle allowed")
    ap.add_argument("--report", action="store_true", help="print, never fail")
    ap.add_argument("crates", nargs="*", default=None)
    a = ap.parse_args()
    crates = a.crates or sorted(
        os.path.join("crates", c) for c in os.listdir("crates") if os.path.isdir(os.path.join("crates", c, "src"))
    )
    bad = 0
    for c in crates:
        files = module_files(os.path.join(c, "src"))
        for comp in sccs(edges(files)):
            name = os.path.basename(c)
            fail = len(comp) > a.max or name in a.strict
            bad += fail
            print(f"{'FAIL' if fail else 'ok  '} {name}: {len(comp)} files: "
                  + ", ".join(os.path.relpath(p, os.path.join(c, "src")) for p in comp))
    if bad and not a.report:
        print(f"{bad} circle(s) over the limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
