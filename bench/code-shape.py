#!/usr/bin/env python3
"""How the code base reads (issue "a house a newcomer reads in an hour"): non-test
functions over 150 lines and source files over 1,500 lines under crates/*/src.

Usage: python3 bench/code-shape.py [--list]

A function is measured from its `fn` line to its closing brace, by brace matching
outside strings, chars and comments; a `#[cfg(test)] mod` and what follows it
is test code and left out. Prints one summary line per measure, and with --list
every function and file over its limit."""

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
    print(f"non-test functions over {FN_LIMIT} lines: {len(fns)}")
    print(f"source files over {FILE_LIMIT} lines: {len(big)}")
    if "--list" in sys.argv:
        for n, s in sorted(fns, reverse=True):
            print(f"  fn {n:5d} {s}")
        for n, s in sorted(big, reverse=True):
            print(f"  file {n:5d} {s}")


main()
