#!/bin/bash
# v64 (prepared in v63), one GPU, about 6 minutes: main + the PATCHes' normal-mode GPU tests
# (agreement, backend with the parts test, nodes, copy engine, the one-GPU world at W = 2/4/8,
# late ranks, timeouts). A test that fails is run alone 5 more times (the one-GPU world's known
# stall: a rank's first kernel starting 10 s late, 2-4% of such processes in perf-history).
#   [DEADLINE=560] bash docs/results/v64-one-gpu/test-patch.sh PATCH...   (logs: $OUT)
# Each PATCH is a path from the repository root or a file name in $V (docs/results/v64-one-gpu
# by default; v65's test-patch.sh sets it). TESTS, a ctest -R regex, replaces the list above.
set -u
V=${V:-docs/results/v64-one-gpu}
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
rm -rf tmp-gpu/P && mkdir -p tmp-gpu/P && tar -c $SRC | tar -x -C tmp-gpu/P
for f in "$@"; do
  [ -f "$f" ] || f=$V/$f
  (cd tmp-gpu/P && patch -p1 -s < "../../$f") || { echo "patch $f failed"; exit 1; }
done
(cd tmp-gpu/P && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j16 > $OUT/build.log 2>&1) || { tail -40 $OUT/build.log; exit 1; }
t built
MOE_EP_TIMEOUT_S=10 timeout $((${DEADLINE:-560} - 60 - $(date +%s) + T0)) ctest \
  --test-dir tmp-gpu/P/build/gpu -L gpu \
  -R "${TESTS:-GpuAgreement|GpuBackend|GpuNodes|GpuCopyEngine|SingleGpuWorld|GpuLateRank|GpuTimeout}" \
  --output-on-failure --timeout 120 > $OUT/tests.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Total Test" $OUT/tests.log
for n in $(grep -E "\((Failed|Timeout)\)" $OUT/tests.log | awk '{print $3}'); do
  echo "again: $n"
  MOE_EP_TIMEOUT_S=10 timeout 55 ctest --test-dir tmp-gpu/P/build/gpu -R "^$n\$" \
    --repeat until-fail:5 --timeout 30 2>&1 | grep -E "tests passed|Failed" | tail -2
done
t end
