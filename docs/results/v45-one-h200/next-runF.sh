#!/bin/bash
# Prepared in v45, NOT RUN YET: two fences taken out the way run C took count_block_done's.
#   T  next-ticket-acq-rel.patch: the decode combine's end, where lane 0 of every warp fenced at GPU
#      scope (fence.sc), added its count to tickets[1] and, the last one, fenced again before the
#      reset: one acquire-release add instead (atom.acq_rel.gpu), which orders the same things.
#      The last warp's end is the kernel's end, so its two fences were on every decode combine's
#      path. Predicted 0.2-0.8 us off the decode combine at 1-256 tokens (run C's release adds
#      took 0.3-0.5 us off the dispatch). ptxas: ll_combine_kernel's registers and spills as main's.
#   R  next-flag-release.patch: send_combine_range (a combine row's range sent with a ready flag,
#      normal mode across ranks and the decode combine's sends) had every lane fence at system
#      scope before the warp's barrier and lane 0's release store of the flag; R keeps the barrier
#      and the release only (cumulative, as run C's block ends). At world size 1 no combine row
#      is sent, so R is benched only on two GPUs (next-x2.sh); here its bit-exact tests run.
# 1. Decode bench main / T alternating, 3 rounds. 2. T's decode tests. 3. R's tests (the
# one-GPU world's W = 2/4/8 in both modes, hooks, several nodes, the copy engine).
#   bash docs/results/v45-one-h200/next-runF.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v45-one-h200
TESTS_T="test_gpu_low_latency test_gpu_low_latency_shapes test_gpu_world"
TESTS_R="test_gpu_world test_gpu_backend test_gpu_low_latency test_gpu_low_latency_nodes test_gpu_copy_engine"
rm -rf tmp-gpu && mkdir -p tmp-gpu
for v in T R; do mkdir -p tmp-gpu/$v && tar -c $SRC | tar -x -C tmp-gpu/$v; done
(cd tmp-gpu/T && patch -p1 -s < ../../$R/next-ticket-acq-rel.patch) || exit 1
(cd tmp-gpu/R && patch -p1 -s < ../../$R/next-flag-release.patch) || exit 1
build() {  # name targets jobs
  (cd tmp-gpu/$1 && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
    cmake --build build/gpu -j$3 --target $2 > ../build-$1.log 2>&1 || echo "build $1 failed")
}
build T "moe-ep $TESTS_T" 6 & build R "$TESTS_R" 6 &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j4 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
for v in T R; do echo "== $v" >> $OUT/build.log; tail -n 2 tmp-gpu/build-$v.log >> $OUT/build.log; done
grep -B2 -A6 " error" tmp-gpu/build-*.log | head -30
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype all"
for r in 1 2 3; do for v in . tmp-gpu/T; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t bench
for vb in $(for b in $TESTS_T; do echo T:$b; done) $(for b in $TESTS_R; do echo R:$b; done); do
  v=${vb%%:*}; b=${vb#*:}
  left=$(( 585 - $(date +%s) + T0 )); [ $left -lt 20 ] && { echo "$v $b: no time left"; continue; }
  BT=$(find tmp-gpu/$v/build/gpu -name $b -type f | head -1)
  echo "== $v $b" >> $OUT/tests.log
  MOE_EP_TIMEOUT_S=10 timeout $left $BT >> $OUT/tests.log 2>&1; echo "$v $b rc $?"
done
grep -E "^== |^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log | head -40
t end
