#!/bin/bash
# v65 run 3, one GPU, about 4 minutes: M = main against SC = main + step-in-combine.patch (one
# node's combine runs its step agreement inside the combine kernel: one host launch and one kernel
# boundary fewer). Run 2's host points: the step kernel's launch call took 3.1-4.9 us of host
# time and the combine kernel's 2.6-3.9 more, so at 128 tokens the combine waits for the second
# launch. Predicted: 2-3 us off the 128-token combine, 0.5-1.5 (the boundary) at 1024 and 4096.
# Normal mode at 32 SMs, 128 / 1024 / 4096 tokens, bf16 and fp8 dispatch with bf16 and fp8
# combines, alternating, ROUNDS rounds (default 3).
#   bash docs/results/v65-one-gpu/run3.sh   (logs: $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
V=docs/results/v65-one-gpu
rm -rf tmp-gpu && mkdir -p tmp-gpu/SC && tar -c $SRC | tar -x -C tmp-gpu/SC
(cd tmp-gpu/SC && patch -p1 -s < ../../$V/step-in-combine.patch) || exit 1
for v in M SC; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  (cd $b && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j8 --target moe-ep > $OUT/build-$v.log 2>&1 &&
    rm $OUT/build-$v.log) || echo "build $v failed" &
done
wait
t built
B="bench --backend cuda --ranks 1 --tokens 128,1024,4096 --num-sms 32 --iters 50 --warmup 10"
for r in $(seq ${ROUNDS:-3}); do for v in M SC; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  echo "== $v round $r"
  timeout 60 $b/build/gpu/tools/moe-ep $B --dispatch-dtype bf16,fp8 --combine-dtype bf16
  timeout 60 $b/build/gpu/tools/moe-ep $B --dispatch-dtype fp8 --combine-dtype fp8
done; done > $OUT/normal.log 2>&1
grep -E "wrong|rror" $OUT/normal.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal.log | tee $OUT/run.txt
t end
