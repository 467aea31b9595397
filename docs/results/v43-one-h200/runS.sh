#!/bin/bash
# v43 run S: the whole GPU suite on the tree with G merged (next-ll-early-rows-own-call.patch;
# run G2 ran only the decode binaries).
#   bash docs/results/v43-one-h200/runS.sh      (logs to $OUT)
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
MOE_EP_TIMEOUT_S=10 timeout $(( 590 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu \
  --output-on-failure --timeout 60 > $OUT/suite.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/suite.log | head -30
t end
