#!/bin/bash
# v41 run Y: as runZ.sh, with main from `git archive HEAD` (the session's first commit, 773bc36)
# and V the working tree's build/gpu (main + next-done-counts.patch, built by runX.sh on the
# same warm machine), 40 alternating repeats each.
#   bash docs/results/v41-one-h200/runY.sh      (logs to $OUT)
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
T0=$(date +%s)
rm -rf tmp-gpu/M && mkdir -p tmp-gpu/M && git archive HEAD | tar -x -C tmp-gpu/M
(cd tmp-gpu/M && cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
  cmake --build build/gpu -j16 --target test_gpu_world > $OUT/buildM.log 2>&1)
cmake --build build/gpu -j16 --target test_gpu_world >> $OUT/buildM.log 2>&1
BM=$(find tmp-gpu/M/build/gpu -name test_gpu_world -type f | head -1)
BV=$(find build/gpu -name test_gpu_world -type f | head -1)
for i in $(seq 1 40); do for v in M V; do
  B=$BM; [ $v = V ] && B=$BV
  MOE_EP_TIMEOUT_S=10 timeout 100 $B --gtest_filter='Ranks/SingleGpuWorld.*W8*' > $OUT/r.log 2>&1
  rc=$?; echo "$v $i rc $rc"; [ $rc != 0 ] && cp $OUT/r.log $OUT/fail-$v-$i.log
done; [ $(( $(date +%s) - T0 )) -gt 420 ] && break; done | tee $OUT/reps.txt |
  awk '{n[$1]++; if ($4 != 0) f[$1]++} END {for (v in n) print v, n[v], "runs", f[v] + 0, "failed"}'
rm -f $OUT/r.log
