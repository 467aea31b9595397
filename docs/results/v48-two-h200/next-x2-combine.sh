#!/bin/bash
# Prepared in v48 from v47's next-x2-pipe.sh, NOT RUN YET, for nvidia-h200-x2 (one call, about 5
# minutes): the decode combine of main since v48 (v47's pipe, v48's slot table, slots beside the
# mask, bf16's round trip) on two GPUs, W = 2, where its sends to the peer go through the pipe
# and tokens with both ranks' parts take the general reduce's table, against the combine before
# v47 (pre-v47-combine.patch: low_latency_combine.cuh as of bb1eafa, made again in v49 and in v50, where its
# work items come from low_latency_items.h; no other file it uses
# changed since but for comments, added functions and a defaulted argument). One H200 at W = 1: every combine 2.2-2.7 us faster at
# 128 tokens (v47 run V then v48 run A), 5.1-6.3 at 256. Predicted on two GPUs: about as much at
# 128 and 256 (the expert side's sums are the same work), level at 1 and 32. Then the two-GPU
# decode graph test on main's tree.
#   bash docs/results/v48-two-h200/next-x2-combine.sh      (logs to $OUT)
set -u
# OLD_COMBINE_PATCH: the older combine (v54 made it again on its main: next-x2-combine2.sh).
OLD_COMBINE_PATCH=${OLD_COMBINE_PATCH:-docs/results/v48-two-h200/pre-v47-combine.patch}
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
nvidia-smi -L
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/N
tar -c $SRC | tar -x -C tmp-gpu/N
(cd tmp-gpu/N && patch -p1 -s < ../../$OLD_COMBINE_PATCH) || exit 1
(cd tmp-gpu/N && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j12 --target moe-ep > ../build-N.log 2>&1 || echo "build N failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
cmake --build build/gpu -j18 --target moe-ep test_gpu_low_latency > $OUT/build.log 2>&1 ||
  { tail -40 $OUT/build.log; exit 1; }
wait
t built
D="bench --backend cuda --ranks 2 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype all"
for r in 1 2 3; do for v in tmp-gpu/N .; do
  echo "== $v round $r"; timeout 120 $v/build/gpu/tools/moe-ep $D
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $((580 - $(date +%s) + T0)) build/gpu/tests/test_gpu_low_latency \
  --gtest_filter='TwoGpuLowLatencyGraph.*' > $OUT/tests.log 2>&1
echo "two-GPU graph test rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]|OK \]" $OUT/tests.log | head
t end
