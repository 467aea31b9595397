#!/usr/bin/env bash
# Usage: bench_json.sh MOE_EP WORKDIR
# Runs a small checked `moe-ep bench --json` over every dtype pair and checks the JSON with
# check_bench_json.py, with the default activation scale (x_std 0.02, docs/bench.md): the
# identity expert's outputs (w * x, about 0.01) reach the e4m3 subnormal range, where fp8 direct
# cast loses precision and blockwise scaling does not. Then one pair with --round-us: its round_us.
set -eu
moe_ep=$1
workdir=$2
mkdir -p "$workdir"
json="$workdir/bench.json"
rm -f "$json"
"$moe_ep" bench --ranks 4 --tokens 32 --hidden 512 --experts 16 --topk 4 --iters 2 --warmup 1 \
  --seed 7 --json "$json"
python3 "$(dirname "$0")/check_bench_json.py" "$json"
# --round-us: each record gains round_us, a round's time (positive), which the run above has not.
rounds="$workdir/bench-rounds.json"
rm -f "$rounds"
"$moe_ep" bench --ranks 2 --tokens 8 --hidden 256 --experts 4 --topk 2 --iters 2 --warmup 1 \
  --dispatch-dtype bf16 --combine-dtype bf16 --round-us --json "$rounds"
python3 -c '
import json, sys
records = json.load(open(sys.argv[1]))
assert len(records) == 1 and records[0]["round_us"] > 0, records
' "$rounds"
