#!/bin/bash
# v65 run 7, one GPU, about 3 minutes: M = main against EE = main + early-encode.patch (the data
# kernel's kWhole path, fp8 and mxfp4 from bf16 at hidden 7168: each warp loads and encodes the
# first slice of its first item before its griddepcontrol.wait for count_kernel, which the wait
# then overlaps; run 1's points put that wait's end 1.6-1.9 us after count_kernel's end and the
# rows issued 3.3 us after it at 128 tokens). Predicted: fp8 and mxfp4 dispatch 0.5-1.5 us
# faster at every size (one slice a warp overlapped), bf16 level (not kWhole).
# Normal mode at 32 SMs, 128 / 1024 / 4096 tokens, bf16, fp8 and mxfp4 dispatch with a bf16
# combine, alternating, ROUNDS rounds (default 3).
#   bash docs/results/v65-one-gpu/run7.sh   (logs: $OUT)
# Then the tests: bash docs/results/v65-one-gpu/test-patch.sh early-encode.patch
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
V=docs/results/v65-one-gpu
rm -rf tmp-gpu && mkdir -p tmp-gpu/EE && tar -c $SRC | tar -x -C tmp-gpu/EE
(cd tmp-gpu/EE && patch -p1 -s < ../../$V/early-encode.patch) || exit 1
for v in M EE; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  (cd $b && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j8 --target moe-ep > $OUT/build-$v.log 2>&1 &&
    rm $OUT/build-$v.log) || echo "build $v failed" &
done
wait
t built
B="bench --backend cuda --ranks 1 --tokens 128,1024,4096 --num-sms 32 --iters 50 --warmup 10"
for r in $(seq ${ROUNDS:-3}); do for v in M EE; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  echo "== $v round $r"
  timeout 60 $b/build/gpu/tools/moe-ep $B --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16
done; done > $OUT/normal.log 2>&1
grep -E "wrong|rror" $OUT/normal.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal.log | tee $OUT/run.txt
t end
