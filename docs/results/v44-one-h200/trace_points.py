"""v44 probe (not part of the library): reads the lines that next-trace-G.patch and
next-trace-points.patch print (`LL k K slot J start S end E`: each decode kernel's first block
entry and last block exit; `LL p K I slot J t T`: the latest block's time at point I of kernel K,
%globaltimer ns) and gives, per dispatch, the medians of each time from its step kernel's entry,
over the dispatches of each `== NAME` section of the log. Kernels: 0 step, 1 send, 2 expand.
Points: step 0 waited for the kernel before, 1 ranks (all windows but the last), 2 state read,
3 exchange and last window; send 0 rows stored, 1 waited for the step kernel, 2 error check,
3 counts and metadata stored, 4 thread 0's system fence returned, 5 every thread's, 6 done counts
added; expand 0 sources waited for, 1 items done.

    python3 trace_points.py trace.log
"""
import statistics
import sys

COLS = [("step", 0, "p0"), ("step", 0, "p1"), ("step", 0, "p2"), ("step", 0, "p3"),
        ("step", 0, "end"), ("send", 1, "start")] + \
       [("send", 1, f"p{i}") for i in range(7)] + [("send", 1, "end"), ("expand", 2, "start"),
                                                    ("expand", 2, "p0"), ("expand", 2, "p1"),
                                                    ("expand", 2, "end")]


def chains(kernels, points):
    """kernels: (k, slot, start, end); points: {(k, i, slot): t}."""
    by = {k: sorted((e for e in kernels if e[0] == k), key=lambda e: e[2]) for k in range(3)}
    out = []
    for send in by[1]:
        steps = [e for e in by[0] if e[2] < send[2]]
        expands = [e for e in by[2] if e[2] >= send[2]]
        if not steps or not expands:
            continue
        chain = {0: steps[-1], 1: send, 2: expands[0]}
        t0 = chain[0][2]
        row = []
        for _, k, what in COLS:
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
        elif line.startswith("LL k") and name is not None:
            f = line.split()
            sections[name][0].append((int(f[2]), int(f[4]), int(f[6]), int(f[8])))
        elif line.startswith("LL p") and name is not None:
            f = line.split()
            sections[name][1][(int(f[2]), int(f[3]), int(f[5]))] = int(f[7])
    print("us from the step kernel's entry, medians; columns: " +
          " ".join(f"{k}.{w}" for k, _, w in COLS))
    for name, (kernels, points) in sections.items():
        rows = chains(kernels, points)
        meds = []
        for i in range(len(COLS)):
            vals = [r[i] for r in rows if r[i] is not None]
            meds.append(f"{statistics.median(vals):6.2f}" if vals else "     -")
        print(f"{name:24s} n={len(rows):3d} " + " ".join(meds))


if __name__ == "__main__":
    main()
