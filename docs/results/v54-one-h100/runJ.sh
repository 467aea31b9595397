#!/bin/bash
# v54 run J (one GPU): main with v50's by-warp combine merged (run I2 measured it).
# 1. The rest of the GPU suite (ctest -L gpu without the sets run I2 ran on B:
#    LowLatency|LateRank|OpMemory|GpuCapture|python_gpu), its first run since v48's run C.
# 2. pytest -v of two Python GPU files (which ran, which skipped).
# 3. v50 next-runI.sh step 3: the decode bench with and without --column-major-scales, fp8
#    dispatch / bf16 combine, alternating rounds until the deadline. Predicted (v51): dispatch
#    +0.2-1 us at 128-256 tokens (56 scattered 4-byte scale stores per received (token, expert)
#    instead of 224 contiguous bytes), level at 1; combine level.
#   DEADLINE=<seconds> bash docs/results/v54-one-h100/runJ.sh      (logs to $OUT)
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-560}
left() { echo $((DEADLINE - $(date +%s) + T0)); }
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG > /dev/null 2>&1
cmake --build build/gpu -j14 > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
tail -n 1 $OUT/build.log
t built
MOE_EP_TIMEOUT_S=10 timeout $(( $(left) - 150 )) ctest --test-dir build/gpu -L gpu \
  -E 'LowLatency|LateRank|OpMemory|GpuCapture|python_gpu' --output-on-failure --timeout 60 > $OUT/suite.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)|Total Test" $OUT/suite.log | head -30
t suite
# Which Python GPU tests ran in run I2's python_gpu (ctest printed only its pass): the decode
# scale layout and the single-GPU world, verbose, with skips and their reasons.
PYTHONPATH=build/gpu/python MOE_EP_VALIDATE=1 timeout 90 python3 -m pytest -v -rs -p no:cacheprovider \
  tests/python/test_gpu_decode_scale_layout.py tests/python/test_gpu_single_gpu_world.py > $OUT/pytest.log 2>&1
echo "pytest rc $?"; tail -n 15 $OUT/pytest.log
t pytest
C="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16"
for r in 1 2 3; do
  [ "$(left)" -lt 40 ] && break
  echo "== rows round $r"; timeout 30 ./build/gpu/tools/moe-ep $C
  [ "$(left)" -lt 25 ] && break
  echo "== columns round $r"; timeout 30 ./build/gpu/tools/moe-ep $C --column-major-scales
done > $OUT/columns.log 2>&1
grep -E "wrong|rror" $OUT/columns.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/columns.log
t end
