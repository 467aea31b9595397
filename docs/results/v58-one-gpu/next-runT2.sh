#!/bin/bash
# v58, NOT RUN YET (one GPU, about 4 minutes): v58 run T (v57's next-runT.sh) put 2.0-2.1 us of a
# one-token dispatch in the send between its error check and its done add, where it stores the
# slots for the next send, block 0's per-expert counts (256 stores, one a thread) and one token's
# metadata. next-trace2.patch is v57's next-trace.patch with two more send points to split that:
# p5 past the slots for the next send (and the call-number check), p6 after block 0's counts
# (thread 0 of block 0), then p3 (the metadata stored) as before. The same bench as run T;
# trace_points.py reads the send's seven points (a copy with POINTS[1] = 7).
#   bash docs/results/v58-one-gpu/next-runT2.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/T && tar -c $SRC | tar -x -C tmp-gpu/T
(cd tmp-gpu/T && patch -p1 -s < ../../docs/results/v58-one-gpu/next-trace2.patch) || exit 1
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
sed "s/1: 5, 2: 6/1: 7, 2: 6/" docs/results/v49-one-h200/trace_points.py > tmp-gpu/trace_points.py
python3 tmp-gpu/trace_points.py $OUT/trace.log
t end
