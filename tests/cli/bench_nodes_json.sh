#!/usr/bin/env bash
# Usage: bench_nodes_json.sh MOE_EP WORKDIR
# Small checked `moe-ep bench --ranks-per-node L --json` runs over every dtype pair on the CPU
# backend: 4 ranks as 2 nodes of 2 and as 4 nodes of 1, and 8 ranks as 2 nodes of 4 with masked
# slots. Each must end in "# wrong: 0 OK" (combine checked against the reference's by-node sum)
# and show the d_net_MB and c_net_MB columns; check_bench_nodes_json.py recomputes the net bytes
# from the seed's routing. --ranks-per-node 4 on 4 ranks is one node: no net columns, and the
# same JSON as without the option but for the times.
set -eu
moe_ep=$1
workdir=$2
check="$(dirname "$0")/check_bench_nodes_json.py"
mkdir -p "$workdir"
small=(bench --backend cpu --tokens 8 --hidden 256 --iters 1 --warmup 0)

# run NAME WANT_NET_COLUMNS ARGS...: runs moe-ep with the small shape and --json NAME.json.
run() {
  local name=$1 columns=$2
  shift 2
  local json="$workdir/$name.json"
  rm -f "$json"
  out=$("$moe_ep" "${small[@]}" "$@" --json "$json")
  echo "$out"
  grep -qF "# wrong: 0 OK" <<<"$out" || { echo "FAIL: $name: no '# wrong: 0 OK'"; exit 1; }
  if [ "$columns" = yes ]; then
    grep -qE "#wrong d_net_MB c_net_MB$" <<<"$out" || { echo "FAIL: $name: no net columns"; exit 1; }
    grep -qF "# nodes: " <<<"$out" || { echo "FAIL: $name: no nodes line"; exit 1; }
  elif grep -qE "net_MB|# nodes" <<<"$out"; then
    echo "FAIL: $name: net columns on one node"
    exit 1
  fi
}

run l2 yes --ranks 4 --ranks-per-node 2 --experts 8 --topk 2
python3 "$check" "$workdir/l2.json" 4 2 8 2 8 1 0
run l1 yes --ranks 4 --ranks-per-node 1 --experts 8 --topk 2
python3 "$check" "$workdir/l1.json" 4 1 8 2 8 1 0
run w8_l4_masked yes --ranks 8 --ranks-per-node 4 --experts 16 --topk 4 --masked-fraction 0.5 \
  --seed 3 --dispatch-dtype fp8
python3 "$check" "$workdir/w8_l4_masked.json" 8 4 16 4 8 3 0.5
run l4 no --ranks 4 --ranks-per-node 4 --experts 8 --topk 2
python3 "$check" "$workdir/l4.json" 4 4 8 2 8 1 0
run one_node no --ranks 4 --experts 8 --topk 2
python3 "$check" "$workdir/one_node.json" 4 0 8 2 8 1 0
python3 "$check" --same "$workdir/l4.json" "$workdir/one_node.json"
