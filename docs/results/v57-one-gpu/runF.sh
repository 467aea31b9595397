#!/bin/bash
# v57 run F (one GPU, DEADLINE seconds, 360 by default): main's W = 8 one-GPU world tests in a
# loop, the control that run E3 lacked. Run E3 (v54's next-runE3.sh, the stall probe on today's
# main, one H100) failed in 10 of about 14 processes with the probe and no programmatic launch (P)
# and 7 of about 14 with the probe alone (Q), mostly in op creation (create_op and the world's
# publish), against 0-4% of main's processes in v41-v44. Is that the probe (its hunk in CudaOp's
# constructor makes a stream and a mapped host word) or main since then (v56's blocks among
# others)? Same filter, same timeout, same process loop as v44's next-runE2.sh, main only.
#   DEADLINE=<seconds> bash docs/results/v57-one-gpu/runF.sh      (logs to $OUT)
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-360}
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG > /dev/null 2>&1
cmake --build build/gpu -j16 --target test_gpu_world > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
B=$(find build/gpu -name test_gpu_world -type f | head -1)
for i in $(seq 1 500); do
  [ $(( $(date +%s) - T0 + 45 )) -gt $DEADLINE ] && break
  MOE_EP_TIMEOUT_S=10 timeout 100 $B --gtest_filter='Ranks/SingleGpuWorld.*W8*' > $OUT/r.log 2>&1
  rc=$?; echo "main $i rc $rc $(grep -c '^\[       OK' $OUT/r.log) ok $(( $(date +%s) - T0 )) s"
  if [ $rc != 0 ]; then
    { echo "== main $i"; grep -h "threw" $OUT/r.log | cut -c1-200; } >> $OUT/fails.txt
    [ $(ls $OUT | grep -c "^fail-") -lt 2 ] && cp $OUT/r.log $OUT/fail-$i.log
  fi
done > $OUT/reps.txt
[ -f $OUT/r.log ] && grep -E "^\[ RUN|^\[  FAILED|^\[       OK" $OUT/r.log > $OUT/last-tests.txt
rm -f $OUT/r.log
awk '{n++; if ($4 != 0) f++} END {print n, "processes,", f + 0, "failed"}' $OUT/reps.txt
tail -3 $OUT/reps.txt
[ -f $OUT/fails.txt ] && head -40 $OUT/fails.txt
echo "end $(( $(date +%s) - T0 )) s"
