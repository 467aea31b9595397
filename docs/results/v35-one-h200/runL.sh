#!/bin/bash
# v35 run L: source-level profiles of the two kernels that runs J and K found largest:
#   1. ll_step_kernel<1> (the decode dispatch's step, which ranks the slots): 9.4-9.7 us under
#      ncu at 128 tokens, against 3.2-3.5 for ll_step_kernel<0>, which does no ranks; at W = 1
#      the exchange is skipped since v35, so the 6 us between them is the ranks and the block;
#   2. count_kernel in validation mode at 4096 tokens: 329 us under ncu (14-15 unvalidated);
#      one 16-byte load a thread and step instead of one 2-byte load took the scan of x only from
#      423 to 340 us (run K), as if its bytes moved at about 200 GB/s whatever the load width.
# Warp-stall samples by source line (docs/results/v23-one-h200/hotspots.py), plus each kernel's
# details page (duration, issue slots, memory throughput).
#   bash docs/results/v35-one-h200/runL.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOE_EP_BUILD_TESTS=OFF -DCMAKE_CUDA_FLAGS=-lineinfo -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j16 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
M=build/gpu/tools/moe-ep
D="bench --backend cuda --ranks 1 --mode decode --tokens 128 --iters 3 --warmup 1 --no-check --dispatch-dtype fp8 --combine-dtype bf16"
V="bench --backend cuda --ranks 1 --num-sms 32 --tokens 4096 --iters 2 --warmup 1 --no-check --dispatch-dtype fp8 --combine-dtype bf16"
mkdir -p $OUT/s
S="--section WarpStateStats --section SourceCounters --section SpeedOfLight --section MemoryWorkloadAnalysis --warp-sampling-interval 0 --import-source yes -c 1 -f"
timeout 90 ncu $S -k regex:ll_step_kernel -s 2 -o $OUT/s/step128 $M $D > $OUT/s/log.txt 2>&1
MOE_EP_VALIDATE=1 timeout 120 ncu $S -k regex:count_kernel -s 2 -o $OUT/s/countval $M $V >> $OUT/s/log.txt 2>&1
t profiled
for r in step128 countval; do
  timeout 60 ncu --import $OUT/s/$r.ncu-rep --page source --csv --print-source cuda,sass > $OUT/s/$r-cuda-sass.csv 2>&1
  timeout 60 ncu --import $OUT/s/$r.ncu-rep --page details > $OUT/$r-details.txt 2>&1
  python3 docs/results/v23-one-h200/hotspots.py $OUT/s/$r-cuda-sass.csv 30 > $OUT/$r-hotspots.txt 2>&1
  rm -f $OUT/s/$r.ncu-rep
done
grep -E "^  [a-zA-Z_v].*\(|Duration|Warp Cycles Per Issued|Issue Slots Busy|DRAM Throughput|Mem Busy|L1/TEX Hit|L2 Hit" $OUT/*-details.txt
head -34 $OUT/step128-hotspots.txt $OUT/countval-hotspots.txt
tail -5 $OUT/s/log.txt
(cd $OUT && tar czf samples.tgz s && rm -rf s)
t end
