"""v59 probe reader (not part of the library): reads the lines next-count-trace.patch prints
(`CK k K slot J start S end E`: a normal dispatch kernel's first block entry and last block exit;
`CK p K I slot J t T`: the latest block's time at point I of kernel K; %globaltimer ns) and gives,
per dispatch (a count_kernel launch, the first dispatch_kernel that starts after it, and the first
dispatch_wait_kernel after that), the median and the mean of each time from count_kernel's entry,
over the dispatches of each `== NAME` section of the log.
Points: count 0 waited for the kernel before, 1 a scan share done, 2 the step stored, 3 a sender's
chunk scanned, 4 its rows before known, 5 its words published, 6 the receiver saw the step,
7 the receiver done (v65's count-trace.patch adds 8 a sender's positions stored and 9 its count
words stored, between 4 and 5); dispatch 0 waited for count_kernel, 1 a block's rows issued; wait 0
waited for dispatch_kernel (since v64's W2: every done count in). Each point is the latest block's
(thread 0's) time; a point a log lacks is left out.

    python3 count_points.py trace.log
"""
import statistics
import sys

POINTS = {0: 10, 1: 2, 2: 1}
NAMES = {0: "count", 1: "dispatch", 2: "wait"}
COLS = [(k, w) for k in range(3) for w in ["start"] + [f"p{i}" for i in range(POINTS[k])] + ["end"]]


def chains(kernels, points):
    """kernels: (k, slot, start, end); points: {(k, i, slot): t}. One row per count launch."""
    by = {k: sorted((e for e in kernels if e[0] == k), key=lambda e: e[2]) for k in range(3)}
    out = []
    for count in by[0]:
        data = [e for e in by[1] if e[2] >= count[2]]
        if not data:
            continue
        waits = [e for e in by[2] if e[2] >= data[0][2]]
        if not waits:
            continue
        chain = {0: count, 1: data[0], 2: waits[0]}
        t0 = count[2]
        row = []
        for k, what in COLS:
            e = chain[k]
            if what == "start":
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
        elif line.startswith("CK k") and name is not None:
            f = line.split()
            sections[name][0].append((int(f[2]), int(f[4]), int(f[6]), int(f[8])))
        elif line.startswith("CK p") and name is not None:
            f = line.split()
            sections[name][1][(int(f[2]), int(f[3]), int(f[5]))] = int(f[7])
    print("us from count_kernel's entry over the dispatches of a section: median / mean")
    for name, (kernels, points) in sections.items():
        rows = chains(kernels, points)
        print(f"== {name} (n={len(rows)})")
        for k in range(3):
            cells = []
            for c, (kk, what) in enumerate(COLS):
                if kk != k:
                    continue
                vals = [r[c] for r in rows if r[c] is not None]
                if vals:
                    cells.append(f"{what} {statistics.median(vals):.2f}/{statistics.mean(vals):.2f}")
            print(f"  {NAMES[k]:8} " + " | ".join(cells))


if __name__ == "__main__":
    main()
