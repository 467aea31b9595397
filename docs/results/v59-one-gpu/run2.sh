#!/bin/bash
# v59 run 2 (one GPU, about 6 minutes): N = the working tree with notify-parts.patch applied (a
# part's lower parts' words waited for together, one round trip, instead of the look-back's
# reads one after another); M = the same tree with the patch reversed (main).
# 1. Normal mode at 32 SMs, 1024 and 4096 tokens (2 and 8 parts), dispatch bf16 / fp8 / mxfp4
#    with a bf16 combine, M / N alternating, 3 rounds (tools/bench_compare.py).
# 2. N's normal-mode GPU tests (ctest -L gpu -R 'GpuBackend|GpuNodes|GpuCopyEngine').
#   [TESTS=0] bash docs/results/v59-one-gpu/run2.sh      (logs to $OUT; TESTS=0: the bench only)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/M && tar -c $SRC | tar -x -C tmp-gpu/M
(cd tmp-gpu/M && patch -R -p1 -s < ../../docs/results/v59-one-gpu/notify-parts.patch) || exit 1
(cd tmp-gpu/M && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j5 --target moe-ep > $OUT/build-M.log 2>&1 || echo "build M failed") &
(cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j11 $([ "${TESTS:-1}" = 0 ] && echo --target moe-ep) \
    > $OUT/build-N.log 2>&1) || { tail -40 $OUT/build-N.log; exit 1; }
wait
t built
B="bench --backend cuda --ranks 1 --tokens 1024,4096 --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16"
for r in 1 2 3; do for v in tmp-gpu/M .; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/normal.log 2>&1
grep -E "wrong|rror" $OUT/normal.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal.log
t bench
[ "${TESTS:-1}" = 0 ] && { t end; exit 0; }
MOE_EP_TIMEOUT_S=10 timeout 240 ctest --test-dir build/gpu -L gpu -R 'GpuBackend|GpuNodes|GpuCopyEngine' \
  --output-on-failure --timeout 120 > $OUT/tests.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Total Test" $OUT/tests.log
t end
