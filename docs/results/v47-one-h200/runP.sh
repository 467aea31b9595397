#!/bin/bash
# run P (v47): where the decode kernels' time goes at 128 tokens, world size 1, one H200.
# v47 run N (ncu --clock-control none --cache-control none, kernels serialized): at 128 tokens
# ll_combine<bf16, in place> 12.9 us with 2.44 M warp instructions on 56 blocks, ll_expand<fp8>
# 8.3 us, ll_send<fp8> 6.6 us, ll_step<1> 5.8 us, ll_step<0> 2.1 us (175 instructions: ncu's
# floor for a kernel). Here: full sections and warp-stall samples per source line of one
# steady-state launch of each (combine, expand, send, step<1>), and the combine's SASS.
#   bash docs/results/v47-one-h200/runP.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DCMAKE_CUDA_FLAGS=-lineinfo \
  -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j16 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
M=build/gpu/tools/moe-ep
D="bench --backend cuda --ranks 1 --mode decode --tokens 128 --iters 10 --warmup 2 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16"
S="--section WarpStateStats --section SourceCounters --section SpeedOfLight --section Occupancy --section LaunchStats --section InstructionStats --section MemoryWorkloadAnalysis --section SchedulerStats --warp-sampling-interval 0 --import-source yes --clock-control none --cache-control none -c 1 -f"
mkdir -p $OUT/s
# -s 8: the 9th launch; the step kernels alternate <1> (dispatch), <0> (combine), so it is a <1>.
for k in ll_combine_kernel ll_expand_kernel ll_send_kernel ll_step_kernel; do
  n=$(echo "$k" | tr -dc 'a-z_')
  timeout 100 ncu $S -k "regex:$k" -s 8 -o $OUT/s/$n $M $D > $OUT/s/$n-log.txt 2>&1
  echo "ncu $k rc $?"
  timeout 60 ncu --import $OUT/s/$n.ncu-rep --page source --csv --print-source cuda,sass > $OUT/s/$n-src.csv 2>&1
  timeout 60 ncu --import $OUT/s/$n.ncu-rep --page details > $OUT/s/$n-details.txt 2>&1
  python3 docs/results/v23-one-h200/hotspots.py $OUT/s/$n-src.csv 25 > $OUT/hot-$n.txt 2>&1
  echo "== $k"; grep -E "  Duration|Issue Slots Busy|Executed Instructions  |Achieved Occupancy|No Eligible|Active Warps Per Scheduler|Eligible Warps|L2 Hit Rate  |DRAM Throughput|Registers Per|Grid Size|Warp Cycles Per Issued" $OUT/s/$n-details.txt
  head -12 $OUT/hot-$n.txt | cut -c1-220
  rm -f $OUT/s/$n.ncu-rep
  t "$k"
done
cuobjdump -sass -fun '_ZN6moe_ep12cuda_backend17ll_combine_kernelINS_7formats8Bf16WireELb1EEEvNS0_16LowLatencyParamsE' \
  $(find build/gpu -name 'low_latency.cu.o' | head -1) > $OUT/combine-sass.txt 2>&1
wc -l $OUT/combine-sass.txt
(cd $OUT && tar czf s.tgz s && rm -rf s)
t end
