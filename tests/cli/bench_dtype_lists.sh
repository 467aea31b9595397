#!/usr/bin/env bash
# Usage: bench_dtype_lists.sh MOE_EP WORKDIR
# Runs a small checked `moe-ep bench` with a list on each dtype option (--dispatch-dtype fp4,bf16
# --combine-dtype int8_e3m4,fp8) and checks its JSON: exactly the 4 pairs of the two lists, in
# the order given (dispatch outer, combine inner), each checked with no wrong element.
set -eu
moe_ep=$1
workdir=$2
mkdir -p "$workdir"
json="$workdir/lists.json"
rm -f "$json"
out=$("$moe_ep" bench --backend cpu --ranks 2 --tokens 4 --hidden 256 --experts 4 --topk 2 \
  --iters 1 --warmup 0 --seed 11 --dispatch-dtype fp4,bf16 --combine-dtype int8_e3m4,fp8 \
  --json "$json")
echo "$out"
grep -qF "# wrong: 0 OK" <<<"$out" || { echo "FAIL: no '# wrong: 0 OK'"; exit 1; }
python3 - "$json" <<'PY'
import json, sys
records = json.load(open(sys.argv[1]))
pairs = [(r["dispatch_dtype"], r["combine_dtype"]) for r in records]
print("pairs:", pairs)
want = [(d, c) for d in ("fp4", "bf16") for c in ("int8_e3m4", "fp8")]
names = {"mxfp4_blockwise": "fp4", "bfloat16": "bf16", "float8_blockwise": "fp8",
         "int8_e3m4_blockwise": "int8_e3m4"}
short = [(names.get(d, d), names.get(c, c)) for d, c in pairs]
assert short == want, f"pairs {short}, want {want}"
assert all(r["checked"] and r["wrong"] == 0 for r in records), records
PY
