#!/bin/bash
# v41 run Z (and, with fewer reps, run Y): the one-GPU world's W = 8 tests of test_gpu_world,
# main (git archive HEAD) and V (main + v40's next-done-counts.patch) alternating, each rep a
# fresh process, MOE_EP_TIMEOUT_S=10, until the call's time is nearly spent. Question: does V
# make the world's first-dispatch stall (a rank's first kernel starts only after the others
# timed out) more frequent? rc per rep in reps.txt, the first failing logs kept.
#   bash docs/results/v41-one-h200/runZ.sh [seconds, default 400]      (logs to $OUT)
set -u
T0=$(date +%s); LIMIT=${1:-400}
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
rm -rf tmp-gpu && mkdir -p tmp-gpu/M tmp-gpu/V && git archive HEAD | tar -x -C tmp-gpu/M
git archive HEAD | tar -x -C tmp-gpu/V
(cd tmp-gpu/V && patch -p1 -s < ../../docs/results/v40-one-h200/next-done-counts.patch)
for v in M V; do
  (cd tmp-gpu/$v && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j8 --target test_gpu_world > $OUT/build-$v.log 2>&1 || echo "build $v failed") &
done
wait
echo "built $(( $(date +%s) - T0 )) s"
for i in $(seq 1 500); do for v in M V; do
  B=$(find tmp-gpu/$v/build/gpu -name test_gpu_world -type f | head -1)
  MOE_EP_TIMEOUT_S=10 timeout 100 $B --gtest_filter='Ranks/SingleGpuWorld.*W8*' > $OUT/r.log 2>&1
  rc=$?; echo "$v $i rc $rc"
  [ $rc != 0 ] && [ $(ls $OUT | grep -c "^fail-$v") -lt 2 ] && cp $OUT/r.log $OUT/fail-$v-$i.log
done; [ $(( $(date +%s) - T0 )) -gt $LIMIT ] && break; done > $OUT/reps.txt
rm -f $OUT/r.log
awk '{n[$1]++; if ($4 != 0) f[$1]++} END {for (v in n) print v, n[v], "runs", f[v] + 0, "failed"}' $OUT/reps.txt
grep " rc [^0]" $OUT/reps.txt
echo "end $(( $(date +%s) - T0 )) s"
