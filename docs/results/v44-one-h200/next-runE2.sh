#!/bin/bash
# Prepared in v44, NOT RUN YET: the one-GPU world's stall, probed without CUDA calls at 2 s.
# v44 run E: at 2 s into a failed first dispatch, the late rank's stream had done its work before
# the step, but the probe's later calls (a stream, a pinned allocation, a copy, kernels on new
# streams) returned only after the peers' 10 s timeouts. next-stall-probe2.patch replaces them:
# each op's creating thread makes a stream and a host-mapped word first; each dispatch queues a
# one-thread canary kernel on that stream right after its step's launch; the host wait reads the
# word each turn (no CUDA call) and prints, at 2 s, whether the canary had run, and at the end
# when it ran and when the wait ended, from the canary's queueing. If the late rank's canary runs
# at once while its step waits 10 s, its own stream is held; if the canary also waits, new work on
# the whole device is. Arms alternating until about 540 s: P = probe + v41's next-no-pdl-probe.patch
# (more failures: 3 of 46 in run E), Q = probe.
#   bash docs/results/v44-one-h200/next-runE2.sh      (logs to $OUT)
set -u
# PROBE_PATCH: the probe patch (v54 made it again on its main: next-runE3.sh sets it).
PROBE_PATCH=${PROBE_PATCH:-docs/results/v44-one-h200/next-stall-probe2.patch}
T0=$(date +%s)
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/P tmp-gpu/Q
for v in P Q; do
  tar -c $SRC | tar -x -C tmp-gpu/$v
  (cd tmp-gpu/$v && patch -p1 -s < ../../$PROBE_PATCH) || exit 1
done
(cd tmp-gpu/P && patch -p1 -s < ../../docs/results/v41-one-h200/next-no-pdl-probe.patch) || exit 1
for v in P Q; do
  (cd tmp-gpu/$v && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j8 --target test_gpu_world > $OUT/build-$v.log 2>&1 || echo "build $v failed") &
done
wait
echo "built $(( $(date +%s) - T0 )) s"
for i in $(seq 1 500); do for v in P Q; do
  B=$(find tmp-gpu/$v/build/gpu -name test_gpu_world -type f | head -1)
  MOE_EP_TIMEOUT_S=10 timeout 100 $B --gtest_filter='Ranks/SingleGpuWorld.*W8*' > $OUT/r.log 2>&1
  rc=$?; echo "$v $i rc $rc"
  if [ $rc != 0 ]; then
    { echo "== $v $i"; grep -h "^\[probe2\]" $OUT/r.log; grep -h "threw" $OUT/r.log | cut -c1-160; } >> $OUT/late.txt
    [ $(ls $OUT | grep -c "^fail-$v") -lt 2 ] && cp $OUT/r.log $OUT/fail-$v-$i.log
  fi
done; [ $(( $(date +%s) - T0 )) -gt 540 ] && break; done > $OUT/reps.txt
rm -f $OUT/r.log
awk '{n[$1]++; if ($4 != 0) f[$1]++} END {for (v in n) print v, n[v], "runs", f[v] + 0, "failed"}' $OUT/reps.txt
[ -f $OUT/late.txt ] && cat $OUT/late.txt
echo "end $(( $(date +%s) - T0 )) s"
