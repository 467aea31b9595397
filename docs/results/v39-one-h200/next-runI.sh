#!/bin/bash
# Prepared in v39 for the next session, NOT RUN YET. Where count_kernel's 16-18 us (ncu, 1.5 GHz)
# of a 4096-token dispatch at 32 SMs go (v39 run G: its blocks' SMs active about 45% of that
# time, issue slots used in a quarter of those cycles: a chain of waits), and what the fp8 and
# mxfp4 whole-slice dispatch kernels spend their issue slots on since the L1 prefetch (58-60% of
# cycles issue): ncu with source counters on a -lineinfo build, one report a kernel and dtype
# (and count_kernel at 128 tokens, 15-17 us under ncu in v28), then the 30 hottest source lines
# of each (v23's hotspots.py).
# And one guess, L = main + next-parallel-lookback.patch: notify's parts (8 at 4096 tokens, 2 at
# 1024) read the words of the parts below them in parallel, a lane each, instead of one after the
# other from the nearest down (up to 7 round trips in a row); ptxas: count_kernel<false> spills
# 8 bytes instead of 12, notify_kernel none instead of 24. Predicted: 0.5-2 us off the dispatch
# at 4096 tokens if the look-back is on count_kernel's longest path, nothing at 1024 or below
# (bench M against L, two rounds), then L's GpuBackend tests of parts, one-SM budgets and pairs.
# About 8 minutes; 5 files.
#   bash docs/results/v39-one-h200/next-runI.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_FLAGS=-lineinfo -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/L && tar -c $SRC | tar -x -C tmp-gpu/L
(cd tmp-gpu/L && patch -p1 -s < ../../docs/results/v39-one-h200/next-parallel-lookback.patch &&
  cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j8 --target moe-ep test_gpu_backend > $OUT/build-L.log 2>&1 || echo "build L failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j8 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
cat $OUT/build-L.log >> $OUT/build.log; rm -f $OUT/build-L.log
t built
M=build/gpu/tools/moe-ep
S="--section WarpStateStats --section SchedulerStats --section SourceCounters --section SpeedOfLight --import-source yes --warp-sampling-interval 0 -f"
mkdir -p $OUT/s
for run in fp8:4096:count_kernel fp8:4096:dispatch_kernel fp4:4096:count_kernel fp4:4096:dispatch_kernel \
           fp8:128:count_kernel; do  # one report a kernel (the warmup's skipped)
  IFS=: read dt tok k <<< "$run"; r=$dt-$tok-$k
  timeout 120 ncu $S -k regex:$k -s 1 -c 1 -o $OUT/s/$r $M bench --backend cuda --ranks 1 --num-sms 32 \
    --tokens $tok --dispatch-dtype $dt --combine-dtype bf16 --iters 2 --warmup 1 --no-check >> $OUT/s/log.txt 2>&1
  echo "==== $r" >> $OUT/details.txt
  timeout 60 ncu --import $OUT/s/$r.ncu-rep --page details >> $OUT/details.txt 2>&1
  timeout 60 ncu --import $OUT/s/$r.ncu-rep --page source --csv --print-source cuda,sass > $OUT/s/$r.csv 2>&1
  echo "==== $r" >> $OUT/hotspots.txt
  python3 docs/results/v23-one-h200/hotspots.py $OUT/s/$r.csv 30 >> $OUT/hotspots.txt 2>&1
done
grep -A13 "^====" $OUT/hotspots.txt | cut -c1-160
tail -3 $OUT/s/log.txt; rm -rf $OUT/s
t ncu
B="bench --backend cuda --ranks 1 --tokens 128,1024,4096 --num-sms 32 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 20 --warmup 3"
for r in 1 2; do for v in . tmp-gpu/L; do
  echo "== $v round $r"; timeout 60 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench.log | cut -c1-60
t bench
BT=$(find tmp-gpu/L/build/gpu -name test_gpu_backend -type f | head -1)
MOE_EP_VALIDATE=1 MOE_EP_TIMEOUT_S=10 timeout $(( 590 - $(date +%s) + T0 )) $BT \
  --gtest_filter='GpuBackend.ScansInParts*:GpuBackend.OneSmBudget*:GpuBackend.AllPairs*' > $OUT/tests-L.log 2>&1
echo "L tests rc $?"; tail -3 $OUT/tests-L.log
t end
