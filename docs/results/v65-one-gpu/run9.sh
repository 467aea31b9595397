#!/bin/bash
# v65 run 9, one GPU, about 2 minutes: main, SC and EN with the bench's new --round-us column (16
# rounds of host calls back to back between two events, no leg's timing events), since run 8's
# points and the bench disagreed on SC (and run 1's on CEN) and each timing event costs about
# 1.9 us and the next kernel's early launch (event_gap_probe.cu). fp8 dispatch, bf16 combine,
# 128 / 1024 / 4096 tokens, 32 SMs, alternating, 2 rounds.
#   bash docs/results/v65-one-gpu/run9.sh   (logs: $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
V=docs/results/v65-one-gpu
rm -rf tmp-gpu && mkdir -p tmp-gpu/SC tmp-gpu/EN
for v in SC EN; do tar -c $SRC | tar -x -C tmp-gpu/$v; done
(cd tmp-gpu/SC && patch -p1 -s < ../../$V/step-in-combine.patch) || exit 1
(cd tmp-gpu/EN && patch -p1 -s < ../../$V/ready-early-nowait.patch) || exit 1
for v in M SC EN; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  (cd $b && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j5 --target moe-ep > $OUT/build-$v.log 2>&1 &&
    rm $OUT/build-$v.log) || echo "build $v failed" &
done
wait
t built
B="bench --backend cuda --ranks 1 --tokens 128,1024,4096 --num-sms 32 --iters 50 --warmup 10 --round-us"
for r in 1 2; do for v in M SC EN; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  echo "== $v round $r"
  timeout 90 $b/build/gpu/tools/moe-ep $B --dispatch-dtype fp8 --combine-dtype bf16
done; done > $OUT/normal.log 2>&1
grep -E "wrong|rror" $OUT/normal.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal.log | tee $OUT/run.txt
t end
