#!/bin/bash
# v58 run G2 (one GPU, DEADLINE seconds): v58 run G found v57's idle stream (X, made on each rank
# thread at its first op, between creation's two rendezvous) failing 3 of 35 W = 8 processes in
# creation, against main's 1 of 100 (v57 run F, in a call) and the cudaHostAlloc arm's 1 of 35.
# Is it the stream's making while the peers' rendezvous kernels spin, or one more stream a rank?
#   X  = main + v57 next-idle-stream.patch again (the repeat);
#   S8 = main with MOE_EP_TEST_STREAM_SKIP=8: 8 unused streams made before any rank runs (the
#        tests' stream pool makes them first, testing/gpu.h), as many as X adds, made while no
#        kernel spins.
# Predicted if the making is what matters: X fails about as in run G, S8 as main.
# Alternating arms; logs come back as one archive ($OUT/runG2-logs.tgz). ARMS (default "X S8")
# picks the arms: ARMS=X repeats X alone (since v58 a creation timeout names each missing peer's
# latest attempt seen, the one it waited past and this rank's: were the two groups in one round?).
#   [ARMS="X S8"] DEADLINE=<seconds> bash docs/results/v58-one-gpu/runG2.sh      (logs to $OUT)
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-560}
FINAL_OUT=$OUT
OUT=tmp-gpu/logs
rm -rf tmp-gpu && mkdir -p $OUT tmp-gpu/bin
trap 'tar -C tmp-gpu -czf $FINAL_OUT/runG2-logs.tgz logs' EXIT
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG > /dev/null 2>&1
build() {  # build test_gpu_world as tmp-gpu/bin/$1
  cmake --build build/gpu -j16 --target test_gpu_world > $OUT/build-$1.log 2>&1 || {
    tail -30 $OUT/build-$1.log; exit 1; }
  cp "$(find build/gpu -name test_gpu_world -type f | head -1)" tmp-gpu/bin/$1
  echo "built $1 $(( $(date +%s) - T0 )) s"
}
ARMS=${ARMS:-X S8}
case " $ARMS " in *" S8 "*) build S8 ;; esac
P=docs/results/v57-one-gpu/next-idle-stream.patch
patch -p1 -s < $P || exit 1
build X
patch -R -p1 -s < $P || exit 1
for i in $(seq 1 500); do for v in $ARMS; do
  [ $(( $(date +%s) - T0 + 40 )) -gt $DEADLINE ] && break 2
  skip=0; [ $v = S8 ] && skip=8
  MOE_EP_TEST_STREAM_SKIP=$skip MOE_EP_TIMEOUT_S=10 timeout 100 tmp-gpu/bin/$v \
    --gtest_filter='Ranks/SingleGpuWorld.*W8*' > $OUT/r.log 2>&1
  rc=$?
  where=-
  [ $rc != 0 ] && where=call && grep -q "threw: create_op\|threw: single-GPU world" $OUT/r.log &&
    where=creation
  echo "$v $i rc $rc $where $(( $(date +%s) - T0 )) s"
  if [ $rc != 0 ]; then
    { echo "== $v $i"; grep -h "threw" $OUT/r.log | cut -c1-200; } >> $OUT/fails.txt
    [ $(ls $OUT | grep -c "^fail-$v-") -lt 2 ] && cp $OUT/r.log $OUT/fail-$v-$i.log
  fi
done; done > $OUT/reps.txt
rm -f $OUT/r.log
awk '{n[$1]++; if ($4 != 0) f[$1]++; if ($5 == "creation") c[$1]++}
  END {for (v in n) print v, n[v], "processes,", f[v] + 0, "failed,", c[v] + 0, "in creation"}' \
  $OUT/reps.txt
echo "end $(( $(date +%s) - T0 )) s"
