#!/usr/bin/env python3
"""Re-points the book's source quotes after the source moved.

A quote in docs/ is a fenced block whose caption line, directly above the fence, links to a
file with a line range (`[…](../crates/x.rs#L10-L20)`). When code above the quoted lines
changes, the range goes stale and `cargo test -p hmdp-lab --test docs` fails. This finds each
quote's text in its file again and rewrites the range; a quote whose text is no longer in the
file is listed, for a person to rewrite (exit 1).

    python3 scripts/requote.py          # rewrite in place, list what it cannot place
    python3 scripts/requote.py --check  # change nothing; exit 1 if any range is stale
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)\s]+?)#L(\d+)(?:-L(\d+))?\)")
FENCE = re.compile(r"^(\s*)(```+|~~~+)")


def dedent(lines):
    lines = [line.rstrip() for line in lines]
    widths = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(widths, default=0)
    return [line[cut:] for line in lines]


def find(block, source):
    """Every 1-based start line where `block` equals the source's lines, dedented."""
    n = len(block)
    return [
        i + 1
        for i in range(len(source) - n + 1)
        if source[i].strip() == block[0].strip() and dedent(source[i : i + n]) == block
    ]


def quotes(lines):
    """(caption index, link match, block lines) for each quote of a document."""
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, mark = fence.groups()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(mark):
            end += 1
        caption = lines[i - 1] if i > 0 else ""
        links = [m for m in LINK.finditer(re.sub(r"`[^`]*`", "", caption))]
        if len(links) == 1:
            block = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1 : end]]
            yield i - 1, links[0], dedent(block)
        i = end + 1


def main():
    check = "--check" in sys.argv
    stale, lost = 0, []
    for doc in sorted((ROOT / "docs").rglob("*.md")):
        lines = doc.read_text(encoding="utf-8").split("\n")
        changed = False
        for at, link, block in list(quotes(lines)):
            target = (doc.parent / link.group(1)).resolve()
            if not target.is_file() or not block:
                continue
            source = target.read_text(encoding="utf-8").split("\n")
            first = int(link.group(2))
            last = int(link.group(3) or first)
            if dedent(source[first - 1 : last]) == block:
                continue
            stale += 1
            starts = find(block, source)
            where = f"{doc.relative_to(ROOT)}:{at + 1}"
            if len(starts) != 1:
                lost.append(f"{where}: {link.group(1)} ({'not found' if not starts else 'found twice'})")
                continue
            a, b = starts[0], starts[0] + len(block) - 1
            new = f"]({link.group(1)}#L{a}" + (f"-L{b})" if b != a else ")")
            print(f"{where}: #L{first}-L{last} -> #L{a}-L{b}")
            lines[at] = lines[at].replace(link.group(0), new, 1)
            changed = True
        if changed and not check:
            doc.write_text("\n".join(lines), encoding="utf-8")
    for line in lost:
        print(f"{line}: rewrite this quote by hand", file=sys.stderr)
    sys.exit(1 if lost or (check and stale) else 0)


if __name__ == "__main__":
    main()
