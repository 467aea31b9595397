#!/bin/bash
# v65 run 5, one GPU, about 8 minutes.
#   TS = main + tmax-sends.patch: the decode combine's send candidates are each source's T tokens
#        (its done word of the dispatch), not Tmax's. Predicted: level where T = Tmax (the bench);
#        with T = 32 and Tmax = 256 at W = 2, the 7 x 224 candidates a peer that were a ticket and
#        a flag load each are gone, several us off the combine.
# 1. test_gpu_zz_tmax_probe.cu (copied into tests/ of both trees): the decode combine at W = 2 in
#    the one-GPU world (not a two-GPU figure), T = 32, Tmax 32 and 256, M and TS alternating, 3
#    rounds.
# 2. TS's decode tests (ctest -R "LowLatency|GpuCapture"), and main's PdlOrder (never run on a GPU
#    before).
#   [DEADLINE=580] bash docs/results/v65-one-gpu/run5.sh   (logs: $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
V=docs/results/v65-one-gpu
rm -rf tmp-gpu && mkdir -p tmp-gpu/M tmp-gpu/TS
for v in M TS; do tar -c $SRC | tar -x -C tmp-gpu/$v; cp $V/test_gpu_zz_tmax_probe.cu tmp-gpu/$v/tests/; done
(cd tmp-gpu/TS && patch -p1 -s < ../../$V/tmax-sends.patch) || exit 1
TS_TESTS="test_gpu_low_latency test_gpu_low_latency_hooks test_gpu_low_latency_shapes"
TS_TESTS="$TS_TESTS test_gpu_low_latency_nodes test_gpu_capture test_low_latency_items"
(cd tmp-gpu/M && cmake -S . -B build $CFG > /dev/null 2>&1 &&
  cmake --build build -j8 --target test_gpu_zz_tmax_probe test_gpu_pdl_order \
    > $OUT/build-M.log 2>&1 && rm $OUT/build-M.log) || echo "build M failed" &
(cd tmp-gpu/TS && cmake -S . -B build $CFG > /dev/null 2>&1 &&
  cmake --build build -j8 --target test_gpu_zz_tmax_probe $TS_TESTS \
    > $OUT/build-TS.log 2>&1 && rm $OUT/build-TS.log) || echo "build TS failed" &
wait
t built
for r in 1 2 3; do for v in M TS; do
  echo "== $v round $r"
  timeout 60 tmp-gpu/$v/build/tests/test_gpu_zz_tmax_probe 2>&1 | grep -E "TMAXPROBE|FAIL|rror"
done; done 2>&1 | tee $OUT/probe.log
t probe
MOE_EP_TIMEOUT_S=10 timeout 60 tmp-gpu/M/build/tests/test_gpu_pdl_order > $OUT/pdl.log 2>&1
echo "pdl rc $?"; tail -3 $OUT/pdl.log
(cd tmp-gpu/TS/build && MOE_EP_TIMEOUT_S=10 timeout $((${DEADLINE:-580} - 30 - $(date +%s) + T0)) \
  ctest -R "LowLatency|GpuCapture" --output-on-failure --timeout 120 > $OUT/tests.log 2>&1)
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Total Test" $OUT/tests.log
t end
