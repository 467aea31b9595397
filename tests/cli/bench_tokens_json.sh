#!/usr/bin/env bash
# Usage: bench_tokens_json.sh MODE MOE_EP WORKDIR
# Runs one small checked `moe-ep bench --tokens 1,8 --json` (MODE normal or decode, every dtype
# pair) and checks it: the footer "# wrong: 0 OK", a `tokens` column in the table, and with
# check_bench_tokens_json.py the JSON's rows for both sizes, each with max_tokens = its size. The
# same run with --max-tokens 16 must give every row max_tokens 16 and the same outputs.
set -eu
mode=$1
moe_ep=$2
workdir=$3
mkdir -p "$workdir"
per_size="$workdir/$mode.json"
fixed="$workdir/$mode-max16.json"
rm -f "$per_size" "$fixed"
args=(bench --backend cpu --mode "$mode" --tokens "1,8" --ranks 2 --iters 1 --warmup 0 --hidden 256
  --experts 8 --topk 2 --seed 5)
for run in "$per_size" "$fixed"; do
  extra=()
  [ "$run" = "$fixed" ] && extra=(--max-tokens 16)
  out=$("$moe_ep" "${args[@]}" "${extra[@]}" --json "$run")
  echo "$out"
  grep -qF "# wrong: 0 OK" <<<"$out" || { echo "FAIL: no '# wrong: 0 OK'"; exit 1; }
  grep -qE "^tokens +dispatch +combine" <<<"$out" || { echo "FAIL: no tokens column"; exit 1; }
  grep -qF "tokens 1,8/rank" <<<"$out" || { echo "FAIL: header lacks 'tokens 1,8/rank'"; exit 1; }
done
python3 "$(dirname "$0")/check_bench_tokens_json.py" "$mode" "$per_size" "$fixed"
