#!/bin/bash
# v47 run S (prepared in v46 as next-runS.sh; about 450 s, one H200):
# 1. moe-ep-latency-floor with its page rows (new in v46, not run): L2-hit loads whose slots
#    each lie in a 2 MiB page of their own, 64 pages and 4096 (8 GiB). v46 found a decode round's
#    kernels as such cost about 3 us of the 18.3 us one-token round, the rest being chains of
#    steps inside them that read 0.5-2.4 us each (v45 run P) against 0.15 us for an L2 hit in a
#    one-page chase. If a load in another page costs several times an L2 hit, the words a
#    decode kernel reads one after another (its state, the error flag, sent_calls, counts, slot
#    ranks, flags, metadata, done words: different regions of a large buffer) are the lead:
#    gather them into a few pages.
# 2. The whole GPU suite on main since v46 (T and R merged, run_gpu_ranks' streams): v46 ran
#    only some of its binaries (runs F, X1-X3).
#   bash docs/results/v47-one-h200/runS.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) \
  > $OUT/build.log 2>&1
cmake --build build/gpu -j16 >> $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
timeout 60 build/gpu/tools/moe-ep-latency-floor --reps 9 --chain 256 > $OUT/latency.log 2>&1
echo "latency floor rc $?"
grep -E "load|round" $OUT/latency.log
t "latency floor"
MOE_EP_TIMEOUT_S=10 timeout $((590 - $(date +%s) + T0)) ctest --test-dir build/gpu -L gpu \
  --output-on-failure --timeout 60 > $OUT/suite.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/suite.log | head -30
t end
