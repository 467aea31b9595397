"""Side by side figures of trees benched in alternating rounds (docs/perf-notes.md, "How we measure").

    python3 tools/bench_compare.py LOG [--base NAME]

LOG holds sections that a run script writes, each a line `== NAME round R` followed by the output
of one `moe-ep bench` (normal or decode mode, any of its table layouts: with or without the
tokens and sms columns, with or without round_us). For every row key (tokens, sms, dispatch,
combine, as present) and every time column (disp_us, comb_us, round_us, as present) it prints,
per tree in the order the trees first appear, `min-max (mean)` over the rounds, and each tree's
mean minus the base tree's (the first tree unless --base names another). A row whose #wrong is not
0 is listed after the table and makes the exit status 1, so a comparison never hides a wrong run.
"""

import argparse
import re
import statistics
import sys

TIME_COLUMNS = ("disp_us", "comb_us", "round_us")
KEY_COLUMNS = ("tokens", "sms", "dispatch", "combine")
SECTION = re.compile(r"^== (.+?) round (\S+)\s*$")


def parse(lines):
    """Returns (trees in order, {(tree, key): {column: [values]}}, [wrong rows], keys in order)."""
    trees, keys, wrong = [], [], []
    values = {}
    tree = header = None
    for line in lines:
        m = SECTION.match(line)
        if m:
            tree, header = m.group(1), None
            if tree not in trees:
                trees.append(tree)
            continue
        fields = line.split()
        if tree is None or not fields:
            continue
        if "disp_us" in fields:
            header = fields
            continue
        # (a row's first column is its tokens or sms, or, in a one-size decode table, its dtype)
        if header is None or len(fields) != len(header) or fields[0].startswith("#"):
            continue
        row = dict(zip(header, fields))
        key = tuple((k, row[k]) for k in KEY_COLUMNS if k in row)
        if key not in keys:
            keys.append(key)
        cell = values.setdefault((tree, key), {})
        for column in TIME_COLUMNS:
            if column in row:
                cell.setdefault(column, []).append(float(row[column]))
        if row.get("#wrong", "0") != "0":
            wrong.append(f"{tree}: {line.strip()}")
    return trees, values, wrong, keys


def summary(xs):
    return f"{min(xs):.1f}-{max(xs):.1f} ({statistics.mean(xs):.2f})"


def report(lines, base=None, out=sys.stdout):
    """Prints the comparison; returns the number of rows with a nonzero #wrong."""
    trees, values, wrong, keys = parse(lines)
    if not trees:
        print("no `== NAME round R` sections found", file=out)
        return 0
    base = base if base is not None else trees[0]
    if base not in trees:
        raise SystemExit(f"--base {base}: no such tree (trees: {', '.join(trees)})")
    print("trees: " + ", ".join(trees) + f"; differences of means against {base}", file=out)
    for key in keys:
        label = " ".join(f"{k}={v}" for k, v in key)
        for column in TIME_COLUMNS:
            cells = [values.get((t, key), {}).get(column) for t in trees]
            if not any(cells):
                continue
            base_cell = values.get((base, key), {}).get(column)
            parts = []
            for t, xs in zip(trees, cells):
                if not xs:
                    parts.append(f"{t}: -")
                    continue
                diff = ""
                if t != base and base_cell:
                    diff = f" {statistics.mean(xs) - statistics.mean(base_cell):+.2f}"
                parts.append(f"{t}: {summary(xs)}{diff}")
            print(f"{label} {column}: " + " | ".join(parts), file=out)
    for w in wrong:
        print("WRONG " + w, file=out)
    return len(wrong)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--base", help="the tree the differences are taken against")
    args = parser.parse_args()
    with open(args.log) as f:
        return 1 if report(f.read().splitlines(), args.base) else 0


if __name__ == "__main__":
    sys.exit(main())
