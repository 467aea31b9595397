#!/bin/bash
# v30 run A (session 37): where a decode call's time goes, and the dispatch's id scan in the
# decode step kernel.
#   bash docs/results/v30-one-h200/runA.sh       (logs to $OUT)
# T = `git archive HEAD` (the session's first commit, bdbc0da) with trace.patch (globaltimer
# stamps in ll_step, ll_send, ll_expand, ll_combine for the call of step 201/202, printed by the
# step kernel of step 211): the bench's graph replays at 128, 1 and 32 tokens.
# A = `git archive HEAD`, ./ = the working tree (the step kernel scans the ids; validate_scan's
# loads batched): decode and normal bench alternated A B A B; then the decode and scan tests.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
for d in A T; do
  rm -rf tmp-gpu/$d && mkdir -p tmp-gpu/$d &&
    git archive HEAD CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml | tar -x -C tmp-gpu/$d
done
(cd tmp-gpu/T && patch -p1 -s < ../../docs/results/v30-one-h200/trace.patch) || echo "trace.patch did not apply"
build() {  # build DIR TESTS JOBS TARGETS...
  local d=$1 tests=$2 jobs=$3; shift 3
  (cd $d && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=$tests > /dev/null 2>&1 &&
    cmake --build build/gpu -j$jobs --target "$@" > build-o.log 2>&1 || { echo "build of $d failed"; tail -30 build-o.log; })
}
build tmp-gpu/T OFF 3 moe-ep & build tmp-gpu/A OFF 3 moe-ep & build . ON 10 all & wait
t built
for tok in 128 1 32; do
  for pair in "fp8 bf16" "bf16 bf16"; do
    set -- $pair
    echo "== tokens $tok dispatch $1 combine $2"
    timeout 60 tmp-gpu/T/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens $tok --dispatch-dtype $1 --combine-dtype $2 --iters 200 --warmup 20
  done
done > $OUT/trace.log 2>&1
grep -E "^==|^[a-z0-9]+ +[a-z0-9]+ +[0-9]|wrong|rror|TRACE" $OUT/trace.log
t trace
A=tmp-gpu/A/build/gpu/tools/moe-ep; B=build/gpu/tools/moe-ep
for v in $A $B $A $B; do
  echo "== $v"; timeout 60 $v bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20
done > $OUT/bench-decode.log 2>&1
grep -E "^==|^[a-z0-9]+ +[a-z0-9]+ +[0-9]|^ +[0-9]|wrong|rror" $OUT/bench-decode.log
for v in $A $B $A $B; do
  echo "== $v"; timeout 60 $v bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype fp8 --combine-dtype bf16 --iters 100 --warmup 10
done > $OUT/bench.log 2>&1
grep -E "^==|^[a-z0-9]+ +[a-z0-9]+ +[0-9]|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 570 - $(date +%s) + T0 )) ctest --test-dir build/gpu -R 'LowLatency|Scan|Validat|SingleGpuWorld|Agreement|Timeout' --output-on-failure --timeout 90 > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout|Test +#" $OUT/ctest.log | head -80
t end
