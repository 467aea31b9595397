#!/usr/bin/env bash
# Usage: bench_decode_json.sh MOE_EP WORKDIR
# Runs the same small checked `moe-ep bench --json` in decode mode and in normal mode (same
# inputs, every dtype pair) and checks both files with check_bench_decode_json.py: the mode field,
# the fields of normal mode, no wrong element, the same bytes per leg in both modes, and the same
# out (equal rel_err) wherever decode mode's expert row bf16(decode(x)) is exact. Then the decode
# run again with --decode-graph round: every record says "decode_graph": "round" and has a
# positive round_us, and the first run's records (the default, leg) have neither field. Last, the
# records' op memory: present everywhere, larger for a decode op than for the same pair's normal
# one.
set -eu
moe_ep=$1
workdir=$2
mkdir -p "$workdir"
decode="$workdir/decode.json"
normal="$workdir/normal.json"
round="$workdir/round.json"
rm -f "$decode" "$normal" "$round"
args=(bench --backend cpu --ranks 4 --tokens 8 --max-tokens 16 --hidden 256 --experts 16 --topk 4
  --iters 2 --warmup 1 --seed 11)
"$moe_ep" "${args[@]}" --mode decode --json "$decode"
"$moe_ep" "${args[@]}" --json "$normal"
python3 "$(dirname "$0")/check_bench_decode_json.py" "$decode" "$normal"
"$moe_ep" "${args[@]}" --mode decode --decode-graph round --json "$round"
python3 - "$decode" "$round" <<'PY'
import json, sys
leg, rnd = (json.load(open(f)) for f in sys.argv[1:3])
assert leg and all("decode_graph" not in r and "round_us" not in r for r in leg), \
    "leg records name a decode_graph or a round_us"
assert len(rnd) == len(leg), f"{len(rnd)} round records against {len(leg)}"
bad = [r for r in rnd if r.get("decode_graph") != "round" or r.get("mode") != "decode"
       or not r.get("round_us", 0) > 0]
assert not bad, f"round records without decode_graph round or a positive round_us: {bad[:1]}"
print(f"decode_graph: {len(rnd)} round records OK")
PY
# Every record gives its op's memory (moe_ep::op_memory); a decode op holds its slabs besides
# normal mode's buffers, so the same pair's decode op holds more.
python3 - "$decode" "$normal" <<'PY'
import json, sys
decode, normal = (json.load(open(f)) for f in sys.argv[1:3])
for r in decode + normal:
    assert r["memory_peer_bytes"] > 0 and r["memory_private_bytes"] >= 0, r
key = lambda r: (r["dispatch_dtype"], r["combine_dtype"])
plain = {key(r): r["memory_peer_bytes"] + r["memory_private_bytes"] for r in normal}
for r in decode:
    assert r["memory_peer_bytes"] + r["memory_private_bytes"] > plain[key(r)], (r, plain[key(r)])
print(f"memory: {len(decode) + len(normal)} records OK")
PY
