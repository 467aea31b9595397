#!/bin/bash
# Prepared in v47, NOT RUN YET (about 5-6 minutes, one H200): two next steps for the decode combine
# after v47's SlotSumPipe (run V: bf16 at 128 tokens 14.1-14.4 us, goal 6), against main:
#   D  next-deep-pipe.patch: a whole group of 8 slots copied one group ahead (64 KiB of dynamic
#      shared memory a block, where v47 copies half a group in 32 KiB of static), the next
#      group's copies issued once half of this group is summed. ptxas, spill stores:
#      ll_combine<bf16, in place> 112 bytes (main 104); the instantiations of hooked combines
#      (not used at W = 1) 48-156 bytes (main 0-48). Predicted: 0.5-1 us off the combines at 128 tokens, 1-2 at
#      256 (more of the next step in flight while a step is summed).
#   M  next-slots-beside-mask.patch: the in-place reduce loads a token's local slots beside its
#      mask instead of after it (one round trip fewer before the first loads of y). Predicted:
#      0.2-0.5 us off every combine, at every token count.
# 1. Decode bench, main / D / M alternating, 3 rounds. 2. The decode tests on D and M (every
# dtype pair at W = 2/4/8 and across nodes, top-k 6, 32 and above 32, hooks, graph replays).
#   bash docs/results/v47-one-h200/next-runD.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v47-one-h200
TESTS="test_gpu_low_latency test_gpu_low_latency_shapes test_gpu_low_latency_nodes"
rm -rf tmp-gpu && mkdir -p tmp-gpu
for v in D M; do mkdir -p tmp-gpu/$v && tar -c $SRC | tar -x -C tmp-gpu/$v; done
(cd tmp-gpu/D && patch -p1 -s < ../../$R/next-deep-pipe.patch) || exit 1
(cd tmp-gpu/M && patch -p1 -s < ../../$R/next-slots-beside-mask.patch) || exit 1
for v in D M; do
  (cd tmp-gpu/$v && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
    cmake --build build/gpu -j5 --target moe-ep $TESTS > ../build-$v.log 2>&1 || echo "build $v failed") &
done
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j6 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
for v in D M; do echo "== $v" >> $OUT/build.log; tail -n 2 tmp-gpu/build-$v.log >> $OUT/build.log; done
grep -B2 -A6 " error" tmp-gpu/build-*.log | head -30
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16,fp8"
for r in 1 2 3; do for v in . tmp-gpu/D tmp-gpu/M; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t bench
for v in D M; do for b in $TESTS; do
  left=$(( 585 - $(date +%s) + T0 )); [ $left -lt 20 ] && { echo "$v $b: no time left"; continue; }
  BT=$(find tmp-gpu/$v/build/gpu -name $b -type f | head -1)
  echo "== $v $b" >> $OUT/tests.log
  MOE_EP_TIMEOUT_S=10 timeout $left $BT >> $OUT/tests.log 2>&1; echo "$v $b rc $?"
done; done
grep -E "^== |^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log | head -40
t end
