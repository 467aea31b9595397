#!/bin/bash
# v30 run C (session 37): ll_rank_slots on 1024 threads with 32-bit indices (run B: 256 threads,
# 64-bit divisions, 5 us at 128 tokens); ll_send loading each warp's first row slice before its
# wait for the step kernel (send-prefetch.patch); then the whole GPU suite.
#   bash docs/results/v30-one-h200/runC.sh       (logs to $OUT)
# T = the working tree with trace-runC.patch (run A's stamps on this tree's kernels; the step
# kernel's stamp 1 is after its wait and the ranks): graph replays at 128 tokens.
# A = `git archive HEAD` (bdbc0da), ./ = the working tree: decode bench alternated A B A B, ./ at
# 132 SMs too; then every GPU test on ./ (`ctest -L gpu`).
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml"
R=docs/results/v30-one-h200
rm -rf tmp-gpu/A tmp-gpu/T && mkdir -p tmp-gpu/A tmp-gpu/T
git archive HEAD $SRC | tar -x -C tmp-gpu/A
tar -cf - $SRC | tar -x -C tmp-gpu/T
(cd tmp-gpu/T && patch -p1 -s < ../../$R/trace-runC.patch) || echo "trace-runC.patch did not apply"
build() {  # build DIR TESTS JOBS TARGETS...
  local d=$1 tests=$2 jobs=$3; shift 3
  (cd $d && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=$tests > /dev/null 2>&1 &&
    cmake --build build/gpu -j$jobs --target "$@" > build-o.log 2>&1 || { echo "build of $d failed"; tail -30 build-o.log; })
}
build tmp-gpu/T OFF 3 moe-ep & build tmp-gpu/A OFF 3 moe-ep & build . ON 10 all & wait
t built
for pair in "fp8 bf16"; do
  set -- $pair
  echo "== tokens 128 dispatch $1 combine $2"
  timeout 60 tmp-gpu/T/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens 128 --dispatch-dtype $1 --combine-dtype $2 --iters 200 --warmup 20
done > $OUT/trace.log 2>&1
grep -E "^==|^[a-z0-9]+ +[a-z0-9]+ +[0-9]|wrong|rror|TRACE (step|send|expand)" $OUT/trace.log | grep -v "step(c)"
t trace
A=tmp-gpu/A/build/gpu/tools/moe-ep; B=build/gpu/tools/moe-ep
for v in $A $B $A $B; do
  echo "== $v"; timeout 90 $v bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype bf16,fp8 --combine-dtype bf16 --iters 200 --warmup 20
done > $OUT/bench-decode.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench-decode.log
echo "== build/gpu/tools/moe-ep --num-sms 132"
timeout 60 $B bench --backend cuda --ranks 1 --mode decode --num-sms 132 --tokens 128 --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20 > $OUT/bench-decode-132.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench-decode-132.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 595 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout" $OUT/ctest.log | head -40
t end
