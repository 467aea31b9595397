"""Checks `moe-ep bench --mode decode --json` against the same run in normal mode
(tests/cli/bench_decode_json.sh).

Both files hold one record per (dispatch, combine) pair, 3 x 4 = 12, with the fields that
python/moe_ep/report.py and check_bench_json.py read, and a "mode" field: "decode" in the first
file, "normal" in the second. Every record is checked with no wrong element. Both modes move the
same rows (a token once per destination rank, one partial sum back per (source, token)), so the
byte counts of each pair are equal. With a bf16 or mxfp4 dispatch the decoded row is exact in
bf16, so decode mode's expert output bf16(decode(x)) with the op's weighting equals normal mode's
identity expert bit for bit (docs/decode-mode.md, "Why it equals normal mode"): out, and with it
rel_err, is the same in both modes. fp8 blockwise rows decode to values bf16 rounds, so there
only the error's size is compared.
"""
import json
import sys

FIELDS = {
    "backend": str, "mode": str, "ranks": int, "tokens": int, "max_tokens": int, "hidden": int,
    "experts": int, "topk": int, "seed": int, "dispatch_dtype": str, "combine_dtype": str,
    "dispatch_us": (int, float), "combine_us": (int, float), "bytes_per_rank": int,
    "dispatch_bytes": int, "combine_bytes": int, "dispatch_algbw_gbps": (int, float),
    "combine_algbw_gbps": (int, float), "rel_err": (int, float), "checked": bool, "wrong": int,
}
PAIRS = 12
EXACT_DISPATCH = {"bfloat16", "mxfp4_blockwise"}


def load(path, mode):
    with open(path) as f:
        records = json.load(f)
    assert isinstance(records, list) and len(records) == PAIRS, (
        f"{path}: want {PAIRS} records, got {records!r}")
    by_pair = {}
    for r in records:
        for name, kind in FIELDS.items():
            assert name in r, f"{path}: field {name} missing in {r}"
            assert isinstance(r[name], kind), f"{path}: field {name}={r[name]!r} is not {kind}"
        assert r["mode"] == mode, f"{path}: mode {r['mode']!r}, want {mode!r}"
        assert r["backend"] == "cpu", r
        assert (r["ranks"], r["tokens"], r["max_tokens"], r["hidden"], r["experts"], r["topk"],
                r["seed"]) == (4, 8, 16, 256, 16, 4, 11), r
        assert r["checked"] and r["wrong"] == 0, (
            f"{path} {r['dispatch_dtype']}/{r['combine_dtype']}: wrong={r['wrong']}")
        assert r["dispatch_us"] > 0 and r["combine_us"] > 0, r
        assert r["bytes_per_rank"] == r["dispatch_bytes"] + r["combine_bytes"], r
        assert 0 <= r["rel_err"] < 0.5, r
        assert "nccl_dispatch_us" not in r and "nccl_combine_us" not in r, r
        by_pair[(r["dispatch_dtype"], r["combine_dtype"])] = r
    assert len(by_pair) == PAIRS, sorted(by_pair)
    return by_pair


def main(decode_path, normal_path):
    decode = load(decode_path, "decode")
    normal = load(normal_path, "normal")
    assert decode.keys() == normal.keys(), (sorted(decode), sorted(normal))
    exact = 0
    for pair, d in sorted(decode.items()):
        n = normal[pair]
        for field in ("dispatch_bytes", "combine_bytes"):
            assert d[field] == n[field] > 0, f"{pair} {field}: decode {d[field]}, normal {n[field]}"
        if pair[0] in EXACT_DISPATCH:
            assert d["rel_err"] == n["rel_err"], (
                f"{pair}: rel_err decode {d['rel_err']} != normal {n['rel_err']}")
            exact += 1
        else:
            # fp8 blockwise: decode mode rounds each decoded value to bf16 once more, a relative
            # error of at most 2^-9 (bf16's unit roundoff) per element, small beside normal
            # mode's fp8 error (e4m3 keeps 3 mantissa bits, rel_err a few 1e-2). Twice normal's
            # plus 1e-3 holds that with room and fails a decode that loses scales or rows.
            assert d["rel_err"] < 2 * n["rel_err"] + 1e-3, (
                f"{pair}: rel_err decode {d['rel_err']} far above normal {n['rel_err']}")
    print(f"OK: {len(decode)} decode records, bytes equal to normal mode's, rel_err equal on "
          f"{exact} pairs; bf16/bf16 rel_err {decode[('bfloat16', 'bfloat16')]['rel_err']:.3g}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
