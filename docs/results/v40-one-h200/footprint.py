"""A kernel's executed code footprint, from an ncu source page exported as CSV (SASS view).

    ncu --import REPORT.ncu-rep --page source --csv --print-source sass > K.csv
    python3 footprint.py K.csv

prints, per function in the CSV: SASS instructions, those executed at least once, the distinct
128-byte lines they lie in (what an SM must fetch the first time it runs that path: v40's
icache_probe.cu measured about 11 cycles a line from L2 and 50 from HBM), and the warp
instructions executed."""
import csv, sys

rows = list(csv.reader(open(sys.argv[1])))
fn = None
hdr = None
stats = {}
for r in rows:
    if not r:
        continue
    if r[0] in ('Function Name', 'Kernel Name') and len(r) > 1:
        fn = r[1][:90]
        continue
    if 'Address' in r and any('Instructions Executed' in h for h in r):
        hdr = r
        ia = r.index('Address')
        ie = next(i for i, h in enumerate(r) if h.startswith('Instructions Executed'))
        continue
    if hdr is None or len(r) <= max(ia, ie):
        continue
    try:
        addr = int(r[ia], 16)
    except ValueError:
        continue
    try:
        n = int(float(r[ie] or 0))
    except ValueError:
        n = 0
    s = stats.setdefault(fn, [0, 0, set(), 0])
    s[0] += 1
    if n > 0:
        s[1] += 1
        s[2].add(addr // 128)
        s[3] += n
for fn, (total, executed, lines, warp_insts) in stats.items():
    print(f"{fn}: {total} SASS instructions ({total * 16 // 1024} KB), {executed} executed "
          f"({executed * 16 // 1024} KB) in {len(lines)} lines of 128 B; {warp_insts} warp "
          f"instructions executed")
