#!/usr/bin/env bash
# Usage: bench_decode_json.sh MOE_EP WORKDIR
# Runs the same small checked `moe-ep bench --json` in decode mode and in normal mode (same
# inputs, every dtype pair) and checks both files with check_bench_decode_json.py: the mode field,
# the fields of normal mode, no wrong element, the same bytes per leg in both modes, and the same
# out (equal rel_err) wherever decode mode's expert row bf16(decode(x)) is exact.
set -eu
moe_ep=$1
workdir=$2
mkdir -p "$workdir"
decode="$workdir/decode.json"
normal="$workdir/normal.json"
rm -f "$decode" "$normal"
args=(bench --backend cpu --ranks 4 --tokens 8 --max-tokens 16 --hidden 256 --experts 16 --topk 4
  --iters 2 --warmup 1 --seed 11)
"$moe_ep" "${args[@]}" --mode decode --json "$decode"
"$moe_ep" "${args[@]}" --json "$normal"
python3 "$(dirname "$0")/check_bench_decode_json.py" "$decode" "$normal"
