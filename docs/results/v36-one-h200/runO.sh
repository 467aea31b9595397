#!/bin/bash
# v36 run O: C = the working tree (main with notify.cu's scan shares leaving notify's tickets
# blocks of their own outside validation mode: run N's P without its validated slowdown);
# M = git archive HEAD on the device (the session's first commit, 26de582).
#   1. normal mode at 128 and 4096 tokens, 32 SMs, bf16/fp8/mxfp4 dispatch, M and C alternated
#      twice; predicted as run N's P: C 0.5-3 us faster at 4096 tokens, level at 128;
#   2. C's validated fp8 dispatch at 4096: predicted level with M (run N: 224 us), not P's 280;
#   3. the whole GPU suite on C (also the first suite run of a99ce3f, 65fb373 and 75502db).
#   bash docs/results/v36-one-h200/runO.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
rm -rf tmp-gpu && mkdir -p tmp-gpu/M && git archive HEAD | tar -x -C tmp-gpu/M
git log -1 --format='M = %h %s' | cut -c1-100
(cd tmp-gpu/M && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j3 --target moe-ep > $OUT/build-M.log 2>&1 || echo "build M failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
cmake --build build/gpu -j13 > $OUT/build-C.log 2>&1 || { echo "build C failed"; grep -B2 -A10 error $OUT/build-C.log | head -40; }
wait
t built
for r in 1 2; do for v in tmp-gpu/M .; do
  echo "== $v count $r"; timeout 40 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --num-sms 32 --tokens 128,4096 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 20 --warmup 3
done; done > $OUT/bench.log 2>&1
for v in tmp-gpu/M .; do
  echo "== $v validated"; MOE_EP_VALIDATE=1 timeout 40 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --num-sms 32 --tokens 4096 --dispatch-dtype fp8 --combine-dtype bf16 --iters 20 --warmup 3
done >> $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 590 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
echo "ctest rc $?"; grep -E "tests passed|Failed|\*\*\*Timeout|\*\*\*Failed|Total Test" $OUT/ctest.log | head -20
t end
