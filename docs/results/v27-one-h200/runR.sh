#!/bin/bash
# NOTE (found after the runs): `git archive HEAD` on the lent machine gave the session's first
# commit, 8aa1ef3, whatever was committed later (docs/perf-notes.md, How we measure), so A in
# runs P, Q and R is 8aa1ef3, not the commit named below.
# v27 run R (session 33): the dispatch kernel's last block waits for every source (one node),
# instead of dispatch_wait_kernel: one launch fewer a dispatch.
#   bash docs/results/v27-one-h200/runR.sh       (logs to $OUT)
# A = main's source (tmp-gpu/A, `git archive HEAD` at ae8be05), ./ = the working tree.
# The bench alternated (dispatch at 128 and 4096 tokens), then the GPU tests of normal mode's
# dispatch on ./ (one-GPU world W = 2/4/8, agreement, errors, copy engine) in the time left.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
rm -rf tmp-gpu/A && mkdir -p tmp-gpu/A &&
  git archive HEAD CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml | tar -x -C tmp-gpu/A
build() {  # build DIR TESTS JOBS TARGETS...
  local d=$1 tests=$2 jobs=$3; shift 3
  (cd $d && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=$tests > /dev/null 2>&1 &&
    cmake --build build/gpu -j$jobs --target "$@" > build-o.log 2>&1 || { echo "build of $d failed"; tail -30 build-o.log; })
}
build tmp-gpu/A OFF 6 moe-ep & build . ON 10 all & wait
t built
A=tmp-gpu/A/build/gpu/tools/moe-ep; C=build/gpu/tools/moe-ep
for v in $A $C $A $C; do
  echo "== $v normal"; timeout 40 $v bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 100 --warmup 10
done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 400 - $(date +%s) + T0 )) ctest --test-dir build/gpu -R '^(GpuBackend|unvalidated|GpuTimeoutLog|Ranks/SingleGpuWorld|SingleGpuWorld|GpuCopyEngine|Ranks/GpuCopyEngine|GpuAgreement|GpuMemory)' --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout" $OUT/ctest.log | head -40
t end
