#!/usr/bin/env python3
"""Bytes and time of moe-ep's dispatch and combine across nodes: a closed-form cost model.

For the DeepSeek-V3 shape (hidden 7168, 256 experts, top-8) on nodes of 8 GPUs, this computes per
rank and per leg the expected bytes over the network, over NVLink and through HBM, for two ways
of crossing nodes: the hierarchical path moe-ep builds (a token crosses the network once per remote
node that owns one of its experts, to a forwarder that fans it out over NVLink; combine returns
one partial per remote node) and a flat all-to-all (a token crosses the network once per remote
rank that owns one of its experts). Expectations are exact under uniform random top-k routing
without replacement; times are bytes over rates, as a bracket between full overlap (max of the
three) and none (their sum). docs/multi-node.md explains the
model, its assumptions and its limits. Python 3 standard library only; nothing is random.

  tools/cost_model.py                 markdown tables (the ones in docs/multi-node.md)
  tools/cost_model.py --json          the same numbers as JSON
"""

import argparse
import json
import math
import sys
from fractions import Fraction

# Wire formats as src/formats/codecs.h defines them: payload bits per element (kBitsPerElem),
# elements per scale (kBlock, 0 = no scales) and bytes of one scale (sizeof(Scale)); block sizes
# from include/moe_ep/dtypes.h. docs/formats.md has the same facts as a table.
DISPATCH_FORMATS = {
    "bf16": (16, 0, 0),  # Bf16Wire
    "fp8": (8, 128, 4),  # Fp8BlockWire: e4m3, one fp32 scale per 128
    "fp4": (4, 32, 1),  # Mxfp4Wire: e2m1 pairs, one e8m0 scale per 32
}
COMBINE_FORMATS = {
    "bf16": (16, 0, 0),  # Bf16Wire
    "fp8": (8, 128, 4),  # Fp8BlockWire
    "fp8_direct_cast": (8, 0, 0),  # Fp8DirectWire
    "int8_e3m4": (8, 32, 2),  # Int8E3m4Wire: one 16-bit scale word per 32
}

# Rates per GPU and direction, in bytes per second (docs/multi-node.md, "Rates").
NIC_NOMINAL_GBPS = 50.0  # one 400 Gb/s NIC per GPU (8 per node): nominal
NIC_EFFICIENCY = 0.9  # assumed achievable fraction of the nominal NIC rate (not measured here)
NVLINK_GBPS = 394.0  # docs/perf-notes.md, Reference figures: peer copy, copy engine, one way
HBM_GBPS = 4200.0  # docs/perf-notes.md, Reference figures: device copy, read + write counted

# DeepEP V2's published internode figures on Hopper (DeepEP V2 README, Performance: SM90, CX7,
# 8K tokens per batch, hidden 7168, top-8, fp8 dispatch, bf16 combine), "logical" bandwidth in
# GB/s per GPU: (nodes, dispatch, combine).
DEEPEP_V2_SM90 = [(2, 90.0, 81.0), (4, 61.0, 61.0)]
DEEPEP_V2_TOKENS = 8192


def row_bytes(fmt, hidden):
    """Bytes of one row of `hidden` elements on the wire: payload plus scales."""
    bits, block, scale_bytes = fmt
    if block and hidden % block:
        raise ValueError(f"hidden {hidden} is not a multiple of the block {block}")
    return hidden * bits // 8 + (hidden // block * scale_bytes if block else 0)


def dispatch_meta_bytes(topk):
    """Metadata per dispatched row (src/core/layout.h): K int32 local expert ids, K fp32 weights,
    the source rank and the source token (int32 each)."""
    return 8 * topk + 8


def p_receive(num_experts, topk, owned):
    """Probability that a holder of `owned` of the experts receives a token when its top-k are k
    distinct experts drawn uniformly: 1 - C(E - owned, K) / C(E, K), as an exact fraction."""
    return 1 - Fraction(math.comb(num_experts - owned, topk), math.comb(num_experts, topk))


