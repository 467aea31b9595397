#!/bin/bash
# v44 run A: the whole GPU suite on the tree with S merged (next-slots-a-thread.patch from
# docs/results/v43-one-h200: sent_calls stored a slot a thread), and the SASS of the dispatch
# data kernels (cuobjdump, for counting instructions a slice; this machine has no cuobjdump).
#   bash docs/results/v44-one-h200/runA.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
rm -rf tmp-gpu
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) \
  > $OUT/build.log 2>&1
cmake --build build/gpu -j16 >> $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
( O=$(find build/gpu -name 'dispatch.cu.o' | head -1)
  cuobjdump -sass "$O" | gzip > $OUT/sass-dispatch.txt.gz ) &
MOE_EP_TIMEOUT_S=10 timeout $(( 590 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu \
  --output-on-failure --timeout 60 > $OUT/suite.log 2>&1
echo "ctest rc $?"
wait
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/suite.log | head -30
ls -la $OUT
t end
