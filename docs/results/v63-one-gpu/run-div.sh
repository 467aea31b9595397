#!/bin/bash
# v63, one GPU: D = main + div32.patch (the decode combine's item index in 32-bit divisions
# when a launch's items fit, every real shape; v49's ncu put the 64-bit division at about 55 of
# about 1790 instructions an item) against main. Decode mode at world size 1, 1 / 128 / 256
# tokens, fp8 and bf16 dispatch, a bf16 combine, CUDA-graph rounds, the trees alternating, ROUNDS
# rounds (default 3); then each tree's ll_combine_kernel instruction counts (cuobjdump).
# Predicted: the combine 0.1-0.4 us shorter at 128 tokens (about 3% of its instructions).
#   bash docs/results/v63-one-gpu/run-div.sh   (logs: $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
rm -rf tmp-gpu/D && mkdir -p tmp-gpu/D && tar -c $SRC | tar -x -C tmp-gpu/D
(cd tmp-gpu/D && patch -p1 -s < ../../docs/results/v63-one-gpu/div32.patch) || exit 1
for v in M D; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  (cd $b && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j8 --target moe-ep > $OUT/build-$v.log 2>&1) || echo "build $v failed" &
done
wait
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype bf16,fp8 --combine-dtype bf16"
for r in $(seq ${ROUNDS:-3}); do for v in M D; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  echo "== $v round $r"; timeout 60 $b/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log | tee $OUT/run-div.txt
for v in M D; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  o=$(find $b/build/gpu -name 'low_latency.cu.o' | head -1)
  cuobjdump -sass "$o" | awk '/Function :/{fn=$3} /\/\*[0-9a-f]{4}\*\//{n[fn]++}
    END{for(k in n) print k, n[k]}' | grep ll_combine_kernel | sort | sed "s/^/$v /"
done | tee $OUT/sass.txt
t end
