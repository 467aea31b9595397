#!/bin/bash
# v57, NOT RUN YET (one GPU, DEADLINE seconds, 560 by default): which of next-stall-probe3.patch's
# two calls in CudaOp's constructor made run E3 fail. Run E3 (the probe on v56's main, one H100):
# 17 of about 28 W = 8 processes failed, most in op creation; run F, main alone, 1 of 100 (in a
# first dispatch: two ranks' step kernels began 10 s after their launch, when their peers timed
# out). probe3 makes, on each rank's thread at its first op, a stream (the canary's) and a mapped
# word with cudaHostAlloc, which can wait for the whole device (resources.h keeps the library off
# it). Arms, alternating, each main + one patch:
#   X  = next-idle-stream.patch: the stream only, never used (a stream more a rank; v42's queue
#        probe found a stream bound to a hardware queue only while a launch waits in it behind a
#        running kernel, so an idle stream should change nothing);
#   H  = next-host-alloc.patch: the cudaHostAlloc only;
#   Q4 = next-stall-probe4.patch: probe3 with its word from the library's mapped host slabs.
# Predicted: X fails about as often as main (1 of 100 in run F), H as often as E3's arms (most of
# its failures in creation), Q4 as main. If X fails as E3 did, stream creation is a suspect; if
# H does, cudaHostAlloc. Q4 is the canary probe itself, for its 2 s lines in a failing dispatch.
# One source tree: patch, build test_gpu_world (the library is static), keep the binary, revert.
# The device tool brings back at most 8 files (run E3 lost its count file to that): the logs go
# to tmp-gpu/logs and come back as one archive, $OUT/runG-logs.tgz, whenever the script ends.
#   DEADLINE=<seconds> bash docs/results/v57-one-gpu/next-runG.sh      (logs to $OUT)
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-560}
D=docs/results/v57-one-gpu
FINAL_OUT=$OUT
OUT=tmp-gpu/logs
rm -rf tmp-gpu && mkdir -p $OUT
trap 'tar -C tmp-gpu -czf $FINAL_OUT/runG-logs.tgz logs' EXIT
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG > /dev/null 2>&1
mkdir -p tmp-gpu/bin
ARMS="X H Q4"
for v in $ARMS; do
  case $v in X) P=$D/next-idle-stream.patch ;; H) P=$D/next-host-alloc.patch ;;
    Q4) P=$D/next-stall-probe4.patch ;; esac
  patch -p1 -s < $P || exit 1
  cmake --build build/gpu -j16 --target test_gpu_world > $OUT/build-$v.log 2>&1 || {
    tail -30 $OUT/build-$v.log; exit 1; }
  cp "$(find build/gpu -name test_gpu_world -type f | head -1)" tmp-gpu/bin/$v
  patch -R -p1 -s < $P || exit 1
  echo "built $v $(( $(date +%s) - T0 )) s"
done
for i in $(seq 1 500); do for v in $ARMS; do
  [ $(( $(date +%s) - T0 + 45 )) -gt $DEADLINE ] && break 2
  MOE_EP_TIMEOUT_S=10 timeout 100 tmp-gpu/bin/$v --gtest_filter='Ranks/SingleGpuWorld.*W8*' \
    > $OUT/r.log 2>&1
  rc=$?
  # Where it failed: op creation (create_op, the world's publish) or a call (anything else).
  where=-
  [ $rc != 0 ] && where=call && grep -q "threw: create_op\|threw: single-GPU world" $OUT/r.log &&
    where=creation
  echo "$v $i rc $rc $where $(( $(date +%s) - T0 )) s"
  if [ $rc != 0 ]; then
    { echo "== $v $i"; grep -h "^\[probe2\]" $OUT/r.log; grep -h "threw" $OUT/r.log | cut -c1-200
    } >> $OUT/fails.txt
    [ $(ls $OUT | grep -c "^fail-$v-") -lt 2 ] && cp $OUT/r.log $OUT/fail-$v-$i.log
  fi
done; done > $OUT/reps.txt
rm -f $OUT/r.log
awk '{n[$1]++; if ($4 != 0) f[$1]++; if ($5 == "creation") c[$1]++}
  END {for (v in n) print v, n[v], "processes,", f[v] + 0, "failed,", c[v] + 0, "in creation"}' \
  $OUT/reps.txt
[ -f $OUT/fails.txt ] && grep -c "^== " $OUT/fails.txt
echo "end $(( $(date +%s) - T0 )) s"
