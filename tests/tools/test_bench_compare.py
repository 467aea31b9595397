#!/usr/bin/env python3
"""Checks of tools/bench_compare.py, standard library only.

Logs are built here in the layouts `moe-ep bench` prints (normal mode with the tokens and sms
columns, decode mode with round_us, a single token size without the tokens column), with values
chosen so that every range, mean and difference is worked out by hand below; a row with a
nonzero #wrong must be reported and make the program exit 1.

Usage: test_bench_compare.py [path/to/bench_compare.py]  (default: ../../tools/bench_compare.py)
"""

import importlib.util
import io
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "tools", "bench_compare.py")

DECODE_HEADER = ("tokens dispatch combine            disp_us    comb_us  disp_MB  comb_MB disp_GB/s "
                 "comb_GB/s  d_%flr  c_%flr   rel_err  #wrong  round_us")
NORMAL_HEADER = ("tokens  sms dispatch combine            disp_us    comb_us  disp_MB  comb_MB "
                 "disp_GB/s comb_GB/s  d_%flr  c_%flr   rel_err  #wrong")
SMS_ONLY_HEADER = (" sms dispatch combine            disp_us    comb_us  disp_MB  comb_MB disp_GB/s "
                   "comb_GB/s  d_%flr  c_%flr   rel_err  #wrong  round_us")


def decode_row(tokens, dispatch, disp, comb, rnd, wrong=0):
    return (f"{tokens:6d} {dispatch:8s} bf16 {disp:10.1f} {comb:10.1f} 0.000 0.000 0.00 0.00 - - "
            f"0.0258 {wrong:7d} {rnd:9.1f}")


def load_script():
    spec = importlib.util.spec_from_file_location("bench_compare", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BenchCompareTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = load_script()

    def run_report(self, lines, base=None):
        out = io.StringIO()
        wrong = self.m.report(lines, base, out)
        return wrong, out.getvalue().splitlines()

    def decode_log(self):
        # main: disp 14.0 and 15.0 (mean 14.5); X: 13.0 and 13.4 (mean 13.2): X - main = -1.30.
        lines = []
        for r, (m_disp, x_disp) in enumerate(((14.0, 13.0), (15.0, 13.4)), start=1):
            lines += [f"== . round {r}", "# moe-ep bench: mode decode", DECODE_HEADER,
                      decode_row(1, "fp8", m_disp, 9.0, 19.0 + r),
                      decode_row(128, "fp8", 17.0, 15.5, 28.0), "# wrong: 0 OK"]
            lines += [f"== tmp-gpu/X round {r}", DECODE_HEADER,
                      decode_row(1, "fp8", x_disp, 9.2, 18.0 + r),
                      decode_row(128, "fp8", 17.5, 15.5, 28.5), "# wrong: 0 OK"]
        return lines

    def test_ranges_means_and_differences(self):
        wrong, out = self.run_report(self.decode_log())
        self.assertEqual(wrong, 0)
        self.assertEqual(out[0], "trees: ., tmp-gpu/X; differences of means against .")
        self.assertIn("tokens=1 dispatch=fp8 combine=bf16 disp_us: .: 14.0-15.0 (14.50) | "
                      "tmp-gpu/X: 13.0-13.4 (13.20) -1.30", out)
        self.assertIn("tokens=1 dispatch=fp8 combine=bf16 round_us: .: 20.0-21.0 (20.50) | "
                      "tmp-gpu/X: 19.0-20.0 (19.50) -1.00", out)
        self.assertIn("tokens=128 dispatch=fp8 combine=bf16 comb_us: .: 15.5-15.5 (15.50) | "
                      "tmp-gpu/X: 15.5-15.5 (15.50) +0.00", out)
        # Two keys, three time columns each, after the trees line.
        self.assertEqual(len(out), 1 + 2 * 3)

    def test_base_names_another_tree(self):
        _, out = self.run_report(self.decode_log(), base="tmp-gpu/X")
        self.assertIn("tokens=1 dispatch=fp8 combine=bf16 disp_us: .: 14.0-15.0 (14.50) +1.30 | "
                      "tmp-gpu/X: 13.0-13.4 (13.20)", out)
        with self.assertRaises(SystemExit):
            self.run_report(self.decode_log(), base="nope")

    def test_normal_and_sms_only_layouts(self):
        lines = ["== a round 1", NORMAL_HEADER,
                 "  4096   32 fp8      bf16                  60.0       40.0    0.000    0.000"
                 "      0.00      0.00       -       -  1.27e-08       0",
                 "== b round 1", SMS_ONLY_HEADER,
                 "  16 fp8      bf16                 150.2       65.4    0.000    0.000      0.00"
                 "      0.00       -       -    0.0258       0    210.0"]
        wrong, out = self.run_report(lines)
        self.assertEqual(wrong, 0)
        self.assertIn("tokens=4096 sms=32 dispatch=fp8 combine=bf16 disp_us: a: 60.0-60.0 (60.00) "
                      "| b: -", out)
        self.assertIn("sms=16 dispatch=fp8 combine=bf16 round_us: a: - | b: 210.0-210.0 (210.00)",
                      out)

    def test_one_size_decode_layout(self):
        # One token size in decode mode: no tokens or sms column, each row starts with its dtype
        # (v46 run X1's rows were dropped before the parser took them).
        header = ("dispatch combine            disp_us    comb_us  disp_MB  comb_MB disp_GB/s "
                  "comb_GB/s  d_%flr  c_%flr   rel_err  #wrong  round_us")
        lines = []
        for r, (a, b) in enumerate(((29.8, 31.6), (29.9, 31.8)), start=1):
            for tree, comb in (("a", a), ("b", b)):
                lines += [f"== {tree} round {r}", header,
                          f"fp8      bf16                  25.5 {comb:10.1f}    0.939    1.821     "
                          "36.76     61.15     9.4    15.7    0.0258       0      43.7",
                          "# wrong: 0 OK"]
        wrong, out = self.run_report(lines)
        self.assertEqual(wrong, 0)
        self.assertIn("dispatch=fp8 combine=bf16 comb_us: a: 29.8-29.9 (29.85) | "
                      "b: 31.6-31.8 (31.70) +1.85", out)
        self.assertEqual(len(out), 1 + 3)  # one key, three time columns

    def test_wrong_rows_are_reported_and_fail_the_program(self):
        lines = self.decode_log()
        lines[3] = decode_row(1, "fp8", 14.0, 9.0, 20.0, wrong=3)
        wrong, out = self.run_report(lines)
        self.assertEqual(wrong, 1)
        self.assertTrue(out[-1].startswith("WRONG .: "), out[-1])
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
            f.write("\n".join(lines) + "\n")
        try:
            done = subprocess.run([sys.executable, SCRIPT, f.name], capture_output=True, text=True)
            self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
            self.assertIn("WRONG", done.stdout)
            with open(f.name, "w") as g:  # the same log without the wrong row's count
                g.write("\n".join(self.decode_log()) + "\n")
            done = subprocess.run([sys.executable, SCRIPT, f.name], capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        finally:
            os.unlink(f.name)

    def test_no_sections(self):
        wrong, out = self.run_report(["tokens dispatch combine disp_us", "1 fp8 bf16 3.0"])
        self.assertEqual((wrong, out), (0, ["no `== NAME round R` sections found"]))


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        SCRIPT = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
