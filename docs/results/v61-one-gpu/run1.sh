#!/bin/bash
# v61, one GPU, one call (the session's device time allowed one): v60's four stacked count
# changes (docs/results/v60-one-gpu/, README there) as one tree against main, and the tests.
#   M    = main
#   NRPS = main + part-experts + receiver-gather + poll-num-recv + small-count (v60's patches)
#          + recv-count-zero (decode; its own files, touched by none of the four)
# 1. Both trees built together (NRPS's tool and the test programs of 3. at 12 jobs, M's tool at 4).
# 2. Normal mode at 32 SMs, 128 / 1024 / 4096 tokens, bf16 and fp8 dispatch with a bf16 combine,
#    the two trees alternating, 3 rounds (tools/bench_compare.py, M the base).
# 3. NRPS's normal-mode GPU tests (agreement, backend with the parts test, nodes, copy engine,
#    the one-GPU world at W = 2/4/8, late ranks, timeouts), the decode tests that
#    recv-count-zero extends, and the codec tests whose outputs v61 poisons; ctest stops at
#    DEADLINE seconds (default 570) after the start.
#   bash docs/results/v61-one-gpu/run1.sh   (logs: $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
V=docs/results/v60-one-gpu
rm -rf tmp-gpu && mkdir -p tmp-gpu/NRPS && tar -c $SRC | tar -x -C tmp-gpu/NRPS
(cd tmp-gpu/NRPS && for f in part-experts receiver-gather poll-num-recv small-count \
  recv-count-zero; do patch -p1 -s < ../../$V/$f.patch || { echo "patch $f failed"; exit 1; }; done) || exit 1
(cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j4 --target moe-ep > $OUT/build-M.log 2>&1) || echo "build M failed" &
# Only the test programs run below (their tests register when each is built).
TARGETS="moe-ep test_gpu_agreement test_gpu_backend test_gpu_nodes test_gpu_copy_engine
  test_gpu_world test_gpu_late_rank test_gpu_timeouts test_gpu_low_latency test_gpu_formats
  test_gpu_fast_codecs"
(cd tmp-gpu/NRPS && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j12 --target $TARGETS > $OUT/build-NRPS.log 2>&1) ||
  echo "build NRPS failed" &
wait
t built
B="bench --backend cuda --ranks 1 --tokens 128,1024,4096 --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype bf16,fp8 --combine-dtype bf16"
for r in $(seq ${ROUNDS:-3}); do for v in M NRPS; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  echo "== $v round $r"; timeout 60 $b/build/gpu/tools/moe-ep $B
done; done > $OUT/normal.log 2>&1
grep -E "wrong|rror" $OUT/normal.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal.log | tee $OUT/run.txt
t bench
LEFT=$((${DEADLINE:-570} - $(date +%s) + T0))
MOE_EP_TIMEOUT_S=10 timeout $LEFT ctest --test-dir tmp-gpu/NRPS/build/gpu -L gpu -R \
  'GpuAgreement|GpuBackend|GpuNodes|GpuCopyEngine|SingleGpuWorld|GpuLateRank|GpuTimeout|GpuLowLatencyScan|GpuLowLatency\.|GpuFormats|GpuFastCodecs' \
  --output-on-failure --timeout 120 > $OUT/tests.log 2>&1
echo "ctest rc $? (given $LEFT s)"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Total Test|Not Run" $OUT/tests.log
t end
