#!/bin/bash
# v42 run D: is the one-GPU world's stall a queue shortage because CUDA_DEVICE_MAX_CONNECTIONS=32
# comes too late (set by a static initializer of the tests, after CUDA may have started)? Probe
# runs 4-5 (queue_probe.cu): the driver binds a stream to a hardware queue only while a kernel
# launch waits in it behind a running kernel; with N queues so held, any other stream's kernel
# waits. Run B's arm without programmatic dependent launch (next-no-pdl-probe.patch, 8 of 63
# failed) again, now with CUDA_DEVICE_MAX_CONNECTIONS=32 in the environment before the process
# starts, until about 150 s.
#   bash docs/results/v42-one-h200/runD.sh      (logs to $OUT)
set -u
T0=$(date +%s)
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER CUDA_DEVICE_MAX_CONNECTIONS=32
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/B && tar -c $SRC | tar -x -C tmp-gpu/B
(cd tmp-gpu/B && patch -p1 -s < ../../docs/results/v41-one-h200/next-no-pdl-probe.patch &&
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON \
    -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1 &&
  cmake --build build/gpu -j16 --target test_gpu_world > $OUT/build.log 2>&1) || { echo "build failed"; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
BIN=$(find tmp-gpu/B/build/gpu -name test_gpu_world -type f | head -1)
for i in $(seq 1 200); do
  MOE_EP_TIMEOUT_S=10 timeout 30 $BIN --gtest_filter='Ranks/SingleGpuWorld.*W8*' > $OUT/r.log 2>&1
  rc=$?; echo "B-env $i rc $rc"
  [ $rc != 0 ] && [ ! -f $OUT/fail.log ] && cp $OUT/r.log $OUT/fail.log
  [ $(( $(date +%s) - T0 )) -gt 150 ] && break
done > $OUT/reps.txt
rm -f $OUT/r.log
awk '{n++; if ($4 != 0) f++} END {print n, "runs", f + 0, "failed"}' $OUT/reps.txt
echo "end $(( $(date +%s) - T0 )) s"
