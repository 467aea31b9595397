#!/bin/bash
# run I (session 31): the dispatch read-ahead again, with cursors instead of a division per unit
# (./, 2 stages; tmp-gpu/s3, 3 stages), against main (tmp-gpu/base): ncu per kernel, the bench
# alternated, warp samples of the fp8 kernel at 4096 tokens, the normal-dispatch GPU tests on ./.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS=-lineinfo > /dev/null 2>&1
for d in base s3; do
  (cd tmp-gpu/$d && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 && cmake --build build/gpu -j5 --target moe-ep > build.log 2>&1 || tail -30 build.log) &
done
cmake --build build/gpu -j6 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
t moe-ep built
cmake --build build/gpu -j12 >> $OUT/build.log 2>&1 &
BUILD=$!
A=tmp-gpu/base/build/gpu/tools/moe-ep
B=build/gpu/tools/moe-ep
C=tmp-gpu/s3/build/gpu/tools/moe-ep
N="bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check --combine-dtype bf16"
{
for d in bf16 fp8 fp4; do for v in $A $B $C; do
  echo "== $v dispatch $d 4096 tokens"; timeout 40 ncu --print-summary per-kernel -k regex:dispatch_kernel $v $N --tokens 4096 --dispatch-dtype $d
done; done
for v in $A $B; do
  echo "== $v dispatch fp8 128 tokens"; timeout 40 ncu --print-summary per-kernel -k regex:dispatch_kernel $v $N --tokens 128 --dispatch-dtype fp8
done
} > $OUT/ncu.log 2>&1
grep -E "^==|    Duration|rror" $OUT/ncu.log
t ncu done
{
for v in $A $B $C $A $B $C; do
  echo "== $v normal"; timeout 60 $v bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 50 --warmup 5
done
} > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench done
mkdir -p $OUT/s
S="--section WarpStateStats --section SourceCounters --section SpeedOfLight --section Occupancy --section LaunchStats --section InstructionStats --section MemoryWorkloadAnalysis --warp-sampling-interval 0 --import-source yes -c 1 -f"
timeout 90 ncu $S -k regex:dispatch_kernel -s 2 -o $OUT/s/b-fp8 $B $N --tokens 4096 --dispatch-dtype fp8 > $OUT/s/log.txt 2>&1
timeout 60 ncu --import $OUT/s/b-fp8.ncu-rep --page source --csv --print-source cuda,sass > $OUT/s/b-fp8-cuda-sass.csv 2>&1
timeout 60 ncu --import $OUT/s/b-fp8.ncu-rep --page details > $OUT/s/b-fp8-details.txt 2>&1
rm -f $OUT/s/*.ncu-rep
python3 docs/results/v23-one-h200/hotspots.py $OUT/s/b-fp8-cuda-sass.csv 16 > $OUT/hotspots.txt 2>&1
grep -E "Duration|Issue Slots Busy|Executed Instructions  |Achieved Occupancy|Spilling Requests  " $OUT/s/b-fp8-details.txt
(cd $OUT && tar czf samples.tgz s && rm -rf s)
t samples done
wait $BUILD || { tail -40 $OUT/build.log; exit 1; }
t tests built
R='^GpuBackend\.|SingleGpuWorld|GpuCopyEngine|Ranks/GpuNodes\.|GpuNodesErrors|GpuAgreement'
MOE_EP_TIMEOUT_S=10 timeout $(( 590 - $(date +%s) + T0 )) ctest --test-dir build/gpu -R "$R" --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
grep -E "tests passed|Total Test time|\*\*\*|Failed" $OUT/ctest.log | head -30
t end
