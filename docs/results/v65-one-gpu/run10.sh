#!/bin/bash
# v66's first run (prepared in v65, not run), one GPU, about 5 minutes: M = main against SC =
# main + step-in-combine.patch and SCS = main + step-in-combine-small.patch (the step inside only
# up to 2048 tokens, the step kernel above) with the bench's --round-us column (16 rounds of host
# calls back to back between two events). v65 run 9 (2 rounds, fp8 dispatch, bf16 combine): SC's
# round -5.10 / -1.05 / +0.65 us at 128 / 1024 / 4096 tokens. Here bf16 and fp8 dispatch with a
# bf16 combine, and fp8 with fp8, 32 SMs, alternating, ROUNDS rounds (default 4).
#   bash docs/results/v65-one-gpu/run10.sh   (logs: $OUT)
# The winner's tests: bash docs/results/v65-one-gpu/test-patch.sh step-in-combine.patch (or
# step-in-combine-small.patch)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
V=docs/results/v65-one-gpu
rm -rf tmp-gpu && mkdir -p tmp-gpu/SC tmp-gpu/SCS
for v in SC SCS; do tar -c $SRC | tar -x -C tmp-gpu/$v; done
(cd tmp-gpu/SC && patch -p1 -s < ../../$V/step-in-combine.patch) || exit 1
(cd tmp-gpu/SCS && patch -p1 -s < ../../$V/step-in-combine-small.patch) || exit 1
for v in M SC SCS; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  (cd $b && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j5 --target moe-ep > $OUT/build-$v.log 2>&1 &&
    rm $OUT/build-$v.log) || echo "build $v failed" &
done
wait
t built
B="bench --backend cuda --ranks 1 --tokens 128,1024,4096 --num-sms 32 --iters 50 --warmup 10 --round-us"
for r in $(seq ${ROUNDS:-4}); do for v in M SC SCS; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  echo "== $v round $r"
  timeout 90 $b/build/gpu/tools/moe-ep $B --dispatch-dtype bf16,fp8 --combine-dtype bf16
  timeout 90 $b/build/gpu/tools/moe-ep $B --dispatch-dtype fp8 --combine-dtype fp8
done; done > $OUT/normal.log 2>&1
grep -E "wrong|rror" $OUT/normal.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal.log | tee $OUT/run.txt
t end
