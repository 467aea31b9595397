#!/bin/bash
# v35 run J (prepared in session 40 as v34 next-runJ.sh; run in session 41 with a third part). Where the 128-token decode legs'
# data kernels spend their time at world size 1 (fp8 dispatch, bf16 combine, 32 SMs), to choose
# the next change with a profile rather than a guess (v33-v34's predictions missed):
#   1. every decode kernel's duration, memory throughput and occupancy (ncu, SpeedOfLight and
#      MemoryWorkloadAnalysis) at 128 tokens;
#   2. warp-stall samples by source line of ll_expand_kernel and ll_combine_kernel at 128 tokens
#      (a -lineinfo build; docs/results/v23-one-h200/hotspots.py reads the CSV);
#   3. (added in v35) each kernel of a validated 4096-token fp8 dispatch at 32 SMs: run K's
#      340 us against 72 unvalidated, not explained by the x scan (16-byte loads took 423 to 340).
# Known from v24 (ncu, base clocks): ll_combine at 128 tokens 19 us with DRAM 16% busy and 1 block
# an SM (56 blocks); ll_expand 10.7 us with DRAM 2% busy. ncu's absolute times run above the
# bench's (clocks locked at base, caches flushed): compare shares, not sums.
#   bash docs/results/v35-one-h200/runJ.sh      (logs to $OUT)
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
timeout 120 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
  --print-summary per-kernel $M $D > $OUT/ncu-decode128.log 2>&1
grep -E "^  [a-zA-Z_v].*\(|Duration|DRAM Throughput|L2 Cache Throughput|Achieved Occupancy|Registers Per" $OUT/ncu-decode128.log | head -80
t summary
mkdir -p $OUT/s
S="--section WarpStateStats --section SourceCounters --section SpeedOfLight --warp-sampling-interval 0 --import-source yes -c 1 -f"
timeout 90 ncu $S -k regex:ll_expand_kernel -s 2 -o $OUT/s/expand128 $M $D > $OUT/s/log.txt 2>&1
timeout 90 ncu $S -k regex:ll_combine_kernel -s 2 -o $OUT/s/combine128 $M $D >> $OUT/s/log.txt 2>&1
for r in expand128 combine128; do
  timeout 60 ncu --import $OUT/s/$r.ncu-rep --page source --csv --print-source cuda,sass > $OUT/s/$r-cuda-sass.csv 2>&1
  timeout 60 ncu --import $OUT/s/$r.ncu-rep --page details > $OUT/s/$r-details.txt 2>&1
  python3 docs/results/v23-one-h200/hotspots.py $OUT/s/$r-cuda-sass.csv 25 > $OUT/$r-hotspots.txt 2>&1
  rm -f $OUT/s/$r.ncu-rep
done
grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy" $OUT/s/*-details.txt
head -30 $OUT/expand128-hotspots.txt $OUT/combine128-hotspots.txt
(cd $OUT && tar czf samples.tgz s && rm -rf s)
t samples
MOE_EP_VALIDATE=1 timeout 120 ncu --section SpeedOfLight --print-summary per-kernel $M bench --backend cuda --ranks 1 \
  --num-sms 32 --tokens 4096 --dispatch-dtype fp8 --combine-dtype bf16 --iters 2 --warmup 1 --no-check > $OUT/ncu-validated4096.log 2>&1
grep -E "^  [a-zA-Z_v].*\(|Duration" $OUT/ncu-validated4096.log | head -40
t end
