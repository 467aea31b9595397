#!/bin/bash
# v63, one GPU (about 8 minutes): F = main + no-fence.patch (notify_receive's store of num_recv
# without the system fence after it) against main, then F's normal-mode GPU tests. v60 run 1's
# count trace (v63, one H100, 128 tokens) put notify_receive at 3.0 us at world size 1 with
# every word already in; the fence after a store to mapped host memory may be a good part of it.
# Predicted: 0.3-1 us off every dispatch, or nothing if the kernel's end pays the same flush.
#   bash docs/results/v63-one-gpu/run-fence.sh   (logs: $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
rm -rf tmp-gpu && mkdir -p tmp-gpu/F && tar -c $SRC | tar -x -C tmp-gpu/F
(cd tmp-gpu/F && patch -p1 -s < ../../docs/results/v63-one-gpu/no-fence.patch) || exit 1
(cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j4 --target moe-ep > $OUT/build-M.log 2>&1) || echo "build M failed" &
(cd tmp-gpu/F && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j14 > $OUT/build-F.log 2>&1) || echo "build F failed" &
wait
t built
B="bench --backend cuda --ranks 1 --tokens 128,1024,4096 --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype bf16,fp8 --combine-dtype bf16"
for r in $(seq ${ROUNDS:-3}); do for v in M F; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  echo "== $v round $r"; timeout 60 $b/build/gpu/tools/moe-ep $B
done; done > $OUT/normal.log 2>&1
grep -E "wrong|rror" $OUT/normal.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal.log | tee $OUT/run.txt
t bench
[ "${TESTS:-1}" = 0 ] && exit 0
MOE_EP_TIMEOUT_S=10 timeout $((${DEADLINE:-560} - $(date +%s) + T0)) ctest --test-dir tmp-gpu/F/build/gpu -L gpu \
  -R "GpuAgreement|GpuBackend|GpuNodes|GpuCopyEngine|SingleGpuWorld|GpuLateRank|GpuTimeout" \
  --output-on-failure --timeout 120 > $OUT/tests.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Total Test" $OUT/tests.log
t end
