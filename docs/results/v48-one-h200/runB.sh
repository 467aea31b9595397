#!/bin/bash
# run B (v48): the general reduce's own part from the warp's slot table too (own-table.patch, the
# working tree), against run A's form (the tree without the patch). ptxas: every in-place
# ll_combine instantiation without spills (72-96 bytes of spill stores in run A's form; the
# LocalSlots no longer carried through reduce_combine_range). Predicted at world size 1 (every
# token own-only): level or slightly faster. The general reduce runs only at W > 1, here in the
# decode tests (W = 2/4/8 on one GPU; no times). Also: ll_combine<bf16>'s executed SASS by line
# at 128 tokens on this tree (the next step's breakdown).
#   bash docs/results/v48-one-h200/runB.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v48-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu/A && tar -c $SRC | tar -x -C tmp-gpu/A
(cd tmp-gpu/A && patch -R -p1 -s < ../../$R/own-table.patch) || exit 1
(cd tmp-gpu/A && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j5 --target moe-ep > ../build-A.log 2>&1 || echo "build A failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS=-lineinfo > /dev/null 2>&1
cmake --build build/gpu -j11 > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16,fp8"
for r in 1 2; do for v in tmp-gpu/A .; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t bench
S="--section SourceCounters --section LaunchStats --section InstructionStats --import-source yes --clock-control none --cache-control none -k regex:ll_combine_kernel -s 8 -c 1 -f"
timeout 90 ncu $S -o $OUT/comb build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode \
  --tokens 128 --iters 10 --warmup 2 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16 > $OUT/ncu-log.txt 2>&1
echo "ncu rc $?"
timeout 60 ncu --import $OUT/comb.ncu-rep --page source --csv --print-source cuda,sass > $OUT/comb-src.csv 2>&1
rm -f $OUT/comb.ncu-rep
python3 $R/sass_hist.py $OUT/comb-src.csv 896 > $OUT/comb-sass-hist.txt 2>&1; head -30 $OUT/comb-sass-hist.txt
gzip $OUT/comb-src.csv
t ncu
MOE_EP_TIMEOUT_S=10 timeout $((590 - $(date +%s) + T0)) ctest --test-dir build/gpu -L gpu \
  -R 'LowLatency|LateRank|python_gpu' --output-on-failure --timeout 90 > $OUT/tests.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/tests.log | head -30
t end
