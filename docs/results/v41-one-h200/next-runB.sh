#!/bin/bash
# Prepared in v41 for the next session; ran in v42 as run B (docs/results/v42-one-h200/runB-*): what holds a rank's first kernel in the
# one-GPU world's stall. v41 runs X-Z: 2-4% of the processes that run test_gpu_world's W = 8
# tests fail in the first dispatch, on main as on V. In four failures one rank's count_kernel
# began on the device 10.0 s after its host launched it (ranks 4, 3, 2, 2, by the op's own
# warning line "latest step launched at ... (host), began at ... (device)"), when the others had
# timed out; in the fifth a rank's upload returned 10 s late. Two questions:
# - does the late rank's launch call itself block on the host? Both arms carry
#   next-launch-probe.patch, which prints "[probe] rank r: count_kernel's launch returned ..."
#   when cudaLaunchKernelEx took over 1 ms;
# - do the waiting ranks' kernels launched early by programmatic dependent launch (the data and
#   wait kernels' blocks, resident behind count_kernel) take part? B adds next-no-pdl-probe.patch
#   (launch_following sets no attribute: each kernel starts after the one before it has ended).
# M / B processes of the W = 8 tests in turn until about 560 s (about 100 each). For each
# failure the ranks whose step began over 1 s after its launch, and the probe's lines.
#   bash docs/results/v41-one-h200/next-runB.sh      (logs to $OUT)
set -u
T0=$(date +%s)
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v41-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu/M tmp-gpu/B
for v in M B; do tar -c $SRC | tar -x -C tmp-gpu/$v; (cd tmp-gpu/$v && patch -p1 -s < ../../$R/next-launch-probe.patch); done
(cd tmp-gpu/B && patch -p1 -s < ../../$R/next-no-pdl-probe.patch)
for v in M B; do
  (cd tmp-gpu/$v && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j8 --target test_gpu_world > $OUT/build-$v.log 2>&1 || echo "build $v failed") &
done
wait
echo "built $(( $(date +%s) - T0 )) s"
for i in $(seq 1 500); do for v in M B; do
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
done; [ $(( $(date +%s) - T0 )) -gt 560 ] && break; done > $OUT/reps.txt
rm -f $OUT/r.log
awk '{n[$1]++; if ($4 != 0) f[$1]++} END {for (v in n) print v, n[v], "runs", f[v] + 0, "failed"}' $OUT/reps.txt
[ -f $OUT/late.txt ] && cat $OUT/late.txt
echo "end $(( $(date +%s) - T0 )) s"
