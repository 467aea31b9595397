#!/bin/bash
# v65 run 6, one GPU, about 3 minutes: run 1's E and EN again against main, 5 rounds, 128 and
# 1024 tokens only. Run 1 (3 rounds) left them within its noise (M's own rows spread up to
# 2 us), while run 1's points of CEN put the wait kernel's end 1.1 us earlier after count_kernel's
# entry than C's at 128 tokens (13.1 against 14.2 us). Normal mode at 32 SMs, bf16 and fp8 dispatch
# with a bf16 combine, alternating.
#   bash docs/results/v65-one-gpu/run6.sh   (logs: $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
V=docs/results/v65-one-gpu
rm -rf tmp-gpu && mkdir -p tmp-gpu/E tmp-gpu/EN
for v in E EN; do tar -c $SRC | tar -x -C tmp-gpu/$v; done
(cd tmp-gpu/E && patch -p1 -s < ../../$V/ready-early.patch) || exit 1
(cd tmp-gpu/EN && patch -p1 -s < ../../$V/ready-early-nowait.patch) || exit 1
for v in M E EN; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  (cd $b && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j5 --target moe-ep > $OUT/build-$v.log 2>&1 &&
    rm $OUT/build-$v.log) || echo "build $v failed" &
done
wait
t built
B="bench --backend cuda --ranks 1 --tokens 128,1024 --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype bf16,fp8 --combine-dtype bf16"
for r in 1 2 3 4 5; do for v in M E EN; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  echo "== $v round $r"; timeout 60 $b/build/gpu/tools/moe-ep $B
done; done > $OUT/normal.log 2>&1
grep -E "wrong|rror" $OUT/normal.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal.log | tee $OUT/run.txt
t end
