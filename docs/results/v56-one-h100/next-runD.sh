#!/bin/bash
# v56, an experiment (ran in v56 as run D; merged with the one-GPU world's budget rule in
# blocks): D = main + next-blocks256.patch, every data kernel in blocks of 256 threads, 4 a SM of budget (Policy::kDataThreads 512 -> 256,
# kDataBlocksPerSm 2 -> 4): the same threads and registers for a budget, in twice the blocks, so
# on an idle GPU a decode kernel's grid reaches twice the SMs. Question: are the decode kernels
# bound by what one SM moves (then the 128-token expand and combine gain, up to half their copy
# time) or by each warp's chain (then level)? v21's copy floors: 50 GB/s an SM at 32 SMs.
# 1. Decode bench main / D, fp8 dispatch, bf16 combine, 3 alternating rounds.
# 2. Normal mode at 32 SMs, 4096 tokens, fp8 + bf16, main / D, 2 rounds (the same change there).
#   DEADLINE=<seconds> bash docs/results/v56-one-h100/next-runD.sh     (logs to $OUT)
# NAME and PATCH (default D and next-blocks256.patch) name the tree against main and its patch,
# for the same comparison of another policy (next-runE.sh).
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-300}
NAME=${NAME:-D}
PATCH=${PATCH:-docs/results/v56-one-h100/next-blocks256.patch}
left() { echo $((DEADLINE - $(date +%s) + T0)); }
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu/$NAME && mkdir -p tmp-gpu/$NAME && tar -c $SRC | tar -x -C tmp-gpu/$NAME
(cd tmp-gpu/$NAME && patch -p1 -s < ../../$PATCH) || exit 1
(cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j6 --target moe-ep > $OUT/build-main.log 2>&1 || echo "build main failed") &
(cd tmp-gpu/$NAME && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j10 --target moe-ep > $OUT/build-$NAME.log 2>&1) || { tail -40 $OUT/build-$NAME.log; exit 1; }
wait
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16"
for r in 1 2 3; do for v in . tmp-gpu/$NAME; do
  [ "$(left)" -lt 60 ] && break 2
  echo "== $v round $r"; timeout 40 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode-$NAME.log 2>&1
grep -E "wrong|rror" $OUT/decode-$NAME.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode-$NAME.log
t decode
N="bench --backend cuda --ranks 1 --tokens 4096 --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype fp8 --combine-dtype bf16"
for r in 1 2; do for v in . tmp-gpu/$NAME; do
  [ "$(left)" -lt 20 ] && break 2
  echo "== $v round $r"; timeout 30 $v/build/gpu/tools/moe-ep $N
done; done > $OUT/normal-$NAME.log 2>&1
grep -E "wrong|rror" $OUT/normal-$NAME.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal-$NAME.log
t end
