#!/bin/bash
# Prepared in v44, NOT RUN YET: where a one-node decode dispatch's time goes inside its kernels.
# v44 run T's trace: at one token the send's last block exits 4.7 us after the step kernel's
# (step end 3.7, send end 8.4), though its rows were stored before its wait; X1 (its tail's loads
# at once) gained nothing. Tree P = this tree + next-trace-G.patch (v43: each decode kernel's first
# entry and last exit) + next-trace-points.patch (points inside the step kernel, the send's tail,
# its fence and its adds, and the expand's wait: trace_points.py names them). 1 and 128 tokens,
# fp8 and bf16 dispatch with a bf16 combine, one configuration a process, three rounds.
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
  cmake --build build/gpu -j16 --target moe-ep > $OUT/build.log 2>&1) || { tail -30 $OUT/build.log; exit 1; }
t built
for r in 1 2 3; do for tok in 1 128; do for d in fp8 bf16; do
  echo "== $tok $d round $r"
  timeout 60 tmp-gpu/P/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode \
    --tokens $tok --dispatch-dtype $d --combine-dtype bf16 --iters 200 --warmup 20
done; done; done > $OUT/trace.log 2>&1
grep -E "wrong|rror" $OUT/trace.log | sort | uniq -c
python3 docs/results/v44-one-h200/trace_points.py $OUT/trace.log
t end
