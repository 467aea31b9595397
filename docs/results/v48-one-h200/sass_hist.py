#!/usr/bin/env python3
"""Executed SASS instructions of one kernel from `ncu --page source --csv --print-source cuda,sass`
(SourceCounters): each instruction counted once by its address (the CUDA view lists an inlined
instruction under several lines), by opcode and spread over the source lines it sits under.
usage: sass_hist.py SRC.csv [ITEMS]   (ITEMS: divide the per-line counts by the kernel's items)"""
import collections
import csv
import sys

rows = list(csv.reader(open(sys.argv[1])))
items = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
hdr = None
seen = {}
lines = collections.defaultdict(set)
cur = None
f = ""
for r in rows:
    if not r:
        continue
    if r[0] == "File Path":
        f = r[1].split("/")[-1]
        continue
    if r[0] == "Line No":
        hdr = r
        ie = hdr.index("Instructions Executed")
        continue
    if hdr is None or len(r) <= ie:
        continue
    if r[0]:
        cur = f + ":" + r[0]
        continue
    if r[2].startswith("0x"):
        seen[r[2]] = (int(r[ie]) if r[ie].isdigit() else 0, r[3].strip())
        lines[r[2]].add(cur)
total = sum(n for n, _ in seen.values())
print(f"executed warp instructions {total} ({total / items:.0f} an item), {len(seen)} in the code")
ops = collections.Counter()
for n, text in seen.values():
    t = text.split()
    ops[(t[1] if t[0].startswith("@") else t[0]).split(".")[0]] += n
for o, n in ops.most_common(25):
    print(f"{o:10s} {n:9d} {100 * n / total:5.1f}%")
by_line = collections.Counter()
for a, (n, _) in seen.items():
    for l in lines[a]:
        by_line[l] += n / len(lines[a])
for l, n in by_line.most_common(40):
    print(f"{n / items:9.1f} {l}")
