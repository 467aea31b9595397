"""The accuracy report, python -m moe_ep.report, on real `moe-ep bench --json` output.

Runs the CPU backend's bench at two token sizes (small shapes, a few seconds), feeds both JSON
files to the report and checks that it writes accuracy.png and time_per_leg.png at the documented
pixel size (1000 x 600, read from the PNG header), and that summary.json holds exactly the series
expected from the records: one accuracy series per (dispatch, combine) pair with one point per
token size at the pair's wire bytes per element, and one timing series per pair and leg. A single
token size writes no timing plot. One bench command with `--tokens 4,16` gives one file that
feeds the same plots, with the accuracy points of the two separate runs. The moe-ep binary comes
from MOE_EP_BIN (tests/python.cmake sets it); without it the test skips. MOE_EP_BIN is not
passed on: the library warns about MOE_EP_* variables it does not know.
"""

import json
import os
import struct
import subprocess
import sys

import pytest

MOE_EP = os.environ.get("MOE_EP_BIN")
ENV = {k: v for k, v in os.environ.items() if k != "MOE_EP_BIN"}
pytestmark = pytest.mark.skipif(not MOE_EP, reason="MOE_EP_BIN (the moe-ep binary) not set")

TOKENS = (4, 16)
BYTES = {"bfloat16": 2.0, "float8_blockwise": 1.03125, "float8_direct_cast": 1.0,
         "mxfp4_blockwise": 0.53125, "int8_e3m4_blockwise": 1.0625}


def bench(tmp_path, tokens):
    """Runs the bench at `tokens` (an int, or a list run as --tokens A,B in one command)."""
    sizes = ",".join(map(str, tokens)) if isinstance(tokens, (list, tuple)) else str(tokens)
    path = tmp_path / f"bench_t{sizes.replace(',', '_')}.json"
    subprocess.run([MOE_EP, "bench", "--backend", "cpu", "--ranks", "2", "--experts", "4",
                    "--topk", "2", "--hidden", "256", "--tokens", sizes, "--iters", "2",
                    "--warmup", "0", "--seed", "5", "--json", str(path)],
                   check=True, capture_output=True, text=True, timeout=120, env=ENV)
    with open(path) as f:
        return path, json.load(f)


def report(paths, out):
    return subprocess.run([sys.executable, "-m", "moe_ep.report", *map(str, paths), "-o",
                           str(out)], check=True, capture_output=True, text=True, timeout=120,
                          env=ENV)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


def test_report_plots_every_pair_and_both_token_sizes(tmp_path):
    runs = [bench(tmp_path, t) for t in TOKENS]
    records = [r for _, rs in runs for r in rs]
    pairs = sorted({(r["dispatch_dtype"], r["combine_dtype"]) for r in records})
    assert len(pairs) == 12, pairs  # every dispatch/combine pair, int8/e3m4 included
    out = tmp_path / "report"
    result = report([p for p, _ in runs], out)
    print(result.stdout)
    for name in ("accuracy.png", "time_per_leg.png", "summary.json"):
        assert (out / name).is_file(), name
        assert f"wrote {out / name}" in result.stdout, result.stdout
    assert png_size(out / "accuracy.png") == (1000, 600)
    assert png_size(out / "time_per_leg.png") == (1000, 600)

    with open(out / "summary.json") as f:
        summary = json.load(f)
    assert summary["records"] == len(records) == 24
    assert (summary["accuracy"]["width"], summary["accuracy"]["height"]) == (1000, 600)

    series = summary["accuracy"]["series"]
    assert [(s["dispatch_dtype"], s["combine_dtype"]) for s in series] == pairs
    by_key = {(r["dispatch_dtype"], r["combine_dtype"], r["tokens"]): r for r in records}
    for s in series:
        d, c = s["dispatch_dtype"], s["combine_dtype"]
        assert [p["tokens"] for p in s["points"]] == list(TOKENS), s
        for p in s["points"]:
            assert p["bytes_per_elem"] == pytest.approx(BYTES[d] + BYTES[c]), s
            assert p["rel_err"] == by_key[(d, c, p["tokens"])]["rel_err"], s

    timing = summary["timing"]["series"]
    assert sorted((s["dispatch_dtype"], s["combine_dtype"], s["leg"]) for s in timing) == sorted(
        (d, c, leg) for d, c in pairs for leg in ("dispatch", "combine"))
    for s in timing:
        assert [p["tokens"] for p in s["points"]] == list(TOKENS), s
        for p in s["points"]:
            r = by_key[(s["dispatch_dtype"], s["combine_dtype"], p["tokens"])]
            assert p["us"] == r[s["leg"] + "_us"], s
    assert summary["notes"] == []


def test_report_with_one_token_size_has_no_timing_plot(tmp_path):
    path, _ = bench(tmp_path, TOKENS[0])
    out = tmp_path / "one"
    result = report([path], out)
    assert (out / "accuracy.png").is_file()
    assert not (out / "time_per_leg.png").exists()
    with open(out / "summary.json") as f:
        summary = json.load(f)
    assert summary["timing"] is None
    assert len(summary["accuracy"]["series"]) == 12
    assert any("one token size" in n for n in summary["notes"]), summary["notes"]
    assert "note: one token size" in result.stdout


def test_report_of_one_command_with_several_token_sizes(tmp_path):
    path, records = bench(tmp_path, list(TOKENS))
    assert len(records) == 24 and sorted({r["tokens"] for r in records}) == list(TOKENS)
    assert all(r["max_tokens"] == r["tokens"] for r in records), records
    out = tmp_path / "sweep"
    report([path], out)
    assert png_size(out / "time_per_leg.png") == (1000, 600)
    with open(out / "summary.json") as f:
        summary = json.load(f)
    assert summary["records"] == 24 and summary["notes"] == []
    timing = summary["timing"]["series"]
    assert len(timing) == 24  # 12 pairs x 2 legs
    assert all([p["tokens"] for p in s["points"]] == list(TOKENS) for s in timing), timing
    # The same inputs as the separate runs of each size: the same accuracy points.
    separate = {(r["dispatch_dtype"], r["combine_dtype"], r["tokens"]): r
                for t in TOKENS for r in bench(tmp_path, t)[1]}
    series = summary["accuracy"]["series"]
    assert len(series) == 12
    for s in series:
        assert [p["tokens"] for p in s["points"]] == list(TOKENS), s
        for p in s["points"]:
            r = separate[(s["dispatch_dtype"], s["combine_dtype"], p["tokens"])]
            assert p["rel_err"] == r["rel_err"], (s, r)
