#!/bin/bash
# v59, NOT RUN YET (one GPU, about 3 minutes): where a normal dispatch's fixed part goes.
# v59 run 3 (ncu, one H200) put count_kernel at 11.5-12.9 us at 128 tokens and 14.2-16.6 at 4096
# against a 37 us fp8 data kernel, and run 4's receiver beside the step lost 0.4-1.3 us. Tree C
# = main + next-count-trace.patch: count_kernel's, dispatch_kernel's and dispatch_wait_kernel's
# entries and exits and points inside them (the patch's header in common.cuh; the points are
# named in count_points.py): the scan shares and the step block, the senders' scans, prefixes
# and words, the receiver, the data kernel's wait and its rows. The points are atomics of thread
# 0: upper bounds. Normal-mode bench of C at 32 SMs, fp8 dispatch with a bf16 combine, 128 and
# 4096 tokens, one configuration a process (each prints its rings after dispatch 40), 2 rounds.
#   bash docs/results/v59-one-gpu/next-runC.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/C && tar -c $SRC | tar -x -C tmp-gpu/C
(cd tmp-gpu/C && patch -p1 -s < ../../docs/results/v59-one-gpu/next-count-trace.patch) || exit 1
(cd tmp-gpu/C && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j16 --target moe-ep > $OUT/build-C.log 2>&1) ||
  { tail -40 $OUT/build-C.log; exit 1; }
t built
for r in 1 2; do for tok in 128 4096; do
  echo "== $tok fp8 round $r"
  timeout 60 tmp-gpu/C/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --tokens $tok \
    --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype fp8 --combine-dtype bf16
done; done > $OUT/trace.log 2>&1
grep -E "wrong|rror" $OUT/trace.log | sort | uniq -c
python3 docs/results/v59-one-gpu/count_points.py $OUT/trace.log | tee $OUT/table.txt
t end
