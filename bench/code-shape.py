#!/usr/bin/env python3
"""How the code base reads ("a house a newcomer reads in an hour"): non-test
functions over 150 lines, source files over 1,500 lines and file-level import
circles under crates/*/src.

Usage: python3 bench/code-shape.py [--list]

A function is measured from its `fn` line to its closing brace, by brace matching
outside strings, chars and comments; a `#[cfg(test)] mod` and what follows it
is test code and left out. Prints one summary line per measure, and with --list
every function and file over its limit and every import circle.

Import circles: per crate, a graph with one node a source file and an arrow
from a file to each file it names through `crate::` (in a `use`, brace groups
expanded, or as a path in code) or `super::`, each path resolved to the file of
its longest module prefix. A `mod x;` declaration is not an arrow: a parent
declaring its children is the tree, not a dependency. Test code (as above, and
files declared by `#[cfg(test)] mod x;`) is left out. A circle is a strongly
connected component of two or more files; it is printed as its files and one
cycle through all of them where there is one."""

import pathlib
import re
import sys

FN_LIMIT = 150
FILE_LIMIT = 1500
FN_START = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def code_only(text):
    """The text with strings, chars and comments blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = '"' + hashes
            j = text.find(end, i + 2 + len(hashes))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x..'", text[i:i + 12]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x..'", text[i:i + 12])
            out.append(" " * len(m.group(0)))
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def long_functions(path):
    text = path.read_text()
    cut = re.search(r"#\[cfg\(test\)\]\s*\n\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text)
    if cut:
        text = text[: cut.start()]
    lines = code_only(text).split("\n")
    found = []
    for start, line in enumerate(lines):
        m = FN_START.match(line)
        if not m:
            continue
        depth, opened = 0, False
        for end in range(start, len(lines)):
            for ch in lines[end]:
                if ch == "{":
                    depth += 1
                    opened = True
                elif ch == "}":
                    depth -= 1
                elif ch == ";" and not opened and depth == 0:
                    break
            else:
                if opened and depth == 0:
                    length = end - start + 1
                    if length > FN_LIMIT:
                        found.append((length, f"{path}:{start + 1} {m.group(6)}"))
                    break
                continue
            break
    return found


def module_path(rel):
    """The module path of a file relative to its crate's src: lib.rs -> (),
    a.rs and a/mod.rs -> ("a",), a/b.rs -> ("a", "b")."""
    parts = list(rel.with_suffix("").parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts.pop()
    return tuple(parts)


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"] (spaces removed)."""
    tree = tree.replace(" ", "").replace("\n", "")
    i = tree.find("{")
    if i < 0:
        return [tree]
    depth, parts, start = 0, [], i + 1
    for j in range(i, len(tree)):
        if tree[j] == "{":
            depth += 1
        elif tree[j] == "}":
            depth -= 1
            if depth == 0:
                parts.append(tree[start:j])
                break
        elif tree[j] == "," and depth == 1:
            parts.append(tree[start:j])
            start = j + 1
    prefix = tree[:i]
    out = []
    for part in parts:
        if part:
            out += [prefix + p for p in expand_use(part)]
    return out


def test_only_children(text):
    return set(re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text))


def import_graph(src):
    """{file: set(files it names)} for one crate's src directory."""
    files = {}
    for f in sorted(src.glob("**/*.rs")):
        files[module_path(f.relative_to(src))] = f
    skip = set()
    for mod, f in files.items():
        for child in test_only_children(f.read_text()):
            skip.add(mod + (child,))
    for mod in list(files):
        if any(mod[: len(s)] == s for s in skip):
            del files[mod]

    def resolve(path):
        for n in range(len(path), -1, -1):
            if path[:n] in files:
                return files[path[:n]]
        return None

    graph = {}
    for mod, f in files.items():
        text = f.read_text()
        cut = re.search(r"#\[cfg\(test\)\]\s*\n\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text)
        if cut:
            text = text[: cut.start()]
        code = code_only(text)
        paths = []
        for m in re.finditer(r"\buse\s+([^;]*);", code):
            paths += expand_use(m.group(1))
        body = re.sub(r"\buse\s+[^;]*;", "", code)
        paths += re.findall(r"(?<![\w:])((?:crate|super)(?:::\w+)+)", body)
        # A file's own module: super:: from a.rs or a/mod.rs means the parent.
        targets = set()
        for p in paths:
            segs = p.split("::")
            if segs[0] == "crate":
                base, rest = (), segs[1:]
            elif segs[0] == "super":
                base = mod
                while segs and segs[0] == "super":
                    base, segs = base[:-1], segs[1:]
                rest = segs
            else:
                continue
            rest = [s for s in rest if s not in ("self", "*")]
            target = resolve(base + tuple(rest))
            if target is not None and target != f:
                targets.add(target)
        graph[f] = targets
    return graph


def circles(graph):
    """Strongly connected components of two or more nodes (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def one_cycle(graph, comp):
    """A shortest path from the component's first file back to itself, to show
    how the circle closes."""
    members, start = set(comp), comp[0]
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for node in frontier:
            for t in sorted(graph[node]):
                if t == start:
                    path = [node]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return [start] + list(reversed(path))[1:] + [start]
                if t in members and t not in prev:
                    prev[t] = node
                    nxt.append(t)
        frontier = nxt
    return comp


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    files = sorted(root.glob("crates/*/src/**/*.rs"))
    fns, big = [], []
    for f in files:
        rel = f.relative_to(root)
        fns += [(n, s.replace(str(f), str(rel))) for n, s in long_functions(f)]
        count = f.read_text().count("\n")
        if count > FILE_LIMIT:
            big.append((count, str(rel)))
    rings = []
    for src in sorted(root.glob("crates/*/src")):
        graph = import_graph(src)
        rings += [(comp, one_cycle(graph, comp)) for comp in circles(graph)]
    print(f"non-test functions over {FN_LIMIT} lines: {len(fns)}")
    print(f"source files over {FILE_LIMIT} lines: {len(big)}")
    print(f"import circles: {len(rings)}")
    if "--list" in sys.argv:
        for n, s in sorted(fns, reverse=True):
            print(f"  fn {n:5d} {s}")
        for n, s in sorted(big, reverse=True):
            print(f"  file {n:5d} {s}")
        for comp, cycle in rings:
            print("  circle " + " ".join(str(f.relative_to(root)) for f in comp))
            print("    e.g. " + " -> ".join(str(f.relative_to(root)) for f in cycle))


main()
