#!/bin/bash
# v39 run G: the whole GPU suite on main after run F (the dispatch's next-slice L1 prefetch
# merged; v38's tree had run no whole suite either), then, in the time left, ncu of the 4096-token
# dispatch at 32 SMs (count_kernel and dispatch_kernel, each dtype; bf16 combine) for the next
# leads: what the data kernel waits on now that its next slice is in L1, and the count's share.
#   bash docs/results/v39-one-h200/runG.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j15 > $OUT/build.log 2>&1 || { echo "build failed"; grep -B2 -A10 error $OUT/build.log | head -40; }
t built
MOE_EP_TIMEOUT_S=10 timeout 450 ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
echo "ctest rc $?"; grep -E "tests passed|Failed|\*\*\*Timeout|\*\*\*Failed|Total Test" $OUT/ctest.log | head -20
t ctest
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats"
for dt in bf16 fp8 fp4; do
  left=$(( 585 - $(date +%s) + T0 )); [ $left -lt 25 ] && { echo "no time for ncu $dt"; break; }
  echo "== ncu dispatch $dt" >> $OUT/ncu.txt
  timeout $left ncu $S -k regex:"count_kernel|dispatch_kernel" -s 2 -c 2 build/gpu/tools/moe-ep bench --backend cuda \
    --ranks 1 --num-sms 32 --tokens 4096 --dispatch-dtype $dt --combine-dtype bf16 --iters 2 --warmup 1 --no-check >> $OUT/ncu.txt 2>&1
done
grep -E "^==|  [a-z_]+kernel|Duration|Elapsed Cycles|SM Active|DRAM Throughput|One or More Eligible|Active Warps Per|Warp Cycles Per Issued|Achieved Occupancy|Registers Per" $OUT/ncu.txt | cut -c1-110
t end
