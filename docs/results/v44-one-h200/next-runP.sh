#!/bin/bash
# Prepared in v44, NOT RUN YET: where a one-node decode dispatch's time goes inside its kernels.
# v44 run T's trace: at one token the send's last block exits 4.7 us after the step kernel's
# (step end 3.7, send end 8.4), though its rows were stored before its wait; X1 (its tail's loads
# at once) gained nothing. Tree P = this tree + next-trace-G.patch (v43: each decode kernel's first
# entry and last exit) + next-trace-points.patch (points inside the step kernel, the send's tail,
# its fence and its adds, and the expand's wait: trace_points.py names them). 1 and 128 tokens,
# fp8 and bf16 dispatch with a bf16 combine, one configuration a process, three rounds. Then
# main's decode legs at SM budgets of 16, 32 (the default), 64 and 132 (128 tokens, two rounds):
# how much of a leg the budget bounds (issue 13's 6 us a leg needs the combine's 16.5 MB at
# 2.75 TB/s, about the copy floor of 32 SMs).
#   bash docs/results/v44-one-h200/next-runP.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/P && tar -c $SRC | tar -x -C tmp-gpu/P
for p in docs/results/v43-one-h200/next-trace-G.patch docs/results/v44-one-h200/next-trace-points.patch; do
  (cd tmp-gpu/P && patch -p1 -s < ../../$p) || { echo "patch $p failed"; exit 1; }
done
(cd tmp-gpu/P && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j10 --target moe-ep > ../build-P.log 2>&1 || echo "build P failed") &
cmake -S . -B build/gpu $CFG > /dev/null 2>&1
cmake --build build/gpu -j6 --target moe-ep > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
wait
tail -3 tmp-gpu/build-P.log >> $OUT/build.log
t built
for r in 1 2 3; do for tok in 1 128; do for d in fp8 bf16; do
  echo "== $tok $d round $r"
  timeout 60 tmp-gpu/P/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode \
    --tokens $tok --dispatch-dtype $d --combine-dtype bf16 --iters 200 --warmup 20
done; done; done > $OUT/trace.log 2>&1
grep -E "wrong|rror" $OUT/trace.log | sort | uniq -c
python3 docs/results/v44-one-h200/trace_points.py $OUT/trace.log
t trace
for r in 1 2; do
  echo "== main round $r"
  timeout 100 build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens 128 \
    --num-sms 16,32,64,132 --dispatch-dtype fp8 --combine-dtype bf16 --decode-graph round \
    --iters 200 --warmup 20
done > $OUT/budgets.log 2>&1
python3 tools/bench_compare.py $OUT/budgets.log
t end
