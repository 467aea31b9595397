#!/bin/bash
# v65 run 8 (prepared in v65, not run), one GPU, about 3 minutes: where SC's combine loses (run 3
# and 4: 0.2-1.6 us slower than main's step kernel + combine kernel at 1024 and 4096 tokens).
#   CT  = main + combine-trace.patch: the dispatch wait kernel's end, the step kernel's start,
#         its wait and end, the combine kernel's start, past its wait, past the verdict, warp 0's
#         items done, end;
#   CTS = SC + the same points, and the block ticket taken and the step stored inside the
#         combine (combine-trace-sc.patch applies to main: SC's change included).
# fp8 dispatch with a bf16 combine at 128 and 4096 tokens, 32 SMs, 2 rounds, read by
# combine_points.py (times from the dispatch wait kernel's end before each combine).
#   bash docs/results/v65-one-gpu/run8.sh   (logs: $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
V=docs/results/v65-one-gpu
rm -rf tmp-gpu && mkdir -p tmp-gpu/CT tmp-gpu/CTS
for v in CT CTS; do tar -c $SRC | tar -x -C tmp-gpu/$v; done
(cd tmp-gpu/CT && patch -p1 -s < ../../$V/combine-trace.patch) || exit 1
(cd tmp-gpu/CTS && patch -p1 -s < ../../$V/combine-trace-sc.patch) || exit 1
for v in CT CTS; do
  (cd tmp-gpu/$v && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j8 --target moe-ep > $OUT/build-$v.log 2>&1 &&
    rm $OUT/build-$v.log) || echo "build $v failed" &
done
wait
t built
for v in CT CTS; do for r in 1 2; do for tok in 128 4096; do
  echo "== $v $tok round $r"
  timeout 60 tmp-gpu/$v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --tokens $tok \
    --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype fp8 --combine-dtype bf16
done; done; done > $OUT/trace.log 2>&1
grep -E "wrong|rror" $OUT/trace.log | sort | uniq -c
python3 $V/combine_points.py $OUT/trace.log | tee $OUT/points.txt
t end
