#!/bin/bash
# For the next session (written in session 37, not yet run): the three untested decode patches
# of v30, each alone and together, against the main of the session that runs it; the ranks'
# phases traced; the decode tests on all three together.
#   bash docs/results/v30-one-h200/next-runD.sh       (logs to $OUT)
# A = `git archive HEAD` (the session's first commit: check that it is the tree these patches
# were made against, v30's final commit), P1 = A + next-step-kernel-split.patch, P2 = A +
# next-expand-no-grid-wait.patch, P3 = A + next-send-encode-before-wait.patch, ./ = the working
# tree with all three applied by this script (built with tests). T = A + trace-final.patch +
# trace-ranks.patch (trace-runC.patch is run C's, on the tree before session 37's last commits).
# The tests include normal mode's scan and bit-exactness tests: session 37's last code commit
# (report_bad_expert shared by validate_scan and ll_rank_slots) changed count_kernel's and
# validate_kernel's code after the last GPU run. Decode bench A P1 P2 P3 ./ twice at 1 and 128 tokens; then the decode tests.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml"
R=docs/results/v30-one-h200
for d in A T P1 P2 P3; do rm -rf tmp-gpu/$d && mkdir -p tmp-gpu/$d && git archive HEAD $SRC | tar -x -C tmp-gpu/$d; done
(cd tmp-gpu/T && patch -p1 -s < ../../$R/trace-final.patch && patch -p1 -s < ../../$R/trace-ranks.patch) || echo "trace patches did not apply"
(cd tmp-gpu/P1 && patch -p1 -s < ../../$R/next-step-kernel-split.patch) || echo "P1 did not apply"
(cd tmp-gpu/P2 && patch -p1 -s < ../../$R/next-expand-no-grid-wait.patch) || echo "P2 did not apply"
(cd tmp-gpu/P3 && patch -p1 -s < ../../$R/next-send-encode-before-wait.patch) || echo "P3 did not apply"
for pch in next-step-kernel-split next-expand-no-grid-wait next-send-encode-before-wait; do
  patch -p1 -s -N < $R/$pch.patch || echo "$pch did not apply to ./"
done
build() {  # build DIR TESTS JOBS TARGETS...
  local d=$1 tests=$2 jobs=$3; shift 3
  (cd $d && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=$tests > /dev/null 2>&1 &&
    cmake --build build/gpu -j$jobs --target "$@" > build-o.log 2>&1 || { echo "build of $d failed"; tail -30 build-o.log; })
}
for d in A T P1 P2 P3; do build tmp-gpu/$d OFF 2 moe-ep & done; build . ON 8 all & wait
t built
timeout 60 tmp-gpu/T/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens 128 --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20 > $OUT/trace.log 2>&1
grep -E "TRACE (ranks|step|send|expand)|wrong" $OUT/trace.log | grep -v "step(c)"
t trace
for round in 1 2; do
  for v in tmp-gpu/A tmp-gpu/P1 tmp-gpu/P2 tmp-gpu/P3 .; do
    echo "== $v"; timeout 60 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens 1,128 --dispatch-dtype bf16,fp8 --combine-dtype bf16 --iters 200 --warmup 20
  done
done > $OUT/bench-decode.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench-decode.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 590 - $(date +%s) + T0 )) ctest --test-dir build/gpu -R 'LowLatency|Scan|Validat|Agreement|Timeout|AllPairs|WorldSizeOne|SingleGpuWorld' --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout" $OUT/ctest.log | head -40
git checkout src  # the patches were applied to ./ for this run only
t end
