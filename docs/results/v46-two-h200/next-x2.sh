#!/bin/bash
# Prepared in v46, NOT RUN YET, for nvidia-h200-x2 (two calls of under 10 minutes, A then B):
#   A: build, then the first half of `ctest -L gpu` at W = 2 across the two GPUs (the tests that
#      take their world from cuda_device_count(), and TwoGpuLowLatencyGraph, new in v46: the
#      decode graph test with one rank per GPU; v46 ran test_gpu_backend and the tests that need
#      two GPUs there).
#   B: build (a cold machine rebuilds), the second half, then scripts/multi-gpu-bench's steps not
#      run since v14: nodes-net and nodes-net-decode (the path across nodes over NCCL's network
#      transport, one rank per node) and mpi (one process per rank), while time is left.
# Each test runs in its own process under ctest (the late-rank tests set their timeout knob).
#   bash docs/results/v46-two-h200/next-x2.sh A      (logs to $OUT)
set -u
part=${1:?part A or B}
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
left() { echo $((580 - $(date +%s) + T0)); }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
nvidia-smi -L
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) \
  > $OUT/build-$part.log 2>&1
cmake --build build/gpu -j30 >> $OUT/build-$part.log 2>&1 || { tail -40 $OUT/build-$part.log; exit 1; }
t built
n=$(ctest --test-dir build/gpu -N -L gpu | grep -c "Test *#")
half=$((n / 2))
case $part in
  A) range="1,$half" ;;
  B) range="$((half + 1)),$n" ;;
  *) echo "part A or B, not '$part'" >&2; exit 2 ;;
esac
reserve=10
[ "$part" = B ] && reserve=200  # for the bench steps after the tests
limit=$(($(left) - reserve))
MOE_EP_TIMEOUT_S=10 timeout $limit ctest --test-dir build/gpu -L gpu -I "$range" \
  --output-on-failure --timeout 120 > $OUT/suite-$part.log 2>&1
echo "ctest ($range of $n) rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/suite-$part.log | head -30
t ctest
if [ "$part" = B ] && [ "$(left)" -gt 60 ]; then
  OUT_KEEP=$OUT
  OUT=/tmp/x2-steps timeout $(($(left) - 10)) scripts/multi-gpu-bench --steps nodes-net,nodes-net-decode,mpi \
    > $OUT_KEEP/steps.log 2>&1
  echo "multi-gpu-bench rc $?"
  tail -20 $OUT_KEEP/steps.log
  for f in /tmp/x2-steps/nodes-net*.log /tmp/x2-steps/mpi.log; do
    [ -f "$f" ] && cp "$f" $OUT_KEEP/ && grep -E "wrong|^ +[0-9]+ " "$f" | head -20
  done
fi
t end
