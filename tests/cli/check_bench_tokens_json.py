"""Checks the JSON of `moe-ep bench --tokens 1,8` (tests/cli/bench_tokens_json.sh).

Usage: check_bench_tokens_json.py MODE PER_SIZE.json FIXED.json

Both files come from one command each, with two token sizes and every (dispatch, combine) pair:
2 x 12 = 24 records, the sizes in the order given (every pair of size 1, then of size 8), each
checked with no wrong element. In PER_SIZE (no --max-tokens) every record's max_tokens is its
tokens; in FIXED (--max-tokens 16) it is 16. Unused slab rows or a larger op do not change what a
token receives or returns, so each record's bytes and rel_err are equal in both files.
"""
import json
import sys

SIZES = (1, 8)
PAIRS = 12


def load(path, mode, max_tokens):
    with open(path) as f:
        records = json.load(f)
    assert isinstance(records, list) and len(records) == len(SIZES) * PAIRS, (
        f"{path}: want {len(SIZES) * PAIRS} records, got {len(records)}")
    assert [r["tokens"] for r in records] == [t for t in SIZES for _ in range(PAIRS)], (
        f"{path}: tokens in row order {[r['tokens'] for r in records]}")
    by_key = {}
    for r in records:
        assert r["mode"] == mode and r["backend"] == "cpu", r
        assert (r["ranks"], r["hidden"], r["experts"], r["topk"], r["seed"]) == (2, 256, 8, 2, 5), r
        want_max = r["tokens"] if max_tokens is None else max_tokens
        assert r["max_tokens"] == want_max, f"{path}: max_tokens {r['max_tokens']}, want {want_max}"
        assert r["checked"] and r["wrong"] == 0, (
            f"{path} {r['dispatch_dtype']}/{r['combine_dtype']} at {r['tokens']} tokens: "
            f"wrong={r['wrong']}")
        assert r["dispatch_us"] > 0 and r["combine_us"] > 0, r
        assert r["bytes_per_rank"] == r["dispatch_bytes"] + r["combine_bytes"], r
        assert "num_sms" not in r, r
        by_key[(r["dispatch_dtype"], r["combine_dtype"], r["tokens"])] = r
    assert len(by_key) == len(SIZES) * PAIRS, sorted(by_key)
    return by_key


def main(mode, per_size_path, fixed_path):
    per_size = load(per_size_path, mode, None)
    fixed = load(fixed_path, mode, 16)
    assert per_size.keys() == fixed.keys()
    for key, r in sorted(per_size.items()):
        f = fixed[key]
        for field in ("dispatch_bytes", "combine_bytes", "rel_err"):
            assert r[field] == f[field], f"{key} {field}: {r[field]} per size, {f[field]} max 16"
    for d, c, t in per_size:
        if t == SIZES[0]:
            small, large = per_size[(d, c, SIZES[0])], per_size[(d, c, SIZES[1])]
            assert large["dispatch_bytes"] > small["dispatch_bytes"], (d, c, small, large)
    print(f"OK: {mode}, {len(per_size)} records at tokens {SIZES}, max_tokens per size and 16")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
