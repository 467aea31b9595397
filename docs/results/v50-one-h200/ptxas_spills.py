#!/usr/bin/env python3
"""Registers and spills per kernel from `ptxas -v` output:
  ptxas -arch=sm_90 -O3 -v FILE.ptx -o /dev/null 2> LOG; ptxas_spills.py LOG [REGEX]
prints `registers (stack, spill stores, spill loads) kernel`."""
import re
import sys

cur, out = None, {}
for line in open(sys.argv[1]):
    m = re.search(r"Compiling entry function '(\S+)'", line)
    if m:
        cur = m.group(1)
        continue
    m = re.search(r'(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads', line)
    if m and cur:
        out.setdefault(cur, {})['spill'] = m.groups()
    m = re.search(r'Used (\d+) registers', line)
    if m and cur:
        out.setdefault(cur, {})['regs'] = m.group(1)
for k in sorted(out):
    if re.search(sys.argv[2] if len(sys.argv) > 2 else '.', k):
        print(out[k].get('regs'), out[k].get('spill'), k)
