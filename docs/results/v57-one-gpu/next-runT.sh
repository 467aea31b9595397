#!/bin/bash
# v57, NOT RUN YET (one GPU, about 4 minutes): where a decode round trip goes on main since v55's
# step kernel and v56's blocks. v54's trace (perf-history v54, one H100) put 11 us of the
# 128-token dispatch in steps that do not grow with tokens: the step kernel's 5 us, the send's
# wait for it (1.3), its error check (1.1), its counts (1.5). v55 moved the ranks beside the
# exchange threads and v56 doubled the data blocks; this repeats the trace on that main.
# Tree T = main + next-trace.patch: v54's patch made again (its step kernel and ranks hunks
# rewritten for v55's kernel; the send, expand and combine points as in v54). The step kernel's
# points (kernel 0): 0 its wait for the kernel before, 1 pass 1 of the ranks, 2 the exchange
# threads past thread 0's reads of the state, 3 the block after the exchange and the last
# window, 7 a window's ids in (lane 0 of each ranks warp), 4 / 5 / 6 the last window's pass 2
# begun / done / the totals stored (lane 0 of each ranks warp). The points are atomics of thread
# 0 (or of each warp's lane 0): upper bounds.
# Decode bench of T, fp8 dispatch with a bf16 combine, one round graph a replay, 1 / 32 / 128 /
# 256 tokens, one configuration a process, 2 rounds; read by v49's trace_points.py.
#   bash docs/results/v57-one-gpu/next-runT.sh      (logs to $OUT)
# PATCH and SEND_POINTS (default next-trace.patch and 5, as run in v58) name another trace patch
# and how many points its send has (v58's next-runT2.sh).
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/T && tar -c $SRC | tar -x -C tmp-gpu/T
PATCH=${PATCH:-docs/results/v57-one-gpu/next-trace.patch}
(cd tmp-gpu/T && patch -p1 -s < ../../$PATCH) || exit 1
(cd tmp-gpu/T && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j16 --target moe-ep > $OUT/build-T.log 2>&1) ||
  { tail -40 $OUT/build-T.log; exit 1; }
t built
for r in 1 2; do for tok in 1 32 128 256; do
  echo "== $tok fp8 round $r"
  timeout 60 tmp-gpu/T/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode \
    --tokens $tok --dispatch-dtype fp8 --combine-dtype bf16 --decode-graph round --iters 200 --warmup 20
done; done > $OUT/trace.log 2>&1
grep -E "wrong|rror" $OUT/trace.log | sort | uniq -c
sed "s/1: 5, 2: 6/1: ${SEND_POINTS:-5}, 2: 6/" docs/results/v49-one-h200/trace_points.py \
  > tmp-gpu/trace_points.py
python3 tmp-gpu/trace_points.py $OUT/trace.log
t end
