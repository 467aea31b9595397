#!/bin/bash
# v62, one GPU: N (v60's part-experts.patch) and NP (part-experts-poll.patch: N with
# poll-num-recv ported onto it, without receiver-gather, which lost 1.2-1.8 us at 4096 tokens in
# v62's per-change bench) against main. Normal mode at 32 SMs, 128 / 1024 / 4096 tokens, bf16 and
# fp8 dispatch with a bf16 combine, the trees alternating, ROUNDS rounds (default 3).
#   bash docs/results/v62-one-gpu/run-np.sh   (logs: $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
rm -rf tmp-gpu && mkdir -p tmp-gpu/N tmp-gpu/NP
tar -c $SRC | tar -x -C tmp-gpu/N && tar -c $SRC | tar -x -C tmp-gpu/NP
(cd tmp-gpu/N && patch -p1 -s < ../../docs/results/v60-one-gpu/part-experts.patch) || exit 1
(cd tmp-gpu/NP && patch -p1 -s < ../../docs/results/v62-one-gpu/part-experts-poll.patch) || exit 1
for v in M N NP; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  (cd $b && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j5 --target moe-ep > $OUT/build-$v.log 2>&1) || echo "build $v failed" &
done
wait
t built
B="bench --backend cuda --ranks 1 --tokens 128,1024,4096 --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype bf16,fp8 --combine-dtype bf16"
for r in $(seq ${ROUNDS:-3}); do for v in M N NP; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  echo "== $v round $r"; timeout 60 $b/build/gpu/tools/moe-ep $B
done; done > $OUT/normal.log 2>&1
grep -E "wrong|rror" $OUT/normal.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal.log | tee $OUT/run.txt
t end
