#!/bin/bash
# Prepared in v39 for the next session, NOT RUN YET. Where count_kernel's 16-18 us (ncu, 1.5 GHz)
# of a 4096-token dispatch at 32 SMs go (v39 run G: its blocks' SMs active about 45% of that
# time, issue slots used in a quarter of those cycles: a chain of waits), and what the fp8 and
# mxfp4 whole-slice dispatch kernels spend their issue slots on since the L1 prefetch (58-60% of
# cycles issue). ncu with source counters on a -lineinfo build, one report a kernel and dtype, then
# the 30 hottest source lines of each (v23's hotspots.py). About 5 minutes; 6 files.
#   bash docs/results/v39-one-h200/next-runI.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOE_EP_BUILD_TESTS=OFF -DCMAKE_CUDA_FLAGS=-lineinfo -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j16 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
M=build/gpu/tools/moe-ep
S="--section WarpStateStats --section SchedulerStats --section SourceCounters --section SpeedOfLight --import-source yes --warp-sampling-interval 0 -f"
mkdir -p $OUT/s
for dt in fp8 fp4; do
  for k in count_kernel dispatch_kernel; do  # one report a kernel (the warmup's skipped)
    timeout 120 ncu $S -k regex:$k -s 1 -c 1 -o $OUT/s/$dt-$k $M bench --backend cuda --ranks 1 --num-sms 32 \
      --tokens 4096 --dispatch-dtype $dt --combine-dtype bf16 --iters 2 --warmup 1 --no-check >> $OUT/s/log.txt 2>&1
    timeout 60 ncu --import $OUT/s/$dt-$k.ncu-rep --page details >> $OUT/details.txt 2>&1
    timeout 60 ncu --import $OUT/s/$dt-$k.ncu-rep --page source --csv --print-source cuda,sass > $OUT/s/$dt-$k.csv 2>&1
    python3 docs/results/v23-one-h200/hotspots.py $OUT/s/$dt-$k.csv 30 > $OUT/hotspots-$dt-$k.txt 2>&1
    head -12 $OUT/hotspots-$dt-$k.txt | cut -c1-160
  done
done
tail -5 $OUT/s/log.txt; rm -rf $OUT/s
t end
