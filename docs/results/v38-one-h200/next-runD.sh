#!/bin/bash
# Prepared in session 44 (v38) for the next session, NOT RUN YET. What bounds the int8_e3m4
# combine's whole-row loop at 32 SMs? v38 cut about 20 instructions a step (run A, W) and took the
# shuffles and votes out from between its steps (run B, two passes) without a gain: 59 us against
# fp8 blockwise's 45 at 4096 tokens. ncu's warp states and source counters for the combine kernel
# of int8_e3m4 and of fp8 blockwise (the whole-row instantiation, one launch each, after a bf16
# dispatch), with -lineinfo, then the 25 hottest SASS lines of each (v23's hotspots.py).
# And one guess at the answer, P = main + next-l1-prefetch.patch: each whole-row group of the
# combine asks L1 for the next group's lines (prefetch.global.L1, no register held; ptxas: no new
# spill, bf16 and direct cast 59 -> 64 registers) before it works on the current one, in case
# each group waits for its loads from L2 (the row is in L2 from the row's prefetch) with nothing
# else in flight; the dispatch's slices do the same for the row's next slice (whole slices and
# bf16's one-node path; ptxas: no new spill). Predicted, if so: combine int8_e3m4 59 -> 50-54 us
# at 32 SMs, fp8 45 -> 41-43, bf16 and direct cast 1-2 us; dispatch 0-8 us (v25's L2 prefetch of
# the dispatch rows gained nothing); nothing at 132 SMs.
#   bash docs/results/v38-one-h200/next-runD.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOE_EP_BUILD_TESTS=OFF -DCMAKE_CUDA_FLAGS=-lineinfo -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/P && tar -c $SRC | tar -x -C tmp-gpu/P
(cd tmp-gpu/P && patch -p1 -s < ../../docs/results/v38-one-h200/next-l1-prefetch.patch &&
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1 &&
  cmake --build build/gpu -j6 --target moe-ep test_gpu_backend > $OUT/build-P.log 2>&1 || echo "build P failed") &
cmake --build build/gpu -j9 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
t built
M=build/gpu/tools/moe-ep
S="--section WarpStateStats --section SchedulerStats --section SourceCounters --section SpeedOfLight --section Occupancy --import-source yes -c 1 -s 3 -f"
mkdir -p $OUT/s
for dt in int8_e3m4 fp8; do
  timeout 120 ncu $S -k regex:combine_kernel -o $OUT/s/$dt $M bench --backend cuda --ranks 1 --num-sms 32 \
    --tokens 4096 --dispatch-dtype bf16 --combine-dtype $dt --iters 3 --warmup 1 --no-check >> $OUT/s/log.txt 2>&1
  timeout 60 ncu --import $OUT/s/$dt.ncu-rep --page details > $OUT/details-$dt.txt 2>&1
  timeout 60 ncu --import $OUT/s/$dt.ncu-rep --page source --csv --print-source cuda,sass > $OUT/s/$dt-cuda-sass.csv 2>&1
  python3 docs/results/v23-one-h200/hotspots.py $OUT/s/$dt-cuda-sass.csv 25 > $OUT/hotspots-$dt.txt 2>&1
  grep -E "combine_kernel|Duration|Executed Instructions|Issue Slots Busy|Stall|Warp Cycles Per|Eligible|Achieved Occupancy|DRAM Throughput" $OUT/details-$dt.txt | head -40
done
rm -rf $OUT/s
t ncu
B="bench --backend cuda --ranks 1 --tokens 4096 --num-sms 32,132 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16,fp8,fp8_direct_cast,int8_e3m4 --iters 20 --warmup 3"
for r in 1 2; do for v in . tmp-gpu/P; do
  echo "== $v round $r"; timeout 70 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench.log
t bench
BT=$(find tmp-gpu/P/build/gpu -name test_gpu_backend -type f | head -1)
MOE_EP_TIMEOUT_S=10 timeout $(( 590 - $(date +%s) + T0 )) $BT --gtest_filter='GpuBackend.ExtremeFinite*:GpuBackend.AllPairs*' > $OUT/tests-P.log 2>&1; echo "P tests rc $?"
t end
