#!/bin/bash
# v40 run K: where a dispatch's fixed cost goes. T = main + count-trace.patch (a probe, not for
# merging): count_kernel's thread 0s stamp %globaltimer at each block's start and end and each
# ticket's take and end, the step word's store and the receiver's go; dispatch_kernel the first
# block's start, the last block's end of work and its done signal; dispatch_wait_kernel its end
# (absolute times, so the kernels line up), in rings of 32 calls by step, printed by the call of
# step 41 for the dispatches of steps 25 to 39 (timed calls, none of them printing; a first
# version printed at the stamped call itself, and that call's kernels came 200 us apart).
# Bench fp8 -> bf16 at 128 / 1024 / 4096 tokens, 32 SMs, on T (stamps) and main (its times
# beside, to see what the probe costs).
#   bash docs/results/v40-one-h200/runK.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/T && tar -c $SRC | tar -x -C tmp-gpu/T
(cd tmp-gpu/T && patch -p1 -s < ../../docs/results/v40-one-h200/count-trace.patch &&
  cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j8 --target moe-ep > $OUT/build-T.log 2>&1 || echo "build T failed") &
cmake -S . -B build/gpu $CFG > /dev/null 2>&1
cmake --build build/gpu -j8 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
cat $OUT/build-T.log >> $OUT/build.log; rm -f $OUT/build-T.log
t built
for tok in 128 1024 4096; do for dt in fp8 bf16; do
  B="bench --backend cuda --ranks 1 --tokens $tok --num-sms 32 --dispatch-dtype $dt --combine-dtype bf16 --iters 20 --warmup 3"
  echo "== T $tok $dt"; timeout 60 tmp-gpu/T/build/gpu/tools/moe-ep $B
  echo "== main $tok $dt"; timeout 60 build/gpu/tools/moe-ep $B
done; done > $OUT/trace.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror|^CT step|^DT" $OUT/trace.log | cut -c1-200
t end
