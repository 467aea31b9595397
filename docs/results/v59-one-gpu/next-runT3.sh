#!/bin/bash
# v59, NOT RUN YET (one GPU, about 5 minutes): the decode chain's points again with cheaper
# points. next-trace3.patch is v58's next-trace2.patch with each launch's ring slot read once
# (thread 0, when the probe starts) instead of at every point: v58's traced round took about
# 33 us at 128 tokens against 22.9 untraced, so the intervals carried the points' own loads.
# 1. The decode bench of main (M) and of T3 = main + the patch, fp8 dispatch and bf16 combine,
#    --decode-graph round, 1 / 32 / 128 / 256 tokens in one process, 2 alternating rounds:
#    round_us M against T3 says what the points still cost (tools/bench_compare.py).
# 2. T3's points, one token count a process, 2 rounds (v49's trace_points.py with the send's
#    seven points).
#   bash docs/results/v59-one-gpu/next-runT3.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/T3 && tar -c $SRC | tar -x -C tmp-gpu/T3
(cd tmp-gpu/T3 && patch -p1 -s < ../../docs/results/v59-one-gpu/next-trace3.patch) || exit 1
(cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j6 --target moe-ep > $OUT/build-M.log 2>&1 || echo "build M failed") &
(cd tmp-gpu/T3 && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j10 --target moe-ep > $OUT/build-T3.log 2>&1) ||
  { tail -40 $OUT/build-T3.log; exit 1; }
wait
t built
D="bench --backend cuda --ranks 1 --mode decode --dispatch-dtype fp8 --combine-dtype bf16 --decode-graph round --iters 200 --warmup 20"
# 1. One process a tree and round, every token count (T3's rings print somewhere in it: unread).
for r in 1 2; do for v in M T3; do
  b=.; [ $v = T3 ] && b=tmp-gpu/T3
  echo "== $v round $r"; timeout 100 $b/build/gpu/tools/moe-ep $D --tokens 1,32,128,256
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log | tee $OUT/run.txt
t compared
# 2. T3 alone, one token count a process (its rings print at the combine's launch 1036,
#    inside the 16-round graphs that round_us times; 150 was a per-leg timed graph's).
for r in 1 2; do for tok in 1 32 128 256; do
  echo "== $tok fp8 round $r"
  timeout 60 tmp-gpu/T3/build/gpu/tools/moe-ep $D --tokens $tok
done; done > $OUT/trace.log 2>&1
grep -E "wrong|rror" $OUT/trace.log | sort | uniq -c
sed "s/1: 5, 2: 6/1: 7, 2: 6/" docs/results/v49-one-h200/trace_points.py > tmp-gpu/trace_points.py
python3 tmp-gpu/trace_points.py $OUT/trace.log | tee $OUT/table.txt
t end
