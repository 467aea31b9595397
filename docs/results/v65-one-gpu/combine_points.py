"""v65 probe reader (not part of the library): reads the lines combine-trace.patch and
combine-trace-sc.patch print (`CK k K slot J start S end E`: a kernel launch's first block entry
and last block exit; `CK p K I slot J t T`: the latest block's time at point I of kernel K;
%globaltimer ns), kernel 0 the combine, 1 the step kernel (main's combine only), 2 the dispatch's
wait kernel, and gives, per combine launch, each time from the end of the dispatch wait kernel
before it (t0): the median and the mean over the combines of each `== NAME` section of the log.
Points: step 0 past its wait for the kernel before; combine 0 past its wait for the kernel before,
1 (SC) the block's ticket taken, 2 (SC) the step stored, 3 past the verdict, 4 warp 0's items done.

    python3 combine_points.py trace.log
"""
import statistics
import sys

COLS = ["step start", "step p0", "step end", "comb start", "p0", "p1", "p2", "p3", "p4", "end"]


def rows_of(kernels, points):
    """kernels: [(k, slot, start, end)]; points: {(k, i, slot): t}. A row per combine launch."""
    waits = sorted(e[3] for e in kernels if e[0] == 2)
    steps = [e for e in kernels if e[0] == 1]
    out = []
    for k, slot, start, end in (e for e in kernels if e[0] == 0):
        # The dispatch's wait kernel just before it: a combine whose wait kernel fell outside
        # that kernel's ring (more than 50 us before) is left out.
        before = [w for w in waits if start - 50000 < w < start]
        if not before:
            continue
        t0 = before[-1]
        step = [s for s in steps if t0 < s[2] < end]
        row = {}
        if step:
            s = step[0]
            row["step start"] = s[2] - t0
            row["step end"] = s[3] - t0
            if (1, 0, s[1]) in points:
                row["step p0"] = points[(1, 0, s[1])] - t0
        row["comb start"] = start - t0
        row["end"] = end - t0
        for i in range(5):
            if (0, i, slot) in points:
                row[f"p{i}"] = points[(0, i, slot)] - t0
        out.append(row)
    return out


def main():
    sections, name = {}, None
    kernels, points = [], {}

    def flush():
        if name is not None:
            sections.setdefault(name, []).extend(rows_of(kernels, points))

    for line in open(sys.argv[1]):
        if line.startswith("== "):
            flush()
            name, kernels, points = line[3:].strip(), [], {}
            continue
        f = line.split()
        if len(f) >= 8 and f[0] == "CK" and f[1] == "k":
            kernels.append((int(f[2]), int(f[4]), int(f[6]), int(f[8])))
        elif len(f) >= 8 and f[0] == "CK" and f[1] == "p":
            points[(int(f[2]), int(f[3]), int(f[5]))] = int(f[7])
    flush()
    print("us from the dispatch wait kernel's end before each combine: median / mean")
    for sec, rows in sections.items():
        print(f"== {sec} (n={len(rows)})")
        cells = []
        for c in COLS:
            vals = [r[c] / 1000 for r in rows if c in r]
            if vals:
                cells.append(f"{c} {statistics.median(vals):.2f}/{statistics.mean(vals):.2f}")
        print("  " + " | ".join(cells))


if __name__ == "__main__":
    main()
