#!/bin/bash
# v44 run B: the decode send's tail loads at once (X1) and the expand's done word loaded beside
# its count (X2 = X1 + that), against main. Trees:
#   .   main (7c0a37f: v43's G with S merged)
#   X1  main + next-x1-send-tail.patch: after its wait for the step kernel, a one-node send block
#       loads the call's number and step, its first metadata item's slot ranks and block 0's first
#       count together, before the error check (main: the step after the check, then the ranks and
#       counts: three dependent round trips, not one). Predicted 0.5-1.0 us off every one-node
#       decode dispatch at 1-256 tokens.
#   X2  X1 + next-x2-expand-word.patch: ll_wait_sources loads the done word beside each poll of
#       the done count and takes it when its tag is this step (main: after the complete count, a
#       round trip more). Predicted a further 0.3-0.7 us off every one-node decode dispatch.
# The decode bench alternating ., X1, X2 (3 rounds), then X2's and X1's decode tests.
#   bash docs/results/v44-one-h200/runB.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
TESTS="test_gpu_low_latency test_gpu_agreement test_gpu_low_latency_shapes test_gpu_late_rank test_gpu_timeouts test_gpu_low_latency_nodes"
R=docs/results/v44-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu
tree() {  # name patches...
  local name=$1; shift
  mkdir -p tmp-gpu/$name && tar -c $SRC | tar -x -C tmp-gpu/$name
  for p in "$@"; do (cd tmp-gpu/$name && patch -p1 -s < ../../$p) || echo "patch $p on $name failed"; done
}
build() {  # name targets jobs
  (cd tmp-gpu/$1 && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
    cmake --build build/gpu -j$3 --target $2 > ../build-$1.log 2>&1 || echo "build $1 failed")
}
tree X1 $R/next-x1-send-tail.patch
tree X2 $R/next-x1-send-tail.patch $R/next-x2-expand-word.patch
build X1 "moe-ep $TESTS" 6 & build X2 "moe-ep $TESTS" 6 &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j4 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
for v in X1 X2; do echo "== $v" >> $OUT/build.log; tail -2 tmp-gpu/build-$v.log >> $OUT/build.log; done
grep -B1 -A3 "failed\|error" $OUT/build.log | head -20
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --combine-dtype bf16"
for r in 1 2 3; do for v in . tmp-gpu/X1 tmp-gpu/X2; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B --dispatch-dtype all
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
t bench
for v in X2 X1; do for b in $TESTS; do
  left=$(( 585 - $(date +%s) + T0 )); [ $left -lt 20 ] && { echo "$v $b: no time left"; continue; }
  BT=$(find tmp-gpu/$v/build/gpu -name $b -type f | head -1)
  echo "== $v $b" >> $OUT/tests.log
  MOE_EP_TIMEOUT_S=10 timeout $left $BT >> $OUT/tests.log 2>&1; echo "$v $b rc $?"
done; done
grep -E "^== |^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log | head -30
t end
