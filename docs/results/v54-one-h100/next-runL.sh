#!/bin/bash
# Prepared in v54, NOT RUN YET (one GPU, DEADLINE seconds, 560 by default): B = main +
# next-step-overlap.patch, the one-node decode dispatch's step kernel with two round trips out of
# its ranks' chain. v54's trace points (one H100) put the step kernel at 5 us whatever the tokens
# (1 or 128): after pass 1's barrier, thread 0 loaded the state and the error flag and a barrier
# of the whole block followed, and only then did the ranks' threads load the last window's ids
# again for pass 2. Now every pass runs on the threads from the first warp without a peer on, so
# pass 1's ids stay in the registers of the threads that rank them in pass 2, and only the
# exchange threads wait for thread 0's words (a named barrier, `bar.sync 1, skip`); the ranks'
# threads go straight on to pass 2 and the totals. ptxas: ll_step_kernel<true> 61 registers (64
# before), no spill, 2 barriers. Predicted: every decode dispatch 0.5-1.0 us faster at 1-256
# tokens (two L2 round trips of about 0.5 us in the step kernel's chain), combines level.
# 1. ctest on B: -L gpu -R 'LowLatency|LateRank|GpuCapture|python_gpu' (the ranks at every shape
#    the shapes test covers: several windows at E = 4096, repeated experts, masked slots).
# 2. Decode bench main / B, fp8 and mxfp4 (fp4) dispatch with a bf16 combine, rounds until the deadline.
#   DEADLINE=<seconds> bash docs/results/v54-one-h100/next-runL.sh     (logs to $OUT)
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-560}
left() { echo $((DEADLINE - $(date +%s) + T0)); }
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/B && tar -c $SRC | tar -x -C tmp-gpu/B
(cd tmp-gpu/B && patch -p1 -s < ../../docs/results/v54-one-h100/next-step-overlap.patch) || exit 1
(cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j4 --target moe-ep > $OUT/build-main.log 2>&1 || echo "build main failed") &
(cd tmp-gpu/B && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j12 > $OUT/build-B.log 2>&1) || { tail -40 $OUT/build-B.log; exit 1; }
wait
tail -n 1 $OUT/build-main.log $OUT/build-B.log
t built
MOE_EP_TIMEOUT_S=10 timeout $(( $(left) - 100 )) ctest --test-dir tmp-gpu/B/build/gpu -L gpu \
  -R 'LowLatency|LateRank|GpuCapture|python_gpu' --output-on-failure --timeout 120 > $OUT/tests.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/tests.log | head -30
t tests
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8,fp4 --combine-dtype bf16"
for r in 1 2 3; do for v in . tmp-gpu/B; do
  [ "$(left)" -lt 45 ] && break 2
  echo "== $v round $r"; timeout 40 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t end
