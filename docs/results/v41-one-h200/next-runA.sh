#!/bin/bash
# Prepared in v41 for the next session; ran in v42 as run A (docs/results/v42-one-h200/runA-*). A = main + next-ll-done-counts.patch: one
# node's decode send ends as v41's normal-mode dispatch does. Each block of ll_send stores this
# rank's done word {step, T} into every destination (the same value from every block), fences,
# and adds 1 | G << 32 into this rank's done count of the dispatch call's parity
# (LowLatencyState::dispatch_calls & 1) in every destination; every block of ll_expand waits
# for each source's count to be complete, then for its done word; the next dispatch's step
# kernel clears the previous call's counts (a peer adds to them again only after this rank's
# step word of the call after, which a later kernel stores; no receive can be pending then).
# Several nodes keep the forwarders' done words. ptxas: no spills added, ll_send fp8 58 -> 62
# registers, ll_step_kernel<false> 32 -> 38 (caps 64 and 1024 threads' 64). launch_ll_send refuses
# a grid above BufferLayout::kMaxDoneCountBlocks on one node, as launch_dispatch does.
# v40 run R: a one-token send ends 5.8 us after its step; v41 run V: the same end in normal mode
# took about 1 us off. Predicted: 0.5-1.5 us off each decode dispatch (and off round_us), at 1 to
# 256 tokens; the combine level.
# Bench main / A alternating, 3 rounds, --decode-graph round; then A's decode GPU tests (one node
# W = 1 and the one-GPU world's W = 2/4/8, late rank, timeouts, nodes) within the call's 600 s.
#   bash docs/results/v41-one-h200/next-runA.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
TESTS="test_layout test_gpu_low_latency test_gpu_low_latency_shapes test_gpu_late_rank test_gpu_timeouts test_gpu_low_latency_nodes"
rm -rf tmp-gpu && mkdir -p tmp-gpu/A && tar -c $SRC | tar -x -C tmp-gpu/A
(cd tmp-gpu/A && patch -p1 -s < ../../docs/results/v41-one-h200/next-ll-done-counts.patch &&
  cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j10 --target moe-ep $TESTS > $OUT/build-A.log 2>&1 || echo "build A failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j6 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
cat $OUT/build-A.log >> $OUT/build.log; rm -f $OUT/build-A.log
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --combine-dtype bf16"
for r in 1 2 3; do for v in . tmp-gpu/A; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B --dispatch-dtype all
done; done > $OUT/decode.log 2>&1
grep -E "^==|^ +[0-9]+ +[a-z0-9]+ +[a-z0-9_]+ +[0-9]|wrong|rror" $OUT/decode.log | awk '/^ +[0-9]/{print $1, $2, $3, $4, $5, $NF; next} {print}'
t bench
for b in $TESTS; do
  left=$(( 585 - $(date +%s) + T0 )); [ $left -lt 20 ] && { echo "$b: no time left"; continue; }
  BT=$(find tmp-gpu/A/build/gpu -name $b -type f | head -1)
  MOE_EP_TIMEOUT_S=10 timeout $left $BT >> $OUT/tests-A.log 2>&1; echo "$b rc $?"
done
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests-A.log | head -20
t end
