#!/usr/bin/env python3
"""Pastes the output of `hmdp-lab run all` into BENCHMARKS.md and the book.

Usage: scripts/lab-tables.py SQLITE_OUTPUT MYSQL_OUTPUT COMMIT

The two files are the output of `hmdp-lab run all -q` on SQLite and on MariaDB. In BENCHMARKS.md
the two code blocks after "SQLite:" and inside "<details><summary>MariaDB" of the lab's section
are replaced (the paragraph above them, which names the commit and the SQL check, is
edited by hand); in docs/*.md every code block after a line that starts with
"实测（`hmdp-lab run NAME`" gets the SQLite quote of NAME, and the commit in that line is updated.

A quote is what a chapter discusses: the experiment's heading and invariant, its table (split in
parts to fit 100 columns) and its conclusion; the list of versions and the meaning of each column
are left to the chapter's prose. The output is the lab's default, Chinese (`--lang zh`). Timelines
of `--trace` are quoted by hand: they come from another run.
"""
import re
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
sqlite_out, mysql_out, commit = Path(sys.argv[1]).read_text(), Path(sys.argv[2]).read_text(), sys.argv[3]


def sections(text):
    """Each experiment's quote, by name: a section starts at `== NAME（chapter）`."""
    found, name = {}, None
    for para in re.split(r"\n\s*\n", text.strip()):
        m = re.match(r"^== ([a-z-]+)（", para)
        if m:
            name = m.group(1)
            # The heading and the invariant; the list of versions after them stays out.
            found[name] = ["\n".join(para.split("\n")[:2])]
        elif name and (para.startswith("版本 ") or para.startswith("结论：")):
            found[name].append(para)
    return {k: "\n\n".join(v) for k, v in found.items()}


def replace_block_after(lines, start):
    """Index range of the fenced block that follows line `start`."""
    i = start + 1
    while not lines[i].startswith("```"):
        i += 1
    j = i + 1
    while not lines[j].startswith("```"):
        j += 1
    return i, j


bench = root / "BENCHMARKS.md"
lines = bench.read_text().split("\n")
for marker, text in (("SQLite:", sqlite_out), ("<details><summary>MariaDB", mysql_out)):
    start = next(n for n, l in enumerate(lines) if l.startswith(marker))
    i, j = replace_block_after(lines, start)
    lines[i + 1 : j] = text.strip().split("\n")
out = "\n".join(lines)
bench.write_text(out)

tables = sections(sqlite_out)
for doc in sorted((root / "docs").glob("*.md")):
    lines = doc.read_text().split("\n")
    changed = False
    for n, line in enumerate(lines):
        m = re.match(r"^实测（`hmdp-lab run ([a-z-]+)`", line)
        if not m:
            continue
        lines[n] = re.sub(r"commit `[0-9a-f]+`", f"commit `{commit}`", line)
        i, j = replace_block_after(lines, n)
        lines[i + 1 : j] = tables[m.group(1)].split("\n")
        changed = True
    if changed:
        doc.write_text("\n".join(lines))
        print("updated", doc.relative_to(root))
