#!/usr/bin/env python3
"""Checks of tools/cost_model.py (docs/multi-node.md), standard library only.

The closed forms are compared with a brute-force walk over every top-k set of small cases, where
each path (self, NVLink, network, forwarder) is counted by following the routing rules token by
token; the script's own output (JSON and markdown, run as a program) must keep hierarchical
network bytes at or below flat ones and account for every delivered row exactly once; the EP16
bf16 figures equal values worked out by hand below; docs/multi-node.md shows the current tables.

Usage: test_cost_model.py [path/to/cost_model.py]  (default: ../../tools/cost_model.py)
"""

import importlib.util
import itertools
import json
import os
import subprocess
import sys
import unittest
from fractions import Fraction

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "tools", "cost_model.py")


def load_script():
    spec = importlib.util.spec_from_file_location("cost_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(*args):
    done = subprocess.run([sys.executable, SCRIPT, *args], check=True, capture_output=True,
                          text=True)
    return done.stdout


def brute_force_rows(num_experts, topk, world, ranks_per_node, source):
    """Expected rows per token of `source` by path, averaging over every set of `topk` distinct
    experts (all equally likely), each path counted by following the routing rules."""
    per_rank = num_experts // world
    node_of = lambda rank: rank // ranks_per_node
    forwarder = lambda node: node * ranks_per_node + source % ranks_per_node
    counts = dict.fromkeys(("self", "nvl_direct", "flat_net", "hier_net", "fwd_self", "nvl_fwd",
                            "delivered"), 0)
    num_sets = 0
    for experts in itertools.combinations(range(num_experts), topk):
        num_sets += 1
        owners = {e // per_rank for e in experts}
        remote = {r for r in owners if node_of(r) != node_of(source)}
        counts["self"] += source in owners
        counts["nvl_direct"] += len(owners - remote - {source})
        counts["flat_net"] += len(remote)  # one network crossing per remote rank
        counts["hier_net"] += len({node_of(r) for r in remote})  # one per remote node
        counts["fwd_self"] += sum(r == forwarder(node_of(r)) for r in remote)
        counts["nvl_fwd"] += sum(r != forwarder(node_of(r)) for r in remote)
        counts["delivered"] += len(owners)
    return {k: Fraction(v, num_sets) for k, v in counts.items()}


def brute_force_forwarded(num_experts, topk, world, ranks_per_node, rank):
    """Rows `rank` stores over NVLink as a forwarder, per token of each source, summed over the
    sources it forwards for (same index in another node): by symmetry this must equal what one
    source causes to be forwarded (nvl_fwd)."""
    per_rank = num_experts // world
    node = rank // ranks_per_node
    members = range(node * ranks_per_node, (node + 1) * ranks_per_node)
    sources = [s for s in range(world)
               if s // ranks_per_node != node and s % ranks_per_node == rank % ranks_per_node]
    total, num_sets = 0, 0
    for experts in itertools.combinations(range(num_experts), topk):
        num_sets += 1
        owners = {e // per_rank for e in experts}
        total += len(sources) * sum(r in owners for r in members if r != rank)
    return Fraction(total, num_sets)


class ClosedFormMatchesEnumeration(unittest.TestCase):
    # (E, K, W, L): the brief's case (4 ranks of 4 experts, 2 nodes), one rank per node (the
    # hierarchical path is the flat one), one node (no network), and an odd shape.
    CASES = [(16, 4, 4, 2), (16, 4, 4, 1), (16, 4, 4, 4), (12, 3, 6, 3), (16, 5, 8, 2)]

    def test_rows_per_token(self):
        cm = load_script()
        for e, k, w, l in self.CASES:
            closed = cm.rows_per_token(e, k, w, l)
            for source in range(w):
                brute = brute_force_rows(e, k, w, l, source)
                for key, value in brute.items():
                    self.assertEqual(closed[key], value, f"E={e} K={k} W={w} L={l} "
                                     f"source {source}: {key}")
            for rank in range(w):
                self.assertEqual(brute_force_forwarded(e, k, w, l, rank), closed["nvl_fwd"])

    def test_probability_by_hand(self):
        # E=16, K=4, a rank owns 4: P(no expert of the rank) = C(12,4)/C(16,4) = 495/1820.
        cm = load_script()
        self.assertEqual(cm.p_receive(16, 4, 4), 1 - Fraction(495, 1820))
        self.assertEqual(cm.p_receive(16, 4, 16), 1)
        self.assertEqual(cm.p_receive(16, 4, 0), 0)

    def test_degenerate_topologies(self):
        cm = load_script()
        one_per_node = cm.rows_per_token(16, 4, 4, 1)
        self.assertEqual(one_per_node["hier_net"], one_per_node["flat_net"])
        one_node = cm.rows_per_token(16, 4, 4, 4)
        self.assertEqual(one_node["hier_net"], 0)
        self.assertEqual(one_node["flat_net"], 0)


class ScriptOutput(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.result = json.loads(run_script("--json"))
        cls.markdown = run_script()

    def legs(self):
        for config in self.result["configs"]:
            for leg in config["legs"]:
                yield config, leg

    def test_defaults_cover_the_brief(self):
        seen = {(c["ep"], c["tokens"]) for c in self.result["configs"]}
        self.assertEqual(seen, {(ep, t) for ep in (16, 32, 64) for t in (4096, 128)})
        formats = {(l["leg"], l["format"]) for _, l in self.legs()}
        self.assertEqual(len(formats), 7)

    def test_hierarchical_network_bytes_at_most_flat(self):
        for config, leg in self.legs():
            flat, hier = leg["flat"], leg["hier"]
            self.assertLessEqual(hier["network_bytes"], flat["network_bytes"] * (1 + 1e-12),
                                 f"EP{config['ep']} {leg['leg']} {leg['format']}")
            self.assertLess(hier["network_bytes"], flat["network_bytes"])

    def test_every_delivered_row_is_counted_once(self):
        # The figures are doubles (probabilities times token counts, unrounded in the JSON):
        # sums of a few terms agree to about 1e-15 relative; 1e-6 of the delivered rows (under
        # one row) allows for that and still fails a path counted twice or left out (a path
        # carries a share of every token's rows).
        for config, leg in self.legs():
            rt = config["rows_per_token"]
            tokens, row = config["tokens"], leg["row_bytes"] + leg["meta_bytes"]
            flat, hier = leg["flat"], leg["hier"]
            delivered = rt["delivered"] * tokens
            # Flat: every delivered row is the source's own, an NVLink store or a network row.
            self.assertAlmostEqual(rt["self"] * tokens + flat["nvlink_rows"] + flat["network_rows"],
                                   delivered, delta=1e-6 * delivered)
            # Bytes are rows times the row: NVLink + network bytes = what leaves the source.
            self.assertAlmostEqual(flat["nvlink_bytes"] + flat["network_bytes"],
                                   (delivered - rt["self"] * tokens) * row,
                                   delta=1e-6 * delivered * row)
            # Hierarchical: each remote delivery is kept by its forwarder or stored over NVLink by
            # it, so the rows reaching remote nodes are those of the flat network, and the NVLink
            # rows are the own node's plus the forwarded ones.
            remote = (rt["fwd_self"] + rt["nvl_fwd"]) * tokens
            self.assertAlmostEqual(remote, flat["network_rows"], delta=1e-6 * delivered)
            self.assertAlmostEqual(hier["nvlink_rows"],
                                   flat["nvlink_rows"] + rt["nvl_fwd"] * tokens,
                                   delta=1e-6 * delivered)
            self.assertAlmostEqual(rt["self"] * tokens + rt["nvl_direct"] * tokens + remote,
                                   delivered, delta=1e-6 * delivered)
            # A network row reaches at least one rank: hierarchical crossings <= remote deliveries.
            self.assertLessEqual(hier["network_rows"], remote * (1 + 1e-12))
            for path in (flat, hier):
                self.assertEqual(path["delivered_rows"], delivered)
                self.assertAlmostEqual(path["predicted_us_max"],
                                       max(path["t_network_us"], path["t_nvlink_us"],
                                           path["t_hbm_us"]))
                times = (path["t_network_us"], path["t_nvlink_us"], path["t_hbm_us"])
                self.assertAlmostEqual(path["predicted_us_sum"], sum(times))

    def test_ep16_bf16_by_hand(self):
        # EP16 = 2 nodes of 8 ranks, 256 experts, top-8, hidden 7168, 4096 tokens per rank.
        # A node owns 128 experts: P(a node gets a token) = 1 - C(128,8)/C(256,8), and
        # C(128,8)/C(256,8) = (128*127*...*121)/(256*255*...*249) = 852841/244371090, so
        # p_node = 0.9965100577... A rank owns 16: C(240,8)/C(256,8) = 0.5922950291..., so
        # p_rank = 0.4077049708...
        # A dispatch row is 7168 bf16 = 14336 bytes plus 72 bytes of metadata (8 int32 expert ids,
        # 8 fp32 weights, source rank and token), 14408 bytes.
        # Hierarchical network bytes per rank: (2 - 1) nodes * p_node * 4096 * 14408
        #   = 58,809,208.47 bytes; at 45 GB/s (0.9 of 50) that is 1306.87 us.
        # Flat network bytes: 8 remote ranks * p_rank * 4096 * 14408 = 192,486,218.79 bytes.
        # Combine bf16 rows have no metadata: 1 * p_node * 4096 * 14336 = 58,515,325.70 bytes.
        # HBM of the hierarchical dispatch: read x, 4096 * 14336 = 58,720,256; write the
        # 16 * p_rank * 4096 = 26,719.35 delivered rows, * 14408 = 384,972,437.58; stage each
        # network row at the sender (write + NIC read) and at the forwarder (NIC write + read
        # back), 4 * 58,809,208.47 = 235,236,833.88; in all 678,929,527.46 bytes.
        self.assertEqual(Fraction(852841, 244371090),
                         Fraction(128 * 127 * 126 * 125 * 124 * 123 * 122 * 121,
                                  256 * 255 * 254 * 253 * 252 * 251 * 250 * 249))
        config = next(c for c in self.result["configs"] if c["ep"] == 16 and c["tokens"] == 4096)
        self.assertAlmostEqual(config["p_node"], 0.9965100577, places=9)
        self.assertAlmostEqual(config["p_rank"], 0.4077049708, places=9)
        legs = {(l["leg"], l["format"]): l for l in config["legs"]}
        dispatch, combine = legs[("dispatch", "bf16")], legs[("combine", "bf16")]
        self.assertEqual(dispatch["row_bytes"] + dispatch["meta_bytes"], 14408)
        # delta 0.01: the hand figures above are rounded to two decimals.
        self.assertAlmostEqual(dispatch["hier"]["network_bytes"], 58809208.47, delta=0.01)
        self.assertAlmostEqual(dispatch["flat"]["network_bytes"], 192486218.79, delta=0.01)
        self.assertAlmostEqual(combine["hier"]["network_bytes"], 58515325.70, delta=0.01)
        self.assertAlmostEqual(dispatch["hier"]["t_network_us"], 1306.87, delta=0.01)
        self.assertAlmostEqual(dispatch["hier"]["hbm_bytes"], 678929527.46, delta=0.01)
        self.assertEqual(dispatch["hier"]["bound"], "network")
        # The markdown table prints the same row.
        self.assertIn("| 16 | dispatch | bf16 | 14408 | 192.5 | 58.8 | 0.306 |", self.markdown)

    def test_deepep_accounting(self):
        # At 2 nodes a token reaches both nodes with p_node; DeepEP counts both (its own node
        # included), one of them crosses the network: half of its logical bytes are network bytes.
        ep16 = next(d for d in self.result["deepep_v2"] if d["ep"] == 16)
        self.assertAlmostEqual(ep16["network_rows_per_logical_row"], 0.5)
        dispatch = next(l for l in ep16["legs"] if l["leg"] == "dispatch")
        self.assertAlmostEqual(dispatch["deepep_implied_network_gbps"], 45.0)

    def test_docs_show_the_current_output(self):
        # docs/multi-node.md prints the default tables; they must not drift from the script.
        doc = os.path.join(os.path.dirname(SCRIPT), "..", "docs", "multi-node.md")
        with open(doc, encoding="utf-8") as f:
            self.assertIn(self.markdown, f.read(), "regenerate the tables in docs/multi-node.md")

    def test_bad_arguments_fail(self):
        for args in (["--nodes", "3"], ["--hidden", "100"], ["--topk", "0"], ["--tokens", "x"]):
            done = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
            self.assertEqual(done.returncode, 2, args)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        SCRIPT = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
