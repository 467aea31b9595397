#!/bin/bash
# v45 run K: the SM clock while the decode bench replays its graphs (nvidia-smi sampled every
# 20 ms beside it), to read the chain's round trips: at one token every step of the decode chain
# costs 0.5-1 us (run P's points), several times an L2 round trip at boost clock.
#   bash docs/results/v45-one-h200/runK.sh      (logs to $OUT)
set -u
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
nvidia-smi -q -d CLOCK,PERFORMANCE > $OUT/clocks-idle.txt 2>&1
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j16 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,pstate,clocks_throttle_reasons.active \
  --format=csv -lms 20 > $OUT/clocks.csv 2>&1 &
S=$!
for tok in 1 128; do
  echo "== decode $tok $(date +%T.%N)"
  timeout 60 build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens $tok \
    --dispatch-dtype fp8 --combine-dtype bf16 --decode-graph round --iters 20000 --warmup 20
done > $OUT/bench.log 2>&1
echo "== end $(date +%T.%N)" >> $OUT/bench.log
kill $S
grep -E "==|wrong" $OUT/bench.log; python3 - $OUT/clocks.csv <<'PY'
import sys, statistics
rows = [l.strip().split(", ") for l in open(sys.argv[1]) if l[0].isdigit()]
sm = [int(r[1].split()[0]) for r in rows]
print(len(sm), "samples; SM MHz min/median/max", min(sm), statistics.median(sm), max(sm))
PY
