#!/bin/bash
# Prepared in v41 for the next session, NOT RUN YET: does programmatic dependent launch take part
# in the one-GPU world's stall? v41 runs X-Z: 2-4% of the processes that run test_gpu_world's
# W = 8 tests fail in the first dispatch, on main as on V: ranks launch on time, yet some ranks'
# count_kernel runs only after the others' have timed out in the step agreement (or, once, a
# rank's upload returns late). With PDL, each waiting rank's data kernel (2b blocks) and wait
# kernel are resident behind its count_kernel. B = main + next-no-pdl-probe.patch (launch_following
# sets no attribute: every kernel starts after the one before it has ended). S = main with
# MOE_EP_TEST_STREAM_SKIP=1 (one unused stream made before the tests' stream pool, which moves
# every rank's streams to other hardware queues). Rank 2 was late in all five of v41's failures
# (late sets {2,4,6,7}, {0,1,2,3}, {2,3}, {2}, {2,3,5}; by chance about 2%): if the late rank
# follows the queues, S's failures name another rank. M / B / S processes of the W = 8 tests in
# turn until about 560 s (about 70 each): if B never stalls while M does, the PDL-resident blocks
# are implicated; the late ranks of each failure are in its log (the ranks that timed out in
# dispatch/receive).
#   bash docs/results/v41-one-h200/next-runB.sh      (logs to $OUT)
set -u
T0=$(date +%s)
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/M tmp-gpu/B
tar -c $SRC | tar -x -C tmp-gpu/M
tar -c $SRC | tar -x -C tmp-gpu/B
(cd tmp-gpu/B && patch -p1 -s < ../../docs/results/v41-one-h200/next-no-pdl-probe.patch)
for v in M B; do
  (cd tmp-gpu/$v && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j8 --target test_gpu_world > $OUT/build-$v.log 2>&1 || echo "build $v failed") &
done
wait
echo "built $(( $(date +%s) - T0 )) s"
for i in $(seq 1 500); do for v in M B S; do
  d=$v; skip=0; [ $v = S ] && { d=M; skip=1; }
  B=$(find tmp-gpu/$d/build/gpu -name test_gpu_world -type f | head -1)
  MOE_EP_TEST_STREAM_SKIP=$skip MOE_EP_TIMEOUT_S=10 timeout 100 $B --gtest_filter='Ranks/SingleGpuWorld.*W8*' > $OUT/r.log 2>&1
  rc=$?; echo "$v $i rc $rc"
  [ $rc != 0 ] && { grep -h "threw" $OUT/r.log | sed "s/^/$v $i /" >> $OUT/late.txt
    [ $(ls $OUT | grep -c "^fail-$v") -lt 1 ] && cp $OUT/r.log $OUT/fail-$v-$i.log; }
done; [ $(( $(date +%s) - T0 )) -gt 560 ] && break; done > $OUT/reps.txt
rm -f $OUT/r.log
[ -f $OUT/late.txt ] && grep "dispatch/receive" $OUT/late.txt | awk '{print $1, $2, "late rank", $4}'
awk '{n[$1]++; if ($4 != 0) f[$1]++} END {for (v in n) print v, n[v], "runs", f[v] + 0, "failed"}' $OUT/reps.txt
grep " rc [^0]" $OUT/reps.txt
echo "end $(( $(date +%s) - T0 )) s"
