"""v65 probe reader (not part of the library): reads the `HT` (dispatch) and `HC` (combine) lines
host-trace.patch prints at exit (steady_clock ns from the call's entry at each point) and gives,
per `## NAME` section of the log, the median of each point over the section's calls (the first
SKIP calls, the checked run and the warm-up, left out).
Dispatch points: 1 entry checks, 2 the capture query, 3 the step and the argument checks,
4 the parameters, 5 the stream's wait for the last call's event, 6 notify's parameters,
7 count_kernel launched, 8 the data and wait kernels launched, 9 the call's event recorded,
10 num_recv seen, 11 the return. Combine: 1 entry checks, 2 the capture query, 3 the step and the
argument checks, 4 the stream's wait, 5 the step kernel launched, 6 the parameters, 7 the combine
kernel launched, 8 the return.

    SKIP=12 python3 host_points.py run.log
"""
import os
import statistics
import sys

skip = int(os.environ.get("SKIP", "12"))
sections = {}
name = "all"
for line in open(sys.argv[1]):
    if line.startswith("## "):
        name = line[3:].strip()
        continue
    parts = line.split()
    if parts and parts[0] in ("HT", "HC"):
        sections.setdefault((name, parts[0]), []).append([int(v) for v in parts[1:]])
for (name, tag), rows in sections.items():
    rows = rows[skip:]
    if not rows:
        continue
    n = min(len(r) for r in rows)
    med = [statistics.median(r[i] for r in rows) / 1000 for i in range(n)]
    print(f"{name} {tag} (n={len(rows)}): " + " | ".join(f"p{i} {m:.2f}" for i, m in enumerate(med) if i))
