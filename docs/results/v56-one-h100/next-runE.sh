#!/bin/bash
# v56, NOT RUN YET (one GPU, DEADLINE seconds, 300 by default): E = main + next-blocks128.patch,
# the data kernels' blocks halved again (Policy::kDataThreads 256 -> 128, kDataBlocksPerSm 4 -> 8;
# policy.h only: a bench-only tree, tests off, whose world-budget test figures are 4 blocks a
# SM's). v56 run D: 512 -> 256 took the decode round 0.7-2.2 us and normal mode's legs at 4096
# tokens 1.3 us each (one H100). Question: does the gain go on at 8 blocks a SM (a 128-token
# expand's 896 warps on 224 blocks, the grids reaching every SM), or do the blocks' fixed costs
# (each block's barrier and its wait for the sources) take it back?
# 1. Decode bench main / E, fp8 dispatch, bf16 combine, 3 alternating rounds.
# 2. Normal mode at 32 SMs, 4096 tokens, fp8 + bf16, main / E, 2 rounds.
#   DEADLINE=<seconds> bash docs/results/v56-one-h100/next-runE.sh     (logs to $OUT)
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-300}
left() { echo $((DEADLINE - $(date +%s) + T0)); }
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu/E && mkdir -p tmp-gpu/E && tar -c $SRC | tar -x -C tmp-gpu/E
(cd tmp-gpu/E && patch -p1 -s < ../../docs/results/v56-one-h100/next-blocks128.patch) || exit 1
(cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j6 --target moe-ep > $OUT/build-main.log 2>&1 || echo "build main failed") &
(cd tmp-gpu/E && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j10 --target moe-ep > $OUT/build-E.log 2>&1) || { tail -40 $OUT/build-E.log; exit 1; }
wait
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16"
for r in 1 2 3; do for v in . tmp-gpu/E; do
  [ "$(left)" -lt 60 ] && break 2
  echo "== $v round $r"; timeout 40 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode-E.log 2>&1
grep -E "wrong|rror" $OUT/decode-E.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode-E.log
t decode
N="bench --backend cuda --ranks 1 --tokens 4096 --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype fp8 --combine-dtype bf16"
for r in 1 2; do for v in . tmp-gpu/E; do
  [ "$(left)" -lt 20 ] && break 2
  echo "== $v round $r"; timeout 30 $v/build/gpu/tools/moe-ep $N
done; done > $OUT/normal-E.log 2>&1
grep -E "wrong|rror" $OUT/normal-E.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal-E.log
t end
