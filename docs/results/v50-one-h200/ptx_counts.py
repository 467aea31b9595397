#!/usr/bin/env python3
"""Instructions per kernel of two PTX files (nvcc -ptx), with registers and labels renamed alike,
so that a refactor's code can be compared kernel by kernel without SASS tools:
  ptx_counts.py before.ptx after.ptx [KERNEL_SUBSTRING]
prints `before after kernel` for every kernel whose instructions differ, and with a substring a
unified diff of that kernel's normalised instructions."""
import collections
import difflib
import re
import sys


def kernels(path):
    out = collections.OrderedDict()
    cur = None
    for line in open(path):
        if '.entry' in line:
            cur = line.split('.entry')[1].strip().split('(')[0]
            out[cur] = []
            continue
        if cur is None:
            continue
        text = line.strip()
        if not text or text.startswith(('//', '.loc', '$L', '.reg')):
            continue
        text = re.sub(r'\$L__BB\d+_\d+', 'L', text)
        text = re.sub(r'_INTERNAL_[0-9a-f]+_', '_INTERNAL_', text)  # a hash that differs per build
        out[cur].append(re.sub(r'%(r|rd|p|f|fd|rs|h|hh)\d+', '%x', text))
    return out


def main():
    a, b = kernels(sys.argv[1]), kernels(sys.argv[2])
    for k in a:
        if k not in b:
            print('only in the first:', k)
        elif a[k] != b[k]:
            print(len(a[k]), len(b[k]), k)
    if len(sys.argv) > 3:
        k = next(k for k in a if sys.argv[3] in k)
        for line in difflib.unified_diff(a[k], b.get(k, []), lineterm='', n=2):
            print(line)


if __name__ == '__main__':
    main()
