"""Accuracy and timing plots from `moe-ep bench --json` records (docs/bench.md#accuracy-report).

    python -m moe_ep.report bench.json [more.json ...] -o report/

Reads every record of the given files and writes, with matplotlib's Agg backend:

* ``accuracy.png``: relative error (``rel_err``, log scale) against the wire bytes per element of
  the pair (dispatch plus combine format), one series per (dispatch, combine) pair, one point per
  record (several token sizes give several points).
* ``time_per_leg.png``, when the records hold at least two token sizes: ``dispatch_us`` and
  ``combine_us`` against tokens per rank, one line per pair and leg.
* ``summary.json``: the series exactly as plotted, and each image's file name and pixel size.

Bytes per element come from the formats' layouts (docs/formats.md); a format this module does not
know is measured against a bfloat16 dispatch record of the same run, or left out with a note.
Prints one line per file written.
"""

import argparse
import json
import os
import sys
from collections import defaultdict

# Wire bytes per element: payload plus scales (docs/formats.md, "Rows on the wire").
BYTES_PER_ELEM = {
    "bfloat16": 2.0,
    "float8_blockwise": 1.0 + 4 / 128,
    "float8_direct_cast": 1.0,
    "mxfp4_blockwise": 0.5 + 1 / 32,
    "int8_e3m4_blockwise": 1.0 + 2 / 32,
}
WIDTH_IN, HEIGHT_IN, DPI = 10, 6, 100  # every image is 1000 x 600 pixels
RUN_KEYS = ("backend", "ranks", "tokens", "hidden", "experts", "topk", "seed")
PAIR_KEYS = ("dispatch_dtype", "combine_dtype")


def load_records(paths):
    """The records of every file, in order; each must be a JSON list of objects."""
    records = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise SystemExit(f"{path}: not a list of bench records (moe-ep bench --json FILE)")
        for r in data:
            missing = [k for k in RUN_KEYS + PAIR_KEYS + ("rel_err", "dispatch_bytes",
                                                           "combine_bytes", "dispatch_us",
                                                           "combine_us") if k not in r]
            if missing:
                raise SystemExit(f"{path}: a record lacks {', '.join(missing)}: {r}")
        records.extend(data)
    if not records:
        raise SystemExit("no records in " + ", ".join(paths))
    return records


def bytes_per_elem(records, notes):
    """{id(record): dispatch + combine wire bytes per element} for the records it can size."""
    # Elements each rank moves per leg, from a bfloat16 dispatch record of the same run: both legs
    # move the same rows, and bfloat16 is 2 bytes per element.
    elements = {}
    for r in records:
        if r["dispatch_dtype"] == "bfloat16" and r["dispatch_bytes"] > 0:
            elements[tuple(r[k] for k in RUN_KEYS)] = r["dispatch_bytes"] / 2.0
    sizes = {}
    for r in records:
        legs = []
        for leg in ("dispatch", "combine"):
            name = r[leg + "_dtype"]
            if name in BYTES_PER_ELEM:
                legs.append(BYTES_PER_ELEM[name])
                continue
            n = elements.get(tuple(r[k] for k in RUN_KEYS))
            if n:
                legs.append(r[leg + "_bytes"] / n)
            else:
                notes.add(f"{name}: unknown format and no bfloat16 dispatch record of the same "
                          "run to size it; its records are left out of accuracy.png")
        if len(legs) == 2:
            sizes[id(r)] = legs[0] + legs[1]
    return sizes


def pair_label(pair):
    return f"{pair[0]} / {pair[1]}"


def pair_styles(series):
    """{(dispatch, combine): matplotlib style}: the colour names the combine format, the marker
    and line style the dispatch format, so every pair is told apart at a glance."""
    dispatch = sorted({s["dispatch_dtype"] for s in series})
    combine = sorted({s["combine_dtype"] for s in series})
    colors = [f"C{i}" for i in range(10)]
    markers, lines = "osD^vP", ["-", "--", ":", "-."]
    return {(d, c): {"color": colors[combine.index(c) % len(colors)],
                     "marker": markers[dispatch.index(d) % len(markers)],
                     "linestyle": lines[dispatch.index(d) % len(lines)]}
            for d in dispatch for c in combine}


def figure_legend(fig, handles, labels):
    """The pairs' legend under the axes, outside them."""
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8,
               title="dispatch / combine", title_fontsize=8, frameon=False)


def accuracy_series(records, sizes):
    """One series per pair: points (bytes per element, rel_err, tokens), by tokens."""
    by_pair = defaultdict(list)
    for r in records:
        if id(r) in sizes and r["rel_err"] is not None:
            by_pair[(r["dispatch_dtype"], r["combine_dtype"])].append(
                {"bytes_per_elem": sizes[id(r)], "rel_err": r["rel_err"], "tokens": r["tokens"]})
    return [{"dispatch_dtype": d, "combine_dtype": c,
             "points": sorted(points, key=lambda p: (p["tokens"], p["bytes_per_elem"]))}
            for (d, c), points in sorted(by_pair.items())]


