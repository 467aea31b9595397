#!/usr/bin/env python3
"""Every relative link of README.md and docs/*.md resolves: the file exists and, for a link with
a #fragment into a Markdown file, the file has a heading with that anchor (GitHub's rule:
lower case, punctuation dropped, spaces to hyphens, -1, -2 ... for repeats). Headings and links
inside fenced code blocks do not count. Prints each broken link and exits 1 when there is one.

    python3 tests/docs_links.py [REPO_ROOT]
"""
import glob
import os
import re
import sys

# A link's target may begin on the line after its "](" (a wrapped paragraph), so the prose of a
# file is searched as one text.
LINK = re.compile(r"\]\(\s*([^)\s]+)\)")


def prose_lines(path):
    """The lines of a Markdown file outside fenced code blocks."""
    fenced = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if not fenced:
                yield line


def slug(heading):
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    for line in prose_lines(path):
        m = re.match(r"#{1,6} (.*)", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    files = [os.path.join(root, "README.md")]
    files += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    cache, broken, checked = {}, [], 0
    for path in files:
        for target in LINK.findall("".join(prose_lines(path))):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            checked += 1
            file_part, _, fragment = target.partition("#")
            dest = path
            if file_part:
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
            where = f"{os.path.relpath(path, root)}: ({target})"
            if not os.path.exists(dest):
                broken.append(f"{where}: no file {os.path.relpath(dest, root)}")
                continue
            if fragment and dest.endswith(".md"):
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if fragment not in cache[dest]:
                    broken.append(f"{where}: no heading with anchor #{fragment}")
    for b in broken:
        print(b)
    print(f"docs_links: {checked} links checked in {len(files)} files, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
