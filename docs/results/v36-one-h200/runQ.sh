#!/bin/bash
# v36 run Q (about 240 s of device time left): X = the working tree, the combine kernels' warps
# stopping after an item of the last wave of tickets without taking another (data_common.cuh,
# last_wave_of_tickets); M = git archive HEAD on the device (26de582: the same combine kernels
# as 0f05c8e). Predicted: each warp's last ticket round trip (on one counter, every warp at
# once) off the combine's path: decode combine 0.5-1.3 us faster at 32-256 tokens, about 0.5 at
# one; normal-mode combine at 4096 tokens 0-1 us.
#   1. decode bench, fp8 dispatch, bf16 combine, M and X alternated twice;
#   2. normal mode combine at 4096 tokens, 32 SMs, bf16 / fp8, M and X once;
#   3. X's decode tests at W = 2/4/8 with sends and waits (AllDtypePairs, Graph, Hooks) and the
#      normal-mode GpuBackend selection, as far as the time allows.
#   bash docs/results/v36-one-h200/runQ.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
rm -rf tmp-gpu && mkdir -p tmp-gpu/M && git archive HEAD | tar -x -C tmp-gpu/M
(cd tmp-gpu/M && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j5 --target moe-ep > $OUT/build-M.log 2>&1 || echo "build M failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
cmake --build build/gpu -j11 --target moe-ep test_gpu_low_latency test_gpu_backend > $OUT/build-X.log 2>&1 || { echo "build X failed"; grep -B2 -A10 error $OUT/build-X.log | head -40; }
wait
t built
for r in 1 2; do for v in tmp-gpu/M .; do
  echo "== $v decode $r"; timeout 30 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20
done; done > $OUT/bench.log 2>&1
for v in tmp-gpu/M .; do
  echo "== $v normal"; timeout 30 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --num-sms 32 --tokens 4096 --dispatch-dtype bf16 --combine-dtype bf16,fp8 --iters 20 --warmup 3
done >> $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench.log
t bench
L=$(find build/gpu -name test_gpu_low_latency -type f | head -1); B=$(find build/gpu -name test_gpu_backend -type f | head -1)
{ MOE_EP_TIMEOUT_S=10 timeout $(( 200 - $(date +%s) + T0 )) $L --gtest_filter='Ranks/GpuLowLatency.*:GpuLowLatencyGraph.*:GpuLowLatencyHooks*'
  echo "rc $?"
  MOE_EP_TIMEOUT_S=10 timeout $(( 225 - $(date +%s) + T0 )) $B --gtest_filter='GpuBackend.OneSm*:GpuBackend.RejectedInput*:GpuBackend.AllPairs*:GpuBackend.OddShapes*'
  echo "rc $?"; } > $OUT/tests.log 2>&1
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|^rc|OK \]" $OUT/tests.log | head -40
t end