def rows_per_token(num_experts, topk, world, ranks_per_node):
    """Expected rows per token of one source rank, by path, as exact fractions. By symmetry this
    is also what one rank sends, forwards and receives per token of its own batch.

      self        rows the source keeps (it owns one of the token's experts)
      nvl_direct  rows to the other ranks of the source's node, over NVLink
      flat_net    flat all-to-all: rows to ranks of other nodes, each over the network
      hier_net    hierarchical: rows to forwarders, one per remote node with one of the experts
      fwd_self    hierarchical: rows a forwarder keeps for its own experts (no NVLink hop)
      nvl_fwd     hierarchical: rows a forwarder stores over NVLink into its node's other ranks
      delivered   rows that reach an owning rank, every path together (= W * p_rank)
    """
    if world % ranks_per_node or num_experts % world or not 1 <= topk <= num_experts:
        raise ValueError("need W % L == 0, E % W == 0 and 1 <= K <= E")
    nodes = world // ranks_per_node
    p_rank = p_receive(num_experts, topk, num_experts // world)
    p_node = p_receive(num_experts, topk, num_experts // nodes)
    local = ranks_per_node - 1
    return {
        "p_rank": p_rank,
        "p_node": p_node,
        "self": p_rank,
        "nvl_direct": local * p_rank,
        "flat_net": (world - ranks_per_node) * p_rank,
        "hier_net": (nodes - 1) * p_node,
        "fwd_self": (nodes - 1) * p_rank,
        "nvl_fwd": (nodes - 1) * local * p_rank,
        "delivered": world * p_rank,
    }


def leg_costs(leg, wire_row, hidden, tokens, rows, rates):
    """Bytes per rank of one leg for the flat and the hierarchical path, and the times they imply.

    wire_row: bytes of one row on the wire (dispatch: including its metadata). HBM counts every
    byte read or written in the rank's memory (no caches): the bf16 input (dispatch reads x, combine
    reads y and writes out), each delivered row written where it lands (combine: and read back by
    the reduce), and rows that cross the network staged in memory for the NIC on the sending side
    (written, then read by the NIC). The hierarchical path also stages at the forwarder: dispatch
    rows land there and are read back to fan out; combine partials are written for the NIC and
    land at the source, where they are read by the final sum.
    """
    bf16_row = 2 * hidden
    delivered = rows["delivered"] * tokens
    direct = (rows["self"] + rows["nvl_direct"]) * tokens
    out = {}
    for path in ("flat", "hier"):
        net = rows[path + "_net"] * tokens
        if path == "flat":
            nvl = rows["nvl_direct"] * tokens
        else:
            nvl = (rows["nvl_direct"] + rows["nvl_fwd"]) * tokens
        if leg == "dispatch":
            hbm = bf16_row * tokens + wire_row * delivered + 2 * wire_row * net
        else:
            hbm = bf16_row * delivered + 2 * wire_row * delivered + bf16_row * tokens
            hbm += 2 * wire_row * net
        if path == "hier":
            hbm += 2 * wire_row * net
        t = {
            "network": float(net * wire_row) / rates["nic"],
            "nvlink": float(nvl * wire_row) / rates["nvlink"],
            "hbm": float(hbm) / rates["hbm"],
        }
        out[path] = {
            "network_rows": float(net),
            "nvlink_rows": float(nvl),
            "direct_rows": float(direct),
            "delivered_rows": float(delivered),
            "network_bytes": float(net * wire_row),
            "nvlink_bytes": float(nvl * wire_row),
            "hbm_bytes": float(hbm),
            "t_network_us": t["network"] * 1e6,
            "t_nvlink_us": t["nvlink"] * 1e6,
            "t_hbm_us": t["hbm"] * 1e6,
            "predicted_us_max": max(t.values()) * 1e6,
            "predicted_us_sum": sum(t.values()) * 1e6,
            "bound": max(t, key=t.get),
        }
    return out


def model(args):
    rates = {
        "nic": args.nic_gbps * args.nic_efficiency * 1e9,
        "nvlink": args.nvlink_gbps * 1e9,
        "hbm": args.hbm_gbps * 1e9,
    }
    result = {
        "shape": {"hidden": args.hidden, "experts": args.experts, "topk": args.topk},
        "ranks_per_node": args.ranks_per_node,
        "rates_gbps": {
            "nic_nominal": args.nic_gbps,
            "nic_efficiency": args.nic_efficiency,
            "nic": args.nic_gbps * args.nic_efficiency,
            "nvlink": args.nvlink_gbps,
            "hbm": args.hbm_gbps,
        },
        "routing": "uniform random top-k without replacement; exact expectations",
        "configs": [],
        "deepep_v2": [],
    }
    legs = [("dispatch", name, f) for name, f in DISPATCH_FORMATS.items()]
    legs += [("combine", name, f) for name, f in COMBINE_FORMATS.items()]
    for tokens in args.tokens:
        for nodes in args.nodes:
            world = nodes * args.ranks_per_node
            rows = rows_per_token(args.experts, args.topk, world, args.ranks_per_node)
            config = {
                "tokens": tokens,
                "nodes": nodes,
                "ep": world,
                "p_rank": float(rows["p_rank"]),
                "p_node": float(rows["p_node"]),
                "rows_per_token": {k: float(v) for k, v in rows.items()},
                "legs": [],
            }
            for leg, name, fmt in legs:
                wire_row = row_bytes(fmt, args.hidden)
                meta = dispatch_meta_bytes(args.topk) if leg == "dispatch" else 0
                costs = leg_costs(leg, wire_row + meta, args.hidden, tokens, rows, rates)
                config["legs"].append(
                    {"leg": leg, "format": name, "row_bytes": wire_row, "meta_bytes": meta,
                     **costs})
            result["configs"].append(config)
    for nodes, dispatch_gbps, combine_gbps in DEEPEP_V2_SM90:
        result["deepep_v2"].append(deepep_comparison(args, rates, nodes, dispatch_gbps,
                                                     combine_gbps))
    return result


def deepep_comparison(args, rates, nodes, dispatch_gbps, combine_gbps):
    """DeepEP V2's figure in our accounting, and our prediction in its accounting.

    Its test (tests/ep/test_ep.py of the DeepEP repository) divides by the time the bytes of every
    (token, node) pair where the node owns one of the token's experts, the source's own node
    included ("logical bandwidth ... contains local rank traffic", its README). Of those pairs,
    (N - 1) / N cross the network, so per row: network rate = logical rate * (N-1) p_node /
    (N p_node). The same ratio turns our predicted time into a logical rate.
    """
    world = nodes * args.ranks_per_node
    rows = rows_per_token(args.experts, args.topk, world, args.ranks_per_node)
    logical = nodes * rows["p_node"]
    ratio = float(rows["hier_net"] / logical)
    entry = {"nodes": nodes, "ep": world, "tokens": DEEPEP_V2_TOKENS,
             "network_rows_per_logical_row": ratio, "legs": []}
    for leg, gbps, name, fmt in (("dispatch", dispatch_gbps, "fp8", DISPATCH_FORMATS["fp8"]),
                                 ("combine", combine_gbps, "bf16", COMBINE_FORMATS["bf16"])):
        wire_row = row_bytes(fmt, args.hidden)
        meta = dispatch_meta_bytes(args.topk) if leg == "dispatch" else 0
        costs = leg_costs(leg, wire_row + meta, args.hidden, DEEPEP_V2_TOKENS, rows, rates)
        logical_bytes = float(logical) * DEEPEP_V2_TOKENS * (wire_row + meta)
        predicted = costs["hier"]["predicted_us_max"] * 1e-6
        entry["legs"].append({
            "leg": leg,
            "format": name,
            "deepep_logical_gbps": gbps,
            "deepep_implied_network_gbps": gbps * ratio,
            "deepep_fraction_of_nominal_nic": gbps * ratio / args.nic_gbps,
            "model_hier_us": costs["hier"]["predicted_us_max"],
            "model_logical_gbps": logical_bytes / predicted / 1e9,
        })
    return entry


def us_range(c):
    return f"{c['predicted_us_max']:.0f}-{c['predicted_us_sum']:.0f}"


def markdown(result):
    r = result["rates_gbps"]
    s = result["shape"]
    lines = [
        f"Shape: hidden {s['hidden']}, {s['experts']} experts, top-{s['topk']}; "
        f"{result['ranks_per_node']} GPUs per node; {result['routing']}.",
        f"Rates per GPU and direction: network {r['nic']:.0f} GB/s ({r['nic_efficiency']:.2f} of "
        f"{r['nic_nominal']:.0f} nominal), NVLink {r['nvlink']:.0f} GB/s, HBM {r['hbm']:.0f} GB/s "
        "(read + write). MB = 10^6 bytes per rank and leg; times in us as max-sum "
        "(full overlap - none).",
        "",
        "| EP | nodes | p(rank) | p(node) | rows/token: flat net | hier net | "
        "hier NVLink | delivered |",
        "|---|---|---|---|---|---|---|---|",
    ]
    seen = set()
    for c in result["configs"]:
        if c["ep"] in seen:  # the same for every batch size
            continue
        seen.add(c["ep"])
        rt = c["rows_per_token"]
        lines.append(
            f"| {c['ep']} | {c['nodes']} | {c['p_rank']:.4f} | {c['p_node']:.4f} "
            f"| {rt['flat_net']:.3f} | {rt['hier_net']:.3f} | "
            f"{rt['nvl_direct'] + rt['nvl_fwd']:.3f} | {rt['delivered']:.3f} |")
    for tokens in sorted({c["tokens"] for c in result["configs"]}, reverse=True):
        lines += [
            "",
            f"**{tokens} tokens per rank**",
            "",
            "| EP | leg | format | B/row | net MB flat | net MB hier | hier/flat | "
            "NVLink MB flat | NVLink MB hier | HBM MB hier | flat us | hier us | hier bound |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for c in (c for c in result["configs"] if c["tokens"] == tokens):
            for g in c["legs"]:
                f, h = g["flat"], g["hier"]
                row = g["row_bytes"] + g["meta_bytes"]
                lines.append(
                    f"| {c['ep']} | {g['leg']} | {g['format']} | {row} "
                    f"| {f['network_bytes'] / 1e6:.1f} | {h['network_bytes'] / 1e6:.1f} "
                    f"| {h['network_bytes'] / f['network_bytes']:.3f} "
                    f"| {f['nvlink_bytes'] / 1e6:.1f} | {h['nvlink_bytes'] / 1e6:.1f} "
                    f"| {h['hbm_bytes'] / 1e6:.1f} | {us_range(f)} | {us_range(h)} "
                    f"| {h['bound']} |")
    lines += [
        "",
        f"**DeepEP V2 (SM90, CX7, {DEEPEP_V2_TOKENS} tokens, fp8 dispatch, bf16 combine) in the "
        "same terms**",
        "",
        "| EP | leg | DeepEP logical GB/s | network rows per logical row | DeepEP network GB/s "
        "| of nominal NIC | model hier us | model logical GB/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in result["deepep_v2"]:
        for g in d["legs"]:
            lines.append(
                f"| {d['ep']} | {g['leg']} {g['format']} | {g['deepep_logical_gbps']:.0f} "
                f"| {d['network_rows_per_logical_row']:.3f} "
                f"| {g['deepep_implied_network_gbps']:.1f} "
                f"| {g['deepep_fraction_of_nominal_nic']:.2f} | {g['model_hier_us']:.0f} "
                f"| {g['model_logical_gbps']:.1f} |")
    return "\n".join(lines) + "\n"


def int_list(text):
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}")
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"values must be positive: {text!r}")
    return values


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--experts", type=int, default=256)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--tokens", type=int_list, default=[4096, 128],
                   help="tokens per rank, comma-separated (default 4096,128: prefill, decode)")
    p.add_argument("--nodes", type=int_list, default=[2, 4, 8],
                   help="node counts, comma-separated (default 2,4,8: EP 16, 32, 64)")
    p.add_argument("--ranks-per-node", type=int, default=8)
    p.add_argument("--nic-gbps", type=float, default=NIC_NOMINAL_GBPS,
                   help="nominal network GB/s per GPU and direction (default 50: 400 Gb/s)")
    p.add_argument("--nic-efficiency", type=float, default=NIC_EFFICIENCY,
                   help="assumed achievable fraction of --nic-gbps (default 0.9)")
    p.add_argument("--nvlink-gbps", type=float, default=NVLINK_GBPS)
    p.add_argument("--hbm-gbps", type=float, default=HBM_GBPS)
    p.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = p.parse_args(argv)
    for nodes in args.nodes:
        world = nodes * args.ranks_per_node
        if args.experts % world or not 1 <= args.topk <= args.experts:
            p.error(f"--experts {args.experts} must be a multiple of EP {world} and "
                    f"--topk {args.topk} in [1, {args.experts}]")
    for name in ("nic_gbps", "nic_efficiency", "nvlink_gbps", "hbm_gbps", "hidden",
                 "ranks_per_node"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    for fmt in list(DISPATCH_FORMATS.values()) + list(COMBINE_FORMATS.values()):
        if fmt[1] and args.hidden % fmt[1]:
            p.error(f"--hidden {args.hidden} must be a multiple of {fmt[1]}")
    return args


def main(argv=None):
    args = parse_args(argv)
    result = model(args)
    if args.json:
        json.dump(result, sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
