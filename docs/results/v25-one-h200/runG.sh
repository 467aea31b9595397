#!/bin/bash
# run G (session 31): main after the v24 merge (7c7b13b). The normal-mode bench of all pairs at
# 128 and 4096 tokens (32 SMs), ncu per kernel at 128 tokens (normal and decode), warp-state
# samples of the decode data kernels at 128 tokens and of the fp8 dispatch kernel at 4096.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF -DCMAKE_CUDA_FLAGS=-lineinfo > /dev/null 2>&1
cmake --build build/gpu -j16 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
M=build/gpu/tools/moe-ep
{
echo "== normal all pairs"; timeout 120 $M bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype all --combine-dtype all --iters 50 --warmup 5
echo "== decode"; timeout 40 $M bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20
} > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench done
N="bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check"
D="bench --backend cuda --ranks 1 --mode decode --iters 3 --warmup 1 --no-check --dispatch-dtype fp8 --combine-dtype bf16"
{
echo "== normal fp8/fp8 128"; timeout 60 ncu --print-summary per-kernel $M $N --tokens 128 --dispatch-dtype fp8 --combine-dtype fp8
echo "== decode fp8/bf16 128"; timeout 60 ncu --print-summary per-kernel $M $D --tokens 128
} > $OUT/ncu.log 2>&1
grep -E "^==|^  [a-zA-Z_v].*\(|    Duration" $OUT/ncu.log
t ncu done
mkdir -p $OUT/s
S="--section WarpStateStats --section SourceCounters --section SpeedOfLight --section Occupancy --section LaunchStats --section InstructionStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --warp-sampling-interval 0 --import-source yes -c 1 -f"
timeout 90 ncu $S -k regex:ll_send_kernel -s 2 -o $OUT/s/llsend128 $M $D --tokens 128 > $OUT/s/log.txt 2>&1
timeout 90 ncu $S -k regex:ll_expand_kernel -s 2 -o $OUT/s/llexpand128 $M $D --tokens 128 >> $OUT/s/log.txt 2>&1
timeout 90 ncu $S -k regex:ll_combine_kernel -s 2 -o $OUT/s/llcombine128 $M $D --tokens 128 >> $OUT/s/log.txt 2>&1
timeout 90 ncu $S -k regex:dispatch_kernel -s 2 -o $OUT/s/dispatch4096fp8 $M $N --tokens 4096 --dispatch-dtype fp8 --combine-dtype bf16 >> $OUT/s/log.txt 2>&1
t samples taken
for r in llsend128 llexpand128 llcombine128 dispatch4096fp8; do
  timeout 60 ncu --import $OUT/s/$r.ncu-rep --page source --csv --print-source cuda,sass > $OUT/s/$r-cuda-sass.csv 2>&1
  timeout 60 ncu --import $OUT/s/$r.ncu-rep --page details > $OUT/s/$r-details.txt 2>&1
  rm -f $OUT/s/$r.ncu-rep
done
grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Executed Instructions  |Achieved Occupancy|DRAM Throughput" $OUT/s/*-details.txt
for r in llsend128 llexpand128 llcombine128 dispatch4096fp8; do echo "== $r"; python3 docs/results/v23-one-h200/hotspots.py $OUT/s/$r-cuda-sass.csv 12; done > $OUT/hotspots.txt 2>&1
(cd $OUT && tar czf samples.tgz s && rm -rf s)
t end
