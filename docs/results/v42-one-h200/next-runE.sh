#!/bin/bash
# Prepared in v42 for the next session, NOT RUN YET: where the one-GPU world's late rank is held.
# v42 runs B-D: the late rank's count_kernel is launched on time on the host (no launch over
# 1 ms) and its first ticket (the scan share, stamped at once after wait_previous_kernel) begins
# 10 s later, when its peers have timed out; without programmatic dependent launch 8 of 63 and
# 3 of 27 processes fail (with CUDA_DEVICE_MAX_CONNECTIONS=32 set before the process starts),
# with it 0 of 63. queue_probe.cu: a stream holds a hardware queue only while a kernel launch
# waits in it behind a running kernel, so queues run short only with 32 such streams.
# next-stall-probe.patch: each rank's dispatch records an event just before count_kernel's
# launch, and the host wait (polling) says at 2 s: is the work before the step done (if not, the
# stream's earlier work holds it), has the step begun, does a 1-thread and a 1024-thread kernel
# on a stream made then run within 100 ms (if not, the device takes no new work at all)?
# First queue_probe.cu's question 5 (copies behind spinning kernels: the stall's upload form).
# Arms alternating until about 560 s: P = probe + next-no-pdl-probe.patch (v41's), Q = probe.
#   bash docs/results/v42-one-h200/next-runE.sh      (logs to $OUT)
set -u
T0=$(date +%s)
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v42-one-h200
nvcc -O3 -arch=sm_90 -o /tmp/queue_probe $R/queue_probe.cu &&
  PROBE_COPIES=1 CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 60 /tmp/queue_probe > $OUT/probe-copies.log 2>&1
cat $OUT/probe-copies.log
rm -rf tmp-gpu && mkdir -p tmp-gpu/P tmp-gpu/Q
for v in P Q; do tar -c $SRC | tar -x -C tmp-gpu/$v; (cd tmp-gpu/$v && patch -p1 -s < ../../$R/next-stall-probe.patch); done
(cd tmp-gpu/P && patch -p1 -s < ../../docs/results/v41-one-h200/next-no-pdl-probe.patch)
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
    { echo "== $v $i"; grep -h "^\[probe\]" $OUT/r.log
      grep "moe-ep \[warn\] cuda op" $OUT/r.log | sed -n 's/.*rank \([0-9]*\)\/[0-9]*.*latest step launched at \([0-9]*\) ns (host), began at \([0-9]*\) ns (device).*/\1 \2 \3/p' |
        awk '($3 - $2) > 1e9 {printf "rank %s began %.3f s after its launch\n", $1, ($3 - $2) / 1e9}'
    } >> $OUT/late.txt
    [ $(ls $OUT | grep -c "^fail-$v") -lt 2 ] && cp $OUT/r.log $OUT/fail-$v-$i.log
  fi
done; [ $(( $(date +%s) - T0 )) -gt 550 ] && break; done > $OUT/reps.txt
rm -f $OUT/r.log
awk '{n[$1]++; if ($4 != 0) f[$1]++} END {for (v in n) print v, n[v], "runs", f[v] + 0, "failed"}' $OUT/reps.txt
[ -f $OUT/late.txt ] && cat $OUT/late.txt
echo "end $(( $(date +%s) - T0 )) s"
