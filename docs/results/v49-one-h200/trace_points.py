"""v49 probe reader (not part of the library): reads the lines next-trace.patch prints (`LL k K
slot J start S end E`: each decode kernel's first block entry and last block exit; `LL p K I slot
J t T`: the latest block's time at point I of kernel K; %globaltimer ns) and gives, per decode
round (a dispatch's step, send and expand, then the first combine after that expand), the median
and the mean of each time from the step kernel's entry, over the rounds of each `== NAME` section
of the log.
Points: step 0 waited for the kernel before, 1 ranks (all windows but the last), 2 state read,
3 exchange and last window, 4 the last window's ids in (latest warp), 5 its ranks stored, 6 the
totals stored, 7 a window's ids in for pass 1 (latest warp); send 0 rows stored, 1 waited for the step kernel, 2 error check,
3 counts and metadata stored, 4 done counts added; expand 0 error check, 1 sources waited for,
2 thread 0's items done, 3 the block's, 4 the latest copy item's loads in, 5 its stores issued;
combine 0 waited for the kernel before, 1 error check,
2 thread 0's items done, 3 the block's.

    python3 trace_points.py trace.log
"""
import statistics
import sys

POINTS = {0: 8, 1: 5, 2: 6, 3: 4}
NAMES = {0: "step", 1: "send", 2: "expand", 3: "combine"}
COLS = [(k, w) for k in range(4) for w in ["start"] + [f"p{i}" for i in range(POINTS[k])] + ["end"]]


def chains(kernels, points):
    """kernels: (k, slot, start, end); points: {(k, i, slot): t}. One row per send."""
    by = {k: sorted((e for e in kernels if e[0] == k), key=lambda e: e[2]) for k in range(4)}
    out = []
    for send in by[1]:
        steps = [e for e in by[0] if e[2] < send[2]]
        expands = [e for e in by[2] if e[2] >= send[2]]
        if not steps or not expands:
            continue
        combines = [e for e in by[3] if e[2] >= expands[0][2]]
        chain = {0: steps[-1], 1: send, 2: expands[0], 3: combines[0] if combines else None}
        t0 = chain[0][2]
        row = []
        for k, what in COLS:
            e = chain[k]
            if e is None:
                t = None
            elif what == "start":
                t = e[2]
            elif what == "end":
                t = e[3]
            else:
                t = points.get((k, int(what[1:]), e[1]))
            row.append(None if t is None else (t - t0) / 1000.0)
        out.append(row)
    return out


def main():
    sections = {}
    name = None
    for line in open(sys.argv[1]):
        if line.startswith("=="):
            name = line[2:].strip()
            sections.setdefault(name, ([], {}))
        elif line.startswith("LL k") and name is not None:
            f = line.split()
            sections[name][0].append((int(f[2]), int(f[4]), int(f[6]), int(f[8])))
        elif line.startswith("LL p") and name is not None:
            f = line.split()
            sections[name][1][(int(f[2]), int(f[3]), int(f[5]))] = int(f[7])
    # Medians, and means (a few slow rounds move the mean, not the median).
    print("us from the step kernel's entry over the rounds of a section: median / mean")
    for name, (kernels, points) in sections.items():
        rows = chains(kernels, points)
        print(f"== {name} (n={len(rows)})")
        for k in range(4):
            cells = []
            for i, (kk, what) in enumerate(COLS):
                if kk != k:
                    continue
                vals = [r[i] for r in rows if r[i] is not None]
                cells.append(f"{what} {statistics.median(vals):.2f}/{statistics.fmean(vals):.2f}"
                             if vals else f"{what} -")
            print(f"  {NAMES[k]:8s} " + " | ".join(cells))


if __name__ == "__main__":
    main()
