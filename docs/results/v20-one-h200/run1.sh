#!/bin/bash
# run 1 (session 26): merged tree gpu-run1 = main + wip/decode-nodes + wip/own-unroll2
set -u
T0=$(date +%s)
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
git log --oneline -3 > $OUT/head.txt 2>&1 || true
nvidia-smi -L >> $OUT/head.txt
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) > $OUT/configure.log 2>&1
cmake --build build/gpu -j16 > $OUT/build.log 2>&1 || { tail -50 $OUT/build.log; exit 1; }
echo "build done at $(( $(date +%s) - T0 )) s"
# the tests new on this tree first, then everything else labelled gpu
ctest --test-dir build/gpu -R 'LowLatencyNodes|DecodeAcross|CopyEngine|GpuFormats|GpuNodes|SingleGpuWorld' --output-on-failure --timeout 150 > $OUT/ctest-new.log 2>&1
tail -25 $OUT/ctest-new.log
echo "new done at $(( $(date +%s) - T0 )) s"
ctest --test-dir build/gpu -L gpu -E 'LowLatencyNodes|DecodeAcross|CopyEngine|GpuFormats|GpuNodes|SingleGpuWorld' --output-on-failure --timeout 150 > $OUT/ctest-rest.log 2>&1
tail -15 $OUT/ctest-rest.log
echo "rest done at $(( $(date +%s) - T0 )) s"
i=0
while [ $(( $(date +%s) - T0 )) -lt 500 ]; do
  i=$((i+1))
  ctest --test-dir build/gpu -R 'RejectedCreationWithALateRank' --output-on-failure --timeout 60 > $OUT/laterank-$i.log 2>&1
  grep -E "tests passed|Failed" $OUT/laterank-$i.log | head -2
done
echo "end at $(( $(date +%s) - T0 )) s"
