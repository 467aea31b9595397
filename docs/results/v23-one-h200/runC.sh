#!/bin/bash
# run C (session 29): wip/create-left (a creation round judges a peer already past it by its
# attempt there); issue 14's combine at 128 tokens, fp8 blockwise against int8_e3m4 alternately
# (bench, 200 iterations, three times each) and under ncu; warp-state samples at the finest
# interval for the fixed costs (notify and dispatch at 128 tokens, decode send and combine at 1).
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS=-lineinfo > /dev/null 2>&1
cmake --build build/gpu -j16 > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t build done
R='GpuAgreement\.|GpuCopyEngineErrors\.|_D[0-9]|Ranks/SingleGpuWorld\.AllDtype|GpuNodesDomains'
{
MOE_EP_TIMEOUT_S=10 timeout 150 ctest --test-dir build/gpu -R "$R" --output-on-failure --timeout 60
echo "== repeat"
MOE_EP_TIMEOUT_S=10 timeout 40 ctest --test-dir build/gpu -R 'RanksThatDisagreeOnCopyEngine|APeerPastTheCreation' --repeat until-fail:3 --timeout 30 --output-on-failure
} > $OUT/ctest.log 2>&1
grep -E "^==|tests passed|Total Test time|\*\*\*|Failed|APeerPast" $OUT/ctest.log | head -30
t tests done
M=build/gpu/tools/moe-ep
{
for i in 1 2 3; do for c in fp8 int8_e3m4; do
  echo "== round $i, $c"; timeout 30 $M bench --backend cuda --ranks 1 --tokens 128 --num-sms 32,132 --dispatch-dtype bf16 --combine-dtype $c --iters 200 --warmup 20
done; done
} > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench done
{
for c in fp8 int8_e3m4; do for s in 32 132; do
  echo "== combine_kernel, $c, 128 tokens, $s SMs"
  timeout 60 ncu -k regex:combine_kernel --print-summary per-kernel $M bench --backend cuda --ranks 1 --tokens 128 --num-sms $s --iters 5 --warmup 1 --no-check --dispatch-dtype bf16 --combine-dtype $c
done; done
} > $OUT/ncu-combine.log 2>&1
grep -E "^==|^  [a-zA-Z_v].*\(|    Duration" $OUT/ncu-combine.log
t ncu combine done
mkdir -p $OUT/s
S="--section WarpStateStats --section SourceCounters --section SpeedOfLight --warp-sampling-interval 0 --import-source yes -c 1 -f"
N="bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check --dispatch-dtype bf16 --combine-dtype bf16"
D="bench --backend cuda --ranks 1 --mode decode --tokens 1 --iters 3 --warmup 1 --no-check --dispatch-dtype fp8 --combine-dtype bf16"
timeout 60 ncu $S -k regex:notify_kernel -s 2 -o $OUT/s/notify128 $M $N --tokens 128 > $OUT/s/log.txt 2>&1
timeout 60 ncu $S -k regex:dispatch_kernel -s 2 -o $OUT/s/dispatch128 $M $N --tokens 128 >> $OUT/s/log.txt 2>&1
timeout 60 ncu $S -k regex:ll_send_kernel -s 2 -o $OUT/s/llsend1 $M $D >> $OUT/s/log.txt 2>&1
timeout 60 ncu $S -k regex:ll_combine_kernel -s 2 -o $OUT/s/llcombine1 $M $D >> $OUT/s/log.txt 2>&1
for r in notify128 dispatch128 llsend1 llcombine1; do
  timeout 60 ncu --import $OUT/s/$r.ncu-rep --page source --csv --print-source sass > $OUT/s/$r-sass.csv 2>&1
  timeout 60 ncu --import $OUT/s/$r.ncu-rep --page source --csv --print-source cuda,sass > $OUT/s/$r-cuda-sass.csv 2>&1
  timeout 60 ncu --import $OUT/s/$r.ncu-rep --page details > $OUT/s/$r-details.txt 2>&1
  rm -f $OUT/s/$r.ncu-rep
done
ls -la $OUT/s; grep -E "Duration|Warp Cycles Per Issued" $OUT/s/*-details.txt
(cd $OUT && tar czf samples.tgz s && rm -rf s)
ls -la $OUT
t end
