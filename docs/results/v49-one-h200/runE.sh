#!/bin/bash
# Prepared in v48, NOT RUN YET (about 6 minutes, one H200): two cuts from run B's SASS counts of
# ll_combine<bf16> at 128 tokens (1887 instructions an item), next-pipe-lean.patch against main:
#   - the copies' L2 policy made once (createpolicy was inside each copy's asm: 16 an item; the
#     PTX of ll_combine<bf16, in place> now holds 1 against 136);
#   - the pipe's pack tests the lane's 8 sums for NaN once (8 unordered compares) and runs the
#     NaN fix-ups only when one is (the NaN-tested pack was about 125 an item).
# ptxas: spills as main in every ll_combine instantiation (in place: none). Predicted: about 100
# instructions an item fewer (1.60 M at 128 tokens), combines 0.2-0.5 us faster at 128 and 256.
# 1. Decode bench, main / N alternating, 3 rounds, every combine dtype. 2. ncu instructions. 3.
# The decode tests and the GPU format tests on N.
#   bash docs/results/v48-one-h200/next-runE.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v48-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu/N && tar -c $SRC | tar -x -C tmp-gpu/N
(cd tmp-gpu/N && patch -p1 -s < ../../$R/next-pipe-lean.patch) || exit 1
(cd tmp-gpu/N && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j10 > ../build-N.log 2>&1 || echo "build N failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j6 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
tail -n 2 tmp-gpu/build-N.log >> $OUT/build.log
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype all"
for r in 1 2 3; do for v in . tmp-gpu/N; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t bench
S="--section LaunchStats --section SpeedOfLight --section InstructionStats --clock-control none --cache-control none -k regex:ll_combine_kernel -s 8 -c 1"
for v in . tmp-gpu/N; do for c in bf16 fp8; do
  echo "== $v $c"
  timeout 60 ncu $S $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens 128 \
    --iters 10 --warmup 2 --decode-graph round --dispatch-dtype fp8 --combine-dtype $c 2>&1 |
    grep -E "  Duration|Executed Instructions  "
done; done > $OUT/ncu.log 2>&1
cat $OUT/ncu.log
t ncu
MOE_EP_TIMEOUT_S=10 timeout $((590 - $(date +%s) + T0)) ctest --test-dir tmp-gpu/N/build/gpu -L gpu \
  -R 'LowLatency|LateRank|python_gpu|GpuFormats' --output-on-failure --timeout 120 > $OUT/tests.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/tests.log | head -30
t end
