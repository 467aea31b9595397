#!/bin/bash
# Prepared in v40 for the next session, NOT RUN YET: the decode bench's round_us on the GPU
# (--decode-graph round: each leg timed between event nodes inside one graph a round, and
# round_us from 16 rounds in one graph with no timer between them, per round). v40 run T found an
# event record node in a graph to cost about 2.5 us of latency; predicted: round_us 3-6 us below
# disp_us + comb_us at every size. fp8 dispatch with every combine and every dispatch with a bf16
# combine, 1 / 32 / 128 / 256 tokens, two rounds; then the JSON of one row. About 3 minutes.
#   bash docs/results/v40-one-h200/next-runU.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j16 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
M=build/gpu/tools/moe-ep
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round"
for r in 1 2; do
  echo "== round $r fp8 x all"; timeout 150 $M $B --dispatch-dtype fp8 --combine-dtype all
  echo "== round $r all x bf16"; timeout 150 $M $B --dispatch-dtype all --combine-dtype bf16
done > $OUT/decode.log 2>&1
grep -E "^==|^ +[0-9]+ +[a-z0-9]+ +[a-z0-9_]+ +[0-9]|wrong|rror" $OUT/decode.log | awk '/^ +[0-9]/{print $1, $2, $3, $4, $5, $NF; next} {print}'
$M bench --backend cuda --ranks 1 --mode decode --tokens 128 --iters 20 --warmup 5 --decode-graph round \
  --dispatch-dtype fp8 --combine-dtype bf16 --json $OUT/round.json > /dev/null 2>&1
python3 -c "import json; r=json.load(open('$OUT/round.json'))[0]; print(r['decode_graph'], r['dispatch_us'], r['combine_us'], r['round_us'])"
t end
