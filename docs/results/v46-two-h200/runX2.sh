#!/bin/bash
# v46 run X2 on nvidia-h200-x2, after run X1 (one call of under 10 minutes):
#   1. moe-ep-latency-floor on GPU 0 with its new rows: a decode round's five kernels with their
#      grids and no work (what the kernels cost as such, against the 18-28 us rounds).
#   2. The tests that need two GPUs, each in its own process (ctest): the late rank's timeout
#      (run X1 ran test_gpu_backend as one process, where its 2 s timeout cannot take effect),
#      the busy GPUs, one process per GPU, and the unvalidated non-finite blocks X1 cut short.
#   3. The SM path against the copy engine at 8 and 16 SMs (X1 did 32: the SM path won every
#      pair), 4096 then 128 tokens, every pair.
#   bash docs/results/v46-two-h200/runX2.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
left() { echo $((570 - $(date +%s) + T0)); }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j30 --target moe-ep moe-ep-latency-floor test_gpu_backend test_gpu_world \
  test_gpu_multiprocess test_gpu_agreement > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
L=$(find build/gpu -name moe-ep-latency-floor -type f | head -1)
timeout 90 $L --reps 9 --chain 256 > $OUT/latency.log 2>&1; echo "latency floor rc $?"
cat $OUT/latency.log
t "latency floor"
timeout 240 ctest --test-dir build/gpu --output-on-failure --timeout 120 \
  -R 'TwoGpu|GpuMultiprocess|RankThatNeverJoins|GpuBackendUnvalidated' > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "Test +#|tests passed|FAILED|Failed|Not Run" $OUT/ctest.log | head -20
t ctest
for tok in 4096 128; do
  for ce in "" --copy-engine; do
    [ "$(left)" -lt 40 ] && { echo "path $tok $ce: no time left"; continue; }
    echo "== tokens $tok ${ce:-sm-path}"
    timeout $(($(left) - 10)) build/gpu/tools/moe-ep bench --backend cuda --ranks 2 --tokens $tok \
      --num-sms 8,16 --iters 20 --warmup 3 --dispatch-dtype all --combine-dtype all $ce
    echo "rc $?"
  done
done > $OUT/paths.log 2>&1
grep -vE "^\s*$" $OUT/paths.log | grep -v "^# " | cut -c1-120
t end
