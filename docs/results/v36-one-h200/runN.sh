#!/bin/bash
# Prepared in session 41 for the next session, NOT RUN YET (this session's device time was spent).
# T = next-tickets-ahead.patch: the combine kernels' warps take their work tickets one ahead
# (TicketsAhead in data_common.cuh): lane 0 asks for the next ticket as soon as the warp starts
# an item, so the L2 atomic's round trip runs under the item's work instead of between items.
# Tickets still go out in order (a waiting reduce holds only later tickets). ptxas (here):
# normal-mode combine_kernel unchanged but int8_e3m4 whole rows (28/32 -> 56/44 bytes of
# spills); ll_combine bf16 in place 0 -> 28/16, fp8 blockwise in place 24/20 -> 36/24.
# Predicted (run J, v35: the decode combine's ticket atomic 7.6% of its warp samples at 128
# tokens; every warp there has one item, then one more ticket to learn that none is left):
# decode combine at 128 and 256 tokens 0.5-1.5 us faster, at 1 token less; normal-mode combine
# at 4096 tokens (about 4 items a warp, 5 round trips) 1-4 us faster, int8_e3m4 maybe slower.
# O = next-senders-first.patch: count_kernel hands out notify's sender tickets before the scan's
# shares (they wait on nothing but earlier senders), so they start at once instead of behind a
# share; ptxas: count_kernel<false> 12/44 -> 20/56 bytes of spills.
# P = next-scan-leaves-notify-blocks.patch: the scan's shares at most the budget's blocks less
# notify's tickets, so each ticket has a block of its own (30 shares at 4096 tokens, 32 SMs).
# Both address v35 run I's cost of the budget fix (count blocks one an SM: 4096-token dispatch
# 1.6-2.8 us slower, notify's tickets waiting for a share). Predicted at 4096 tokens: O and P
# each 1-2.5 us faster than main; no change at 128 tokens (one share); P's validated dispatch
# slower (30 shares of x instead of 32, about 7%).
#   bash docs/results/v35-one-h200/next-runN.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v35-one-h200
rm -rf tmp-gpu && for v in T O P; do mkdir -p tmp-gpu/$v && tar -c $SRC | tar -x -C tmp-gpu/$v; done
ap() { (cd tmp-gpu/$1 && patch -p1 -s < ../../$R/$2) || echo "$2 did not apply to $1"; }
ap T next-tickets-ahead.patch; ap O next-senders-first.patch; ap P next-scan-leaves-notify-blocks.patch
for v in O P; do (cd tmp-gpu/$v && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j2 --target moe-ep > $OUT/build-$v.log 2>&1 || echo "build $v failed") & done
(cd tmp-gpu/T && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j8 > $OUT/build-T.log 2>&1 || { echo "build T failed"; grep -B2 -A10 error $OUT/build-T.log | head -30; }) &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j4 --target moe-ep > $OUT/build-M.log 2>&1 || echo "build M failed"
wait
t built
for r in 1 2; do for v in . tmp-gpu/T; do
  echo "== $v decode"; timeout 60 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype fp8 --combine-dtype bf16,fp8,int8_e3m4 --iters 200 --warmup 20
  echo "== $v normal"; timeout 60 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --num-sms 32 --tokens 128,4096 --dispatch-dtype bf16 --combine-dtype bf16,fp8,fp8_direct_cast,int8_e3m4 --iters 20 --warmup 3
done; done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench.log
t bench
for r in 1 2; do for v in . tmp-gpu/O tmp-gpu/P; do
  echo "== $v count"; timeout 40 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --num-sms 32 --tokens 128,4096 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 20 --warmup 3
  echo "== $v count validated"; MOE_EP_VALIDATE=1 timeout 40 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --num-sms 32 --tokens 4096 --dispatch-dtype fp8 --combine-dtype bf16 --iters 20 --warmup 3
done; done > $OUT/bench-count.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench-count.log
t count
MOE_EP_TIMEOUT_S=10 timeout $(( 585 - $(date +%s) + T0 )) ctest --test-dir tmp-gpu/T/build/gpu -L gpu --output-on-failure --timeout 60 \
  -R 'LowLatency|GpuBackend|AllPairs|WorldSizeOne|CopyEngine' > $OUT/ctest.log 2>&1
echo "ctest rc $?"; grep -E "tests passed|Failed|\*\*\*Timeout|\*\*\*Failed|Total Test" $OUT/ctest.log | head -20
t end
