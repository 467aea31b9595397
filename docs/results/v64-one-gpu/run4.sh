#!/bin/bash
# v64 call 4, one GPU, about 8 minutes:
# 1. pdl_probe.cu: does later work wait for the predecessor of a PDL kernel that never waits?
# 2. M (main: S and W2 merged) against R (ready-word.patch: the data kernel waits for the
#    receiver's ready word, a release once every sender ticket's positions and send_offset are
#    in, instead of count_kernel's end; it waits for that end last). v64 run 1's points (C, CS)
#    put the data kernel's wait 1.5-2.0 us after count_kernel's end at 128 tokens: predicted
#    1-1.5 us off every dispatch. 32 SMs, bf16 / fp8 dispatch, bf16 combine, ROUNDS (3).
# 3. R's normal-mode GPU tests (as test-patch.sh; TESTS, a ctest -R regex, narrows them), each
#    failure rerun alone 5 times.
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
V=docs/results/v64-one-gpu
nvcc -arch=sm_90 -O2 -o /tmp/pdl_probe $V/pdl_probe.cu && /tmp/pdl_probe | tee $OUT/pdl.txt
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
rm -rf tmp-gpu && mkdir -p tmp-gpu/R && tar -c $SRC | tar -x -C tmp-gpu/R
(cd tmp-gpu/R && patch -p1 -s < ../../$V/ready-word.patch) || exit 1
(cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j4 --target moe-ep > $OUT/build-M.log 2>&1 && rm $OUT/build-M.log) ||
  echo "build M failed" &
(cd tmp-gpu/R && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j14 > $OUT/build-R.log 2>&1 && rm $OUT/build-R.log) ||
  { echo "build R failed"; tail -30 $OUT/build-R.log; }
wait
t built
B="bench --backend cuda --ranks 1 --tokens 128,1024,4096 --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype bf16,fp8 --combine-dtype bf16"
for r in $(seq ${ROUNDS:-3}); do for v in M R; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  echo "== $v round $r"; timeout 60 $b/build/gpu/tools/moe-ep $B
done; done > $OUT/normal.log 2>&1
grep -E "wrong|rror" $OUT/normal.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal.log | tee $OUT/run.txt
t bench
MOE_EP_TIMEOUT_S=10 timeout $((${DEADLINE:-570} - 45 - $(date +%s) + T0)) ctest \
  --test-dir tmp-gpu/R/build/gpu -L gpu \
  -R "${TESTS:-GpuAgreement|GpuBackend|GpuNodes|GpuCopyEngine|SingleGpuWorld|GpuLateRank|GpuTimeout}" \
  --output-on-failure --timeout 120 > $OUT/tests.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Total Test" $OUT/tests.log
for n in $(grep -E "\((Failed|Timeout)\)" $OUT/tests.log | awk '{print $3}' | head -3); do
  echo "again: $n"
  MOE_EP_TIMEOUT_S=10 timeout 40 ctest --test-dir tmp-gpu/R/build/gpu -R "^$n\$" \
    --repeat until-fail:5 --timeout 30 2>&1 | grep -E "tests passed|Failed" | tail -2
done
t end