def timing_series(records):
    """One series per pair and leg: (tokens per rank, microseconds), by tokens; several records of
    one token size (several files) are averaged."""
    sums = defaultdict(lambda: defaultdict(list))
    for r in records:
        for leg in ("dispatch", "combine"):
            us = r[leg + "_us"]
            if us is not None:
                sums[(r["dispatch_dtype"], r["combine_dtype"], leg)][r["tokens"]].append(us)
    return [{"dispatch_dtype": d, "combine_dtype": c, "leg": leg,
             "points": [{"tokens": t, "us": sum(v) / len(v)} for t, v in sorted(by_tokens.items())]}
            for (d, c, leg), by_tokens in sorted(sums.items())]


def new_figure(plt, ncols=1):
    fig, axes = plt.subplots(1, ncols, figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, squeeze=False)
    return fig, axes[0]


def save(fig, path):
    fig.savefig(path, dpi=DPI)  # no bbox_inches="tight": the pixel size stays WIDTH x HEIGHT
    width, height = fig.canvas.get_width_height()
    return {"file": os.path.basename(path), "width": width, "height": height}


def plot_accuracy(plt, series, path, title):
    fig, (ax,) = new_figure(plt)
    styles = pair_styles(series)
    for s in series:
        pair = (s["dispatch_dtype"], s["combine_dtype"])
        xs = [p["bytes_per_elem"] for p in s["points"]]
        ys = [max(p["rel_err"], 1e-12) for p in s["points"]]  # log axis: keep exact 0 visible
        ax.plot(xs, ys, linestyle="none", marker=styles[pair]["marker"],
                color=styles[pair]["color"], markersize=8, alpha=0.8, label=pair_label(pair))
    ax.set_yscale("log")
    ax.set_xlabel("wire bytes per element (dispatch + combine)")
    ax.set_ylabel("relative L2 error vs fp64 (rel_err)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    figure_legend(fig, *ax.get_legend_handles_labels())
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    info = save(fig, path)
    plt.close(fig)
    return info


def plot_timing(plt, series, path, title):
    fig, axes = new_figure(plt, ncols=2)
    styles = pair_styles(series)
    for ax, leg in zip(axes, ("dispatch", "combine")):
        for s in (s for s in series if s["leg"] == leg):
            pair = (s["dispatch_dtype"], s["combine_dtype"])
            ax.plot([p["tokens"] for p in s["points"]], [p["us"] for p in s["points"]],
                    label=pair_label(pair), **styles[pair])
        if all(p["tokens"] > 0 for s in series for p in s["points"]):
            ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens per rank")
        ax.set_ylabel(f"{leg} time (us, median of the slowest rank)")
        ax.set_title(f"{leg} leg")
        ax.grid(True, which="both", alpha=0.3)
    figure_legend(fig, *axes[0].get_legend_handles_labels())
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    info = save(fig, path)
    plt.close(fig)
    return info


def run_title(records):
    values = lambda key: sorted({str(r[key]) for r in records})  # noqa: E731
    return (f"moe-ep bench, backend {'/'.join(values('backend'))}, ranks "
            f"{'/'.join(values('ranks'))}, hidden {'/'.join(values('hidden'))}, "
            f"top-{'/'.join(values('topk'))} of {'/'.join(values('experts'))} experts")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m moe_ep.report",
        description="Plots of moe-ep bench --json records: relative error against wire bytes "
                    "per element, and time per leg against tokens per rank.")
    parser.add_argument("json", nargs="+", help="files written by moe-ep bench --json")
    parser.add_argument("-o", "--output", default="report", help="output folder (default report/)")
    args = parser.parse_args(argv)

    try:
        import matplotlib
    except ImportError:
        raise SystemExit("moe_ep.report needs matplotlib (Debian: python3-matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = load_records(args.json)
    os.makedirs(args.output, exist_ok=True)
    notes = set()
    title = run_title(records)
    summary = {"inputs": args.json, "records": len(records), "notes": []}

    series = accuracy_series(records, bytes_per_elem(records, notes))
    path = os.path.join(args.output, "accuracy.png")
    summary["accuracy"] = dict(plot_accuracy(plt, series, path, title), series=series)
    print(f"wrote {path} ({summary['accuracy']['width']}x{summary['accuracy']['height']}): "
          f"rel_err against bytes per element, {len(series)} dispatch/combine pairs")

    token_sizes = sorted({r["tokens"] for r in records})
    if len(token_sizes) >= 2:
        series = timing_series(records)
        path = os.path.join(args.output, "time_per_leg.png")
        summary["timing"] = dict(plot_timing(plt, series, path, title), series=series)
        print(f"wrote {path} ({summary['timing']['width']}x{summary['timing']['height']}): "
              f"time per leg against tokens per rank {token_sizes}, {len(series)} series")
    else:
        summary["timing"] = None
        notes.add(f"one token size ({token_sizes[0]}): no time_per_leg.png (run moe-ep bench at "
                  "several --tokens and pass every JSON file)")

    summary["notes"] = sorted(notes)
    for note in summary["notes"]:
        print("note: " + note)
    path = os.path.join(args.output, "summary.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"wrote {path}: the plotted series")
    return 0


if __name__ == "__main__":
    sys.exit(main())
