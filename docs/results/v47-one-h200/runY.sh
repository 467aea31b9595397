#!/bin/bash
# run Y (v47): does the decode combine wait for HBM because its loads of y are evict-first?
# Run P (ncu, 128 tokens): ll_combine<bf16> L2 hit rate 17%, 23% of its warp samples long
# scoreboard at the first use of a slot's loaded y. The combine loads y with ld.global.cs
# (evict-first in L2), and the bench reuses one y for every round (in a serving engine the
# expert GEMM has just written y, so its rows are L2-hot when the combine reads them).
#   Y   runY-y-l2.patch: the decode combine's loads of y by ld.global.cg (L2, normal policy).
#   XY  runY-xy-l2.patch: Y, and the decode send's loads of x the same way.
# Predicted: if HBM latency is what the combine waits for, Y's bf16 combine at 128 tokens drops
# from 15.7-15.9 us toward 10 (the 14.7 MB from L2 instead of HBM); nothing at 1 token.
#   bash docs/results/v47-one-h200/runY.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v47-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu
for v in Y XY; do mkdir -p tmp-gpu/$v && tar -c $SRC | tar -x -C tmp-gpu/$v; done
(cd tmp-gpu/Y && patch -p1 -s < ../../$R/runY-y-l2.patch) || exit 1
(cd tmp-gpu/XY && patch -p1 -s < ../../$R/runY-xy-l2.patch) || exit 1
for v in Y XY; do
  (cd tmp-gpu/$v && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j5 --target moe-ep > ../build-$v.log 2>&1 || echo "build $v failed") &
done
cmake -S . -B build/gpu $CFG > /dev/null 2>&1
cmake --build build/gpu -j6 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype all"
for r in 1 2 3; do for v in . tmp-gpu/Y tmp-gpu/XY; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t bench
D="bench --backend cuda --ranks 1 --mode decode --tokens 128 --iters 10 --warmup 2 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16"
for v in . tmp-gpu/Y; do
  echo "== $v"
  timeout 60 ncu --clock-control none --cache-control none -k regex:ll_combine -s 8 -c 4 \
    --metrics gpu__time_duration.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum \
    $v/build/gpu/tools/moe-ep $D 2>&1 | grep -E "gpu__time|lts__t|dram__"
done > $OUT/ncu.log 2>&1
cat $OUT/ncu.log
t end
