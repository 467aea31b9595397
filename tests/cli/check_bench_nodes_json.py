"""Checks the JSON of `moe-ep bench --ranks-per-node L` (tests/cli/bench_nodes_json.sh).

Usage:
  check_bench_nodes_json.py FILE RANKS L EXPERTS TOPK TOKENS SEED MASKED
      L is the --ranks-per-node given, 0 when none was. Every record must be checked with no
      wrong element. The routing of the run is regenerated here from the seed, as the bench
      documents its inputs (tools/bench_inputs.cc: a splitmix64 hash of seed, rank, stream and
      index; a partial Fisher-Yates shuffle per token; a slot masked when its uniform is below
      MASKED), and the byte fields are recomputed from it: dispatch_bytes and combine_bytes
      from the rows sent to other ranks (which shows that the routing here is the run's), and,
      with several nodes (0 < L < RANKS), dispatch_net_bytes and combine_net_bytes from the rows
      sent to other nodes: a token once per other node owning one of its experts. With L = 1
      every other rank is another node, so the net bytes must equal the bytes; with 1 < L < RANKS
      they must lie strictly between 0 and the bytes. On one node (L = 0 or RANKS) the records
      have no ranks_per_node and no net fields.
  check_bench_nodes_json.py --same A B
      A and B hold the same records but for the times and the bandwidths derived from them
      (one node with --ranks-per-node RANKS against no --ranks-per-node).
"""
import json
import sys

MASK = (1 << 64) - 1
STREAM_ROUTE, STREAM_MASK = 2, 4
TIMED = {"dispatch_us", "combine_us", "dispatch_algbw_gbps", "combine_algbw_gbps"}


def splitmix(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def hash64(seed, rank, stream, index):
    h = splitmix(seed)
    h = splitmix(h ^ rank)
    h = splitmix(h ^ stream)
    return splitmix(h ^ index)


def uniform(h):
    return ((h >> 11) + 0.5) * 2.0**-53


def routing(rank, experts, topk, tokens, seed, masked):
    """topk_idx of one rank: [tokens][topk], -1 for a masked slot."""
    rows = []
    for t in range(tokens):
        perm = list(range(experts))
        slots = []
        for j in range(topk):
            pick = j + hash64(seed, rank, STREAM_ROUTE, t * topk + j) % (experts - j)
            perm[j], perm[pick] = perm[pick], perm[j]
            off = uniform(hash64(seed, rank, STREAM_MASK, t * topk + j)) < masked
            slots.append(-1 if off else perm[j])
        rows.append(slots)
    return rows


def count_rows(ranks, per_node, experts, topk, tokens, seed, masked):
    """(rows to other ranks, rows to other nodes), summed over the source ranks."""
    per_rank = experts // ranks
    remote = net = 0
    for src in range(ranks):
        for slots in routing(src, experts, topk, tokens, seed, masked):
            dests = {e // per_rank for e in slots if e >= 0}
            remote += len(dests - {src})
            nodes = {d // per_node for d in dests}
            net += len(nodes - {src // per_node})
    return remote, net


def leg_row_bytes(bytes_, rows, ranks):
    """The leg's bytes per row, from bytes = rows * row // ranks (row is a whole number)."""
    row = round(bytes_ * ranks / rows)
    assert rows * row // ranks == bytes_, (bytes_, rows, ranks, row)
    return row


def check_run(path, ranks, per_node, experts, topk, tokens, seed, masked):
    with open(path) as f:
        records = json.load(f)
    assert isinstance(records, list) and records, f"{path}: no records"
    several = 0 < per_node < ranks
    remote, net = count_rows(ranks, per_node or ranks, experts, topk, tokens, seed, masked)
    assert remote > 0, f"{path}: no row leaves its rank; choose another shape"
    for r in records:
        pair = f"{r['dispatch_dtype']}/{r['combine_dtype']}"
        assert r["checked"] and r["wrong"] == 0, f"{path} {pair}: wrong={r['wrong']}"
        assert (r["ranks"], r["experts"], r["topk"], r["tokens"], r["seed"]) == (
            ranks, experts, topk, tokens, seed), r
        if not several:
            for field in ("ranks_per_node", "dispatch_net_bytes", "combine_net_bytes"):
                assert field not in r, f"{path} {pair}: {field} on one node"
            continue
        assert r["ranks_per_node"] == per_node, r
        for leg in ("dispatch", "combine"):
            bytes_, got = r[f"{leg}_bytes"], r[f"{leg}_net_bytes"]
            row = leg_row_bytes(bytes_, remote, ranks)
            if r[f"{leg}_dtype"] == "bfloat16":
                assert row == 2 * r["hidden"], f"{path} {pair} {leg}: {row} bytes per bf16 row"
            want = net * row // ranks
            assert got == want, f"{path} {pair} {leg}: net bytes {got}, want {want}"
            if per_node == 1:
                assert got == bytes_, f"{path} {pair} {leg}: L=1 net {got} != bytes {bytes_}"
            else:
                assert 0 < got < bytes_, f"{path} {pair} {leg}: net {got}, bytes {bytes_}"
    print(f"OK: {path}: {len(records)} records, L={per_node}, {remote} rows to other ranks, "
          f"{net} to other nodes")


def check_same(path_a, path_b):
    with open(path_a) as f:
        a = json.load(f)
    with open(path_b) as f:
        b = json.load(f)
    strip = lambda rs: [{k: v for k, v in r.items() if k not in TIMED} for r in rs]
    assert strip(a) == strip(b), f"{path_a} and {path_b} differ beyond the times"
    print(f"OK: {path_a} = {path_b} but for the times")


if __name__ == "__main__":
    if sys.argv[1] == "--same":
        check_same(sys.argv[2], sys.argv[3])
    else:
        path, *numbers = sys.argv[1:]
        ranks, per_node, experts, topk, tokens, seed = (int(v) for v in numbers[:6])
        check_run(path, ranks, per_node, experts, topk, tokens, seed, float(numbers[6]))
