"""Warp-stall reasons of a kernel, summed over its source lines, from an ncu source page exported as
CSV (the same export as ../v23-one-h200/hotspots.py reads):

    python3 stall_totals.py K-cuda-sass.csv [...]

prints, per file, the total samples and the eight largest reasons as shares. An inlined line's
samples also appear at each call site above it, so the totals count some samples more than once;
the shares are what this is for."""
import collections
import csv
import sys

for f in sys.argv[1:]:
    hdr = None
    tot = collections.Counter()
    for r in csv.reader(open(f)):
        if not r:
            continue
        if r[0] == 'Line No':
            hdr = r
            continue
        if hdr is None or r[0] in ('File Path', 'Function Name') or not r[0].isdigit():
            continue
        for i, h in enumerate(hdr):
            if h.startswith('stall_') and 'Not Issued' not in h:
                try:
                    tot[h[6:]] += int(float(r[i] or 0))
                except ValueError:
                    pass
    s = sum(tot.values())
    print(f.split('/')[-1], s, ' '.join(f"{k}={100 * v / s:.0f}%" for k, v in tot.most_common(8)))
