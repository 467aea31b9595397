#!/bin/bash
# v54 run H3: v49's next-runH.sh (read its notes in docs/results/v49-one-h200/next-runH.sh) on
# main with the by-warp combine: next-trace.patch here is v49's, its combine points also in the
# by-warp kernel (points 3.2 and 3.3 before its return). Trace of 1 and 128 tokens (fp8 dispatch,
# bf16 combine, 3 rounds), then ncu of one ll_expand and one ll_send launch at 128 tokens.
#   bash docs/results/v54-one-h100/runH3.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v54-one-h100
rm -rf tmp-gpu && mkdir -p tmp-gpu/T && tar -c $SRC | tar -x -C tmp-gpu/T
(cd tmp-gpu/T && patch -p1 -s < ../../$R/next-trace.patch) || exit 1
(cd tmp-gpu/T && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j8 --target moe-ep > ../build-T.log 2>&1 || echo "build T failed") &
cmake -S . -B build/gpu $CFG -DCMAKE_CUDA_FLAGS=-lineinfo > /dev/null 2>&1
cmake --build build/gpu -j8 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
tail -n 2 tmp-gpu/build-T.log >> $OUT/build.log
t built
for r in 1 2 3; do for tok in 1 128; do
  echo "== $tok fp8 round $r"
  timeout 60 tmp-gpu/T/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode \
    --tokens $tok --dispatch-dtype fp8 --combine-dtype bf16 --decode-graph round --iters 200 --warmup 20
done; done > $OUT/trace.log 2>&1
grep -E "wrong|rror" $OUT/trace.log | sort | uniq -c
python3 docs/results/v49-one-h200/trace_points.py $OUT/trace.log
t trace
M=build/gpu/tools/moe-ep
D="bench --backend cuda --ranks 1 --mode decode --tokens 128 --iters 10 --warmup 2 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16"
S="--section WarpStateStats --section SourceCounters --section SpeedOfLight --section Occupancy --section LaunchStats --section InstructionStats --section MemoryWorkloadAnalysis --section SchedulerStats --warp-sampling-interval 0 --import-source yes --clock-control none --cache-control none -c 1 -f"
mkdir -p $OUT/s
for k in ll_expand_kernel ll_send_kernel; do
  n=$(echo "$k" | tr -dc 'a-z_')
  timeout 100 ncu $S -k "regex:$k" -s 8 -o $OUT/s/$n $M $D > $OUT/s/$n-log.txt 2>&1
  echo "ncu $k rc $?"
  timeout 60 ncu --import $OUT/s/$n.ncu-rep --page source --csv --print-source cuda,sass > $OUT/s/$n-src.csv 2>&1
  timeout 60 ncu --import $OUT/s/$n.ncu-rep --page details > $OUT/s/$n-details.txt 2>&1
  python3 docs/results/v23-one-h200/hotspots.py $OUT/s/$n-src.csv 25 > $OUT/hot-$n.txt 2>&1
  echo "== $k"; grep -E "  Duration|Issue Slots Busy|Executed Instructions  |No Eligible|Active Warps Per Scheduler|Eligible Warps|L2 Hit Rate  |Registers Per|Grid Size|Warp Cycles Per Issued|SM Active Cycles|Elapsed Cycles" $OUT/s/$n-details.txt
  head -14 $OUT/hot-$n.txt | cut -c1-220
  gzip $OUT/s/$n-src.csv
  rm -f $OUT/s/$n.ncu-rep
  t "$k"
done
