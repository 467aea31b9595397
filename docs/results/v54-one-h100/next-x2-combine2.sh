#!/bin/bash
# v54: v48's next-x2-combine.sh (read its notes in docs/results/v48-two-h200/) with
# pre-v47-combine.patch made again on v54's main: v48's older combine kernel, which now accepts
# main's by-warp template argument and ignores it (that kernel runs only at world size 1).
# For nvidia-h200-x2 (or two H100s), one call, about 5 minutes. NOT RUN YET.
#   bash docs/results/v54-one-h100/next-x2-combine2.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
nvidia-smi -L
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/N
tar -c $SRC | tar -x -C tmp-gpu/N
(cd tmp-gpu/N && patch -p1 -s < ../../docs/results/v54-one-h100/pre-v47-combine.patch) || exit 1
(cd tmp-gpu/N && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j12 --target moe-ep > ../build-N.log 2>&1 || echo "build N failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
cmake --build build/gpu -j18 --target moe-ep test_gpu_low_latency > $OUT/build.log 2>&1 ||
  { tail -40 $OUT/build.log; exit 1; }
wait
t built
D="bench --backend cuda --ranks 2 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype all"
for r in 1 2 3; do for v in tmp-gpu/N .; do
  echo "== $v round $r"; timeout 120 $v/build/gpu/tools/moe-ep $D
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $((580 - $(date +%s) + T0)) build/gpu/tests/test_gpu_low_latency \
  --gtest_filter='TwoGpuLowLatencyGraph.*' > $OUT/tests.log 2>&1
echo "two-GPU graph test rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]|OK \]" $OUT/tests.log | head
t end
