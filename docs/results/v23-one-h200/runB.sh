#!/bin/bash
# run B (session 29): main after the merge of wip/notify-parts. Issue 14's second combine
# measurement; where a 128-token call's fixed cost goes (every kernel under ncu, normal and
# decode); notify's stalls at 128 tokens (ncu --set full, SASS with stall samples); the creation
# test that failed in run A, repeated; the one-GPU world's stall with the test pool moved.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS=-lineinfo > /dev/null 2>&1
cmake --build build/gpu -j16 > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t build done
M=build/gpu/tools/moe-ep
{
C="--backend cuda --ranks 1 --tokens 128,4096 --num-sms 32,132 --dispatch-dtype bf16 --combine-dtype all --iters 50 --warmup 5"
echo "== combine all"; timeout 60 $M bench $C
D="--backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype fp8 --combine-dtype bf16 --iters 50 --warmup 10"
echo "== decode"; timeout 60 $M bench $D
} > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench done
B="bench --backend cuda --ranks 1 --tokens 128 --num-sms 32 --iters 3 --warmup 1 --no-check --dispatch-dtype bf16 --combine-dtype bf16"
{
echo "== every kernel, normal, 128 tokens"; timeout 90 ncu --print-summary per-kernel $M $B
echo "== every kernel, decode fp8, 128 tokens"; timeout 90 ncu --print-summary per-kernel $M ${B/--tokens 128/--mode decode --tokens 128} 
echo "== every kernel, decode fp8, 1 token"; timeout 90 ncu --print-summary per-kernel $M ${B/--tokens 128/--mode decode --tokens 1}
} > $OUT/ncu-all.log 2>&1
grep -E "^==|^  [a-zA-Z_v].*\(|    Duration" $OUT/ncu-all.log | head -90
t ncu all done
timeout 120 ncu --set full --import-source yes -k regex:notify_kernel -s 2 -c 1 -o $OUT/notify128 -f $M $B > $OUT/ncu-notify.log 2>&1
timeout 60 ncu --import $OUT/notify128.ncu-rep --page source --csv --print-source sass > $OUT/notify128-sass.csv 2>&1
timeout 60 ncu --import $OUT/notify128.ncu-rep --page details > $OUT/notify128-details.txt 2>&1
wc -c $OUT/notify128*; head -3 $OUT/notify128-sass.csv | cut -c1-400
t ncu full done
{
MOE_EP_TIMEOUT_S=10 timeout 60 ctest --test-dir build/gpu -R 'RanksThatDisagreeOnCopyEngine' --repeat until-fail:10 --timeout 30 --output-on-failure
for s in 0 1 5; do
  echo "== MOE_EP_TEST_STREAM_SKIP=$s"
  MOE_EP_TEST_STREAM_SKIP=$s MOE_EP_TIMEOUT_S=5 timeout 100 ctest --test-dir build/gpu -R 'PrequantizedInputEqualsTheReference/W4' --repeat until-fail:10 --timeout 30
done
} > $OUT/ctest-repeat.log 2>&1
grep -E "^==|tests passed|Total Test time|\*\*\*|Test +#" $OUT/ctest-repeat.log | tail -60
t end
