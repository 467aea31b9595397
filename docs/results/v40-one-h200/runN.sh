#!/bin/bash
# v40 run N: Q = main + lighter-ends.patch against main. Q (a) ends a grid (signal_when_grid_done
# without last-block stores: the dispatch's and the one-node decode send's done words) with
# fence.acq_rel.sys in each block and one fence.acq_rel.sys in the last block before relaxed
# stores, where main has fence.sc.sys, then fence.sc.gpu and release stores (a third fence);
# (b) stores num_recv right after the count words, with no system fence after it (the host reads
# it after an event). Run L's stamps: devfence + release 0.8-1.1 us, the system fence behind
# num_recv 0.6-0.9 us. Predicted: 1-2 us off every dispatch, 0.3-0.5 us off decode dispatch.
# Bench main / Q alternating, 3 rounds (128 / 1024 / 4096 tokens, every dispatch dtype, 32 SMs);
# decode bench (1 / 128 tokens, fp8 -> bf16), 2 rounds; Q's stamps (Q + Q-trace.patch) at 128 and
# 4096 tokens; the fences in the dispatch kernels' SASS of both.
#   bash docs/results/v40-one-h200/runN.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
D=docs/results/v40-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu/Q tmp-gpu/QT && tar -c $SRC | tar -x -C tmp-gpu/Q && tar -c $SRC | tar -x -C tmp-gpu/QT
(cd tmp-gpu/Q && patch -p1 -s < ../../$D/lighter-ends.patch && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j6 --target moe-ep > $OUT/build-Q.log 2>&1 || echo "build Q failed") &
(cd tmp-gpu/QT && patch -p1 -s < ../../$D/lighter-ends.patch && patch -p1 -s < ../../$D/Q-trace.patch &&
  cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j5 --target moe-ep > $OUT/build-QT.log 2>&1 || echo "build QT failed") &
cmake -S . -B build/gpu $CFG > /dev/null 2>&1
cmake --build build/gpu -j5 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
cat $OUT/build-Q.log $OUT/build-QT.log >> $OUT/build.log; rm -f $OUT/build-Q.log $OUT/build-QT.log
t built
for v in . tmp-gpu/Q; do
  o=$(find $v/build/gpu -name dispatch.cu.o | head -1)
  echo "== $v $o"; cuobjdump -sass $o | grep -oE "MEMBAR[A-Z.]*|FENCE[A-Z.]*|ERRBAR|CCTL[A-Z.]*" | sort | uniq -c
done > $OUT/sass.log 2>&1
cat $OUT/sass.log
B="bench --backend cuda --ranks 1 --tokens 128,1024,4096 --num-sms 32 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 20 --warmup 3"
for r in 1 2 3; do for v in . tmp-gpu/Q; do
  echo "== $v round $r"; timeout 60 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench.log | cut -c1-60
t bench
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,128 --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20"
for r in 1 2; do for v in . tmp-gpu/Q; do
  echo "== $v round $r"; timeout 60 $v/build/gpu/tools/moe-ep $B
done; done >> $OUT/bench.log 2>&1
grep -A4 "^== .* round" $OUT/bench.log | grep -E "^==|^ +[0-9]+ fp8|wrong" | tail -12 | cut -c1-60
t decode
for tok in 128 4096; do
  echo "== QT $tok fp8"; timeout 60 tmp-gpu/QT/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --tokens $tok \
    --num-sms 32 --dispatch-dtype fp8 --combine-dtype bf16 --iters 20 --warmup 3
done > $OUT/trace.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror|^CT3[35] stamp|^CT step|^DT" $OUT/trace.log | cut -c1-250
t end
