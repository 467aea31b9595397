"""v43 probe (not part of the library): reads the `LL k K slot J start S end E` lines that
next-trace-*.patch prints (each decode kernel's first block entry and last block exit,
%globaltimer ns) and gives, per dispatch, the times from its step kernel's entry: the step's
exit, the send's entry and exit, the expand's exit, and the next combine's exit. Prints the
medians over the dispatches of each `== NAME` section of the log.

    python3 trace_chain.py trace.log
"""
import statistics
import sys


def chains(events):
    """events: (kernel, start, end); kernel 0 step, 1 send, 2 expand, 3 combine."""
    by = {k: sorted(e for e in events if e[0] == k) for k in range(4)}
    out = []
    for _, s0, s1 in by[1]:
        steps = [e for e in by[0] if e[1] < s0]
        expands = [e for e in by[2] if e[1] >= s0]
        if not steps or not expands:
            continue
        step = steps[-1]
        expand = expands[0]
        combines = [e for e in by[3] if e[1] > expand[1]]
        if not combines:
            continue
        t0 = step[1]
        out.append((step[2] - t0, s0 - t0, s1 - t0, expand[2] - t0, combines[0][2] - t0))
    return out


def main():
    sections = {}
    name = None
    for line in open(sys.argv[1]):
        if line.startswith("=="):
            name = line[2:].strip()
            sections.setdefault(name, [])
        elif line.startswith("LL k") and name is not None:
            f = line.split()
            sections[name].append((int(f[2]), int(f[6]), int(f[8])))
    cols = ("step end", "send start", "send end", "expand end", "combine end")
    print(f"{'run':28s} {'n':>3s} " + " ".join(f"{c:>12s}" for c in cols) + "   (us from the step's entry)")
    for name, events in sections.items():
        rows = chains(events)
        if not rows:
            print(f"{name:28s}   0")
            continue
        med = [statistics.median(r[i] for r in rows) / 1000.0 for i in range(len(cols))]
        print(f"{name:28s} {len(rows):3d} " + " ".join(f"{m:12.2f}" for m in med))


if __name__ == "__main__":
    main()
