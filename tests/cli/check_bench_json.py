"""Checks the --json output of `moe-ep bench` (tests/cli/bench_json.sh).

One record per (dispatch, combine) pair, 3 x 4 = 12, with the documented fields, the dtype string
values, no wrong elements, bf16/bf16 within 1e-2 of fp64 math (bf16 rounds twice: y and out, each
2^-9 relative at worst, so ~4e-3 is the bound), fp8 blockwise combine more accurate than fp8
direct cast at the default activation scale (x_std 0.02), and, after a bf16 dispatch, the
int8/e3m4 combine under a third of fp8 blockwise's error (docs/formats.md measured a fifth on
gaussian rows).
"""
import json
import sys

FIELDS = {
    "backend": str, "ranks": int, "tokens": int, "hidden": int, "experts": int, "topk": int,
    "seed": int, "dispatch_dtype": str, "combine_dtype": str, "dispatch_us": (int, float),
    "combine_us": (int, float), "bytes_per_rank": int, "dispatch_bytes": int,
    "combine_bytes": int, "dispatch_algbw_gbps": (int, float),
    "combine_algbw_gbps": (int, float), "rel_err": (int, float), "wrong": int,
    "routing": str, "recv_rows_max": int, "recv_rows_mean": (int, float),
    "expert_rows_max": int, "expert_rows_mean": (int, float),
}
DISPATCH = {"bfloat16", "float8_blockwise", "mxfp4_blockwise"}
COMBINE = {"bfloat16", "float8_blockwise", "float8_direct_cast", "int8_e3m4_blockwise"}
PAIRS = len(DISPATCH) * len(COMBINE)


def main(path):
    with open(path) as f:
        records = json.load(f)
    assert isinstance(records, list) and len(records) == PAIRS, (
        f"want {PAIRS} records, got {records!r}")
    by_pair = {}
    for r in records:
        for name, kind in FIELDS.items():
            assert name in r, f"field {name} missing in {r}"
            assert isinstance(r[name], kind), f"field {name}={r[name]!r} is not {kind}"
        assert r["dispatch_dtype"] in DISPATCH, r["dispatch_dtype"]
        assert r["combine_dtype"] in COMBINE, r["combine_dtype"]
        assert r["backend"] == "cpu", r["backend"]
        assert (r["ranks"], r["tokens"], r["hidden"], r["experts"], r["topk"], r["seed"]) == (
            4, 32, 512, 16, 4, 7), r
        assert r["checked"] is True, r  # a row the bench did not check proves nothing here
        assert r["wrong"] == 0, f"{r['dispatch_dtype']}/{r['combine_dtype']}: wrong={r['wrong']}"
        assert r["dispatch_us"] > 0 and r["combine_us"] > 0, r
        assert r["bytes_per_rank"] == r["dispatch_bytes"] + r["combine_bytes"], r
        # Uniform routing by default; the balance counts of its rows (tools/bench_inputs.h): the
        # means are the rows over 4 ranks and the 32 tokens x 4 slots of 4 ranks over 16 experts.
        assert r["routing"] == "uniform", r
        assert r["recv_rows_max"] >= r["recv_rows_mean"] > 0, r
        assert r["expert_rows_mean"] == 4 * 32 * 4 / 16, r
        assert r["expert_rows_max"] >= r["expert_rows_mean"], r
        # A loose ceiling, the element check (wrong == 0) being the exact one: against fp64 the
        # formats err by about 1e-3 (bf16), 3e-2 (fp8 e4m3, 3 mantissa bits) and 0.11 (mxfp4,
        # e2m1's one mantissa bit; `moe-ep bench --backend cpu` at this shape); a lost scale or
        # row gives about 1.
        assert 0 <= r["rel_err"] < 0.5, r
        # The NCCL baseline's fields appear only with --baseline nccl (GPU only), round_us only
        # with --round-us (bench_json.sh's second run).
        assert "nccl_dispatch_us" not in r and "nccl_combine_us" not in r, r
        assert "round_us" not in r, r
        by_pair[(r["dispatch_dtype"], r["combine_dtype"])] = r
    assert len(by_pair) == PAIRS, sorted(by_pair)

    bf16 = by_pair[("bfloat16", "bfloat16")]
    assert bf16["rel_err"] < 1e-2, f"bf16/bf16 rel_err {bf16['rel_err']} >= 1e-2"
    # Both legs move the same rows; with bf16 on both the byte counts are equal.
    assert bf16["dispatch_bytes"] == bf16["combine_bytes"] > 0, bf16
    for dispatch in DISPATCH:
        block = by_pair[(dispatch, "float8_blockwise")]["rel_err"]
        direct = by_pair[(dispatch, "float8_direct_cast")]["rel_err"]
        assert block < direct, (
            f"{dispatch}: fp8 blockwise combine rel_err {block} >= direct cast {direct}")
    # With a bf16 dispatch the combine format is the only quantization.
    block = by_pair[("bfloat16", "float8_blockwise")]["rel_err"]
    int8 = by_pair[("bfloat16", "int8_e3m4_blockwise")]
    assert int8["rel_err"] < block / 3, (
        f"bf16 dispatch: int8/e3m4 combine rel_err {int8['rel_err']} >= fp8 blockwise {block} / 3")
    # 1 byte per element plus one 2-byte scale per 32: 17/16 of fp8 direct cast's bytes.
    direct_bytes = by_pair[("bfloat16", "float8_direct_cast")]["combine_bytes"]
    assert int8["combine_bytes"] * 16 == direct_bytes * 17, (int8["combine_bytes"], direct_bytes)
    print(f"OK: {len(records)} records; bf16/bf16 rel_err {bf16['rel_err']:.3g}; bf16/int8_e3m4 "
          f"{int8['rel_err']:.3g} vs bf16/fp8 {block:.3g}")


if __name__ == "__main__":
    main(sys.argv[1])
