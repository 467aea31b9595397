#!/bin/bash
# run 2 (session 26): gpu-run1 + stream-ordered library memory, pinned test copies, barrier after instantiation
set -u
T0=$(date +%s)
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
nvidia-smi -L > $OUT/head.txt
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) > $OUT/configure.log 2>&1
cmake --build build/gpu -j16 > $OUT/build.log 2>&1 || { tail -50 $OUT/build.log; exit 1; }
echo "build done at $(( $(date +%s) - T0 )) s"
ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 120 > $OUT/ctest-gpu.log 2>&1
grep -E "tests passed|Total Test time" $OUT/ctest-gpu.log; grep -E "\*\*\*|Failed  " $OUT/ctest-gpu.log | head -20
echo "suite done at $(( $(date +%s) - T0 )) s"
i=0
while [ $(( $(date +%s) - T0 )) -lt 480 ]; do
  i=$((i+1))
  ctest --test-dir build/gpu -R 'DecodeAcrossNodesIsCreated|GpuLowLatencyNodes.Captured|PrequantizedInputEqualsTheReference|RejectedCreationWithALateRank|GpuLowLatencyHooksGraph|GpuLowLatencyGraph|Ranks/GpuLowLatency.AllDtype' --output-on-failure --timeout 70 > $OUT/repeat-$i.log 2>&1
  echo "repeat $i: $(grep -E 'tests passed' $OUT/repeat-$i.log) at $(( $(date +%s) - T0 )) s"; grep -E "\*\*\*" $OUT/repeat-$i.log | head
done
