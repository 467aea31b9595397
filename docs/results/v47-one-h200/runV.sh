#!/bin/bash
# run V (v47): the decode combine's loads of y ahead of its sums (SlotSumPipe), the mergeable form
# (every top-k, the copies evict-first in L2), against main; then its GPU tests.
# Run E's experiment (top-8 only, copies with L2's normal policy): bf16 combine at 128 tokens
# 15.6 -> 14.4 us, at 256 26.1 -> 20.6; every combine dtype -1.3..-1.7 at 128 and -5.3..-5.5 at
# 256; the 256-token dispatch after it 0.5-1.6 us slower, as after run Y's normal-policy loads.
# Predicted here: the combines as in run E; the 256-token dispatch level with main.
#   bash docs/results/v47-one-h200/runV.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
rm -rf tmp-gpu && mkdir -p tmp-gpu/main
git archive HEAD | tar -x -C tmp-gpu/main   # the session's starting commit (the device's git)
(cd tmp-gpu/main && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j5 --target moe-ep > ../build-main.log 2>&1 || echo "build main failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
cmake --build build/gpu -j11 > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype all"
for r in 1 2 3; do for v in tmp-gpu/main .; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $((590 - $(date +%s) + T0)) ctest --test-dir build/gpu -L gpu \
  -R 'LowLatency|LateRank|python_gpu' --output-on-failure --timeout 90 > $OUT/tests.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/tests.log | head -30
t end
