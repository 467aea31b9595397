#!/bin/bash
# run E (v47): the decode combine with its loads of y ahead of its sums (an experiment, top-k <= 8
# only: the bench's top-8; not a mergeable tree).
# Run P (ncu, 128 tokens): ll_combine<bf16> 13.4 us, 23% of its warp samples long scoreboard at
# the first use of a step's loads of y; run Y: y comes from HBM (14.7 MB read, L2 hit rate 16-19%
# with either load policy). Each warp loads a step's 8 slots, then sums them: no load in flight
# while it sums. E (runE-pipe-experiment.patch, SlotSumPipe): slots 4-7 of a step into registers,
# then slots 0-3 (copied ahead into shared memory by cp.async) summed, then the next step's slots
# 0-3 copied, then slots 4-7 summed. ptxas: ll_combine<bf16, in place> spills 92 bytes (main 0).
# Predicted: if the sums' time is what the loads wait behind, the bf16 combine at 128 tokens
# drops from 15.6 toward 11-12 us and at 256 from 26 toward 19; 1 token level.
#   bash docs/results/v47-one-h200/runE.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v47-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu
for v in E; do mkdir -p tmp-gpu/$v && tar -c $SRC | tar -x -C tmp-gpu/$v; done
(cd tmp-gpu/E && patch -p1 -s < ../../$R/runE-pipe-experiment.patch) || exit 1
for v in E; do
  (cd tmp-gpu/$v && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j8 --target moe-ep > ../build-$v.log 2>&1 || echo "build $v failed") &
done
cmake -S . -B build/gpu $CFG > /dev/null 2>&1
cmake --build build/gpu -j8 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype all"
for r in 1 2 3; do for v in . tmp-gpu/E; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t bench
D="bench --backend cuda --ranks 1 --mode decode --tokens 128 --iters 10 --warmup 2 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16"
for v in . tmp-gpu/E; do
  echo "== $v"
  timeout 60 ncu --clock-control none --cache-control none -k regex:ll_combine -s 8 -c 4 \
    --metrics gpu__time_duration.sum,smsp__inst_executed.sum,dram__bytes_read.sum \
    $v/build/gpu/tools/moe-ep $D 2>&1 | grep -E "gpu__time|smsp__inst|dram__"
done > $OUT/ncu.log 2>&1
cat $OUT/ncu.log
t end
