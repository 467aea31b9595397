#!/bin/bash
# Prepared in v54, NOT RUN YET (one GPU, about 5 minutes): where the decode kernels' warps wait,
# per source line, at 128 tokens (fp8 dispatch, bf16 combine, world size 1). v54's trace points
# (perf-notes v54) put 11 us of the dispatch in steps that do not grow with tokens (the one-block
# step kernel about 5 us, at 1 token as at 128) and 6.4 us in the expand's copies; ncu there
# gave the by-warp combine 10.7 us at 8.3 cycles between a warp's issues. v49's next-runH.sh ncu step,
# with the step kernel and the combine added: one steady-state launch of each of ll_step_kernel,
# ll_send_kernel, ll_expand_kernel and ll_combine_kernel, warp stalls per line (hotspots.py).
#   DEADLINE=<seconds> bash docs/results/v54-one-h100/next-runK.sh      (logs to $OUT)
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-560}
left() { echo $((DEADLINE - $(date +%s) + T0)); }
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu-lineinfo $CFG -DCMAKE_CUDA_FLAGS=-lineinfo > /dev/null 2>&1
cmake --build build/gpu-lineinfo -j16 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
M=build/gpu-lineinfo/tools/moe-ep
D="bench --backend cuda --ranks 1 --mode decode --tokens 128 --iters 10 --warmup 2 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16"
S="--section WarpStateStats --section SourceCounters --section SpeedOfLight --section Occupancy --section LaunchStats --section InstructionStats --section MemoryWorkloadAnalysis --section SchedulerStats --warp-sampling-interval 0 --import-source yes --clock-control none --cache-control none -c 1 -f"
mkdir -p $OUT/s
for k in ll_step_kernel ll_expand_kernel ll_send_kernel ll_combine_kernel; do
  [ "$(left)" -lt 70 ] && { echo "skipped $k: $(left) s left"; continue; }
  n=$(echo "$k" | tr -dc 'a-z_')
  timeout 90 ncu $S -k "regex:$k" -s 8 -o $OUT/s/$n $M $D > $OUT/s/$n-log.txt 2>&1
  echo "ncu $k rc $?"
  timeout 40 ncu --import $OUT/s/$n.ncu-rep --page source --csv --print-source cuda,sass > $OUT/s/$n-src.csv 2>&1
  timeout 40 ncu --import $OUT/s/$n.ncu-rep --page details > $OUT/s/$n-details.txt 2>&1
  python3 docs/results/v23-one-h200/hotspots.py $OUT/s/$n-src.csv 25 > $OUT/hot-$n.txt 2>&1
  echo "== $k"; grep -E "  Duration|Issue Slots Busy|Executed Instructions  |No Eligible|Eligible Warps|Registers Per|Grid Size|Warp Cycles Per Issued|SM Active Cycles" $OUT/s/$n-details.txt
  head -14 $OUT/hot-$n.txt | cut -c1-220
  gzip $OUT/s/$n-src.csv
  rm -f $OUT/s/$n.ncu-rep
  t "$k"
done
t end
