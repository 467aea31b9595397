#!/bin/bash
# Prepared in session 42 for the next session, NOT RUN YET (this session's device time was spent).
# Main as the session ends: v36's merged changes, of which two have not run in their final form
# or not in the whole suite: the combines' last wave of tickets (run Q: 11 selected GPU tests,
# not the suite) and count_scan_blocks' half-budget rule (after run O; at world size 1 the
# same shares as run O measured, so the bench should match run O's C).
#   1. ncu on the bf16 combine kernel at 4096 tokens, 32 and 132 SMs (v36 run P's sweep: 41.4
#      against 47.6 us, more SMs slower; in v27's sweep too): duration, throughput, occupancy
#      and warp states side by side, to say why;
#   2. normal mode at 128 and 4096 tokens, 32 SMs (bf16/fp8/mxfp4 dispatch, bf16 combine), and
#      the decode bench (fp8 dispatch, bf16 combine): predicted as v36 runs O and Q;
#   3. the whole GPU suite.
#   bash docs/results/v36-one-h200/next-runR.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG > /dev/null 2>&1
cmake --build build/gpu -j15 > $OUT/build.log 2>&1 || { echo "build failed"; grep -B2 -A10 error $OUT/build.log | head -40; }
t built
M=build/gpu/tools/moe-ep
for s in 32 132; do
  timeout 60 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
    --section WarpStateStats -k regex:combine_kernel -s 3 -c 1 $M bench --backend cuda --ranks 1 --num-sms $s \
    --tokens 4096 --dispatch-dtype bf16 --combine-dtype bf16 --iters 3 --warmup 1 --no-check
done > $OUT/ncu-combine.log 2>&1
grep -E "^  [a-zA-Z_v].*\(|Duration|DRAM Throughput|L2 Cache Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued" $OUT/ncu-combine.log | head -60
t ncu
{ timeout 40 $M bench --backend cuda --ranks 1 --num-sms 32 --tokens 128,4096 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 20 --warmup 3
  timeout 30 $M bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20; } > $OUT/bench.log 2>&1
grep -E "^ +[0-9]+ +|wrong|rror" $OUT/bench.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 590 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
echo "ctest rc $?"; grep -E "tests passed|Failed|\*\*\*Timeout|\*\*\*Failed|Total Test" $OUT/ctest.log | head -20
t end
