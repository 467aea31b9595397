#!/bin/bash
# run C (v48): the rest of the GPU suite (`ctest -L gpu` but the decode tests run B ran on this
# tree: LowLatency, LateRank, python_gpu) on main with v48's decode combine (slots beside the mask,
# the slot table in the pipe and the general reduce, bf16's round trip), and first the test that
# stalled in run B (Nodes W8L4, an upload that never returned) ten more times alone.
#   bash docs/results/v48-one-h200/runC.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j16 > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
BT=$(find build/gpu -name test_gpu_low_latency_nodes -type f | head -1)
for i in $(seq 1 10); do
  MOE_EP_TIMEOUT_S=10 timeout 60 $BT --gtest_filter='Nodes/GpuLowLatencyNodes.DispatchOfEveryDtypeEqualsTheReference/W8L4' > $OUT/w8l4.log 2>&1
  echo "W8L4 $i rc $?"
done | tee $OUT/w8l4-reps.txt | sort | uniq -c | head; rm -f $OUT/w8l4.log
t w8l4
MOE_EP_TIMEOUT_S=10 timeout $((470 - $(date +%s) + T0)) ctest --test-dir build/gpu -L gpu \
  -E 'LowLatency|LateRank|python_gpu' --output-on-failure --timeout 60 > $OUT/suite.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)|Total Test" $OUT/suite.log | head -30
t end
