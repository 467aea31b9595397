#!/bin/bash
# v31 run E (one H200): the step kernel's ranks with one load of the ids for both passes,
# repeats found by __match_any_sync, the totals without a barrier, the zeroing before the wait;
# ll_send's metadata items with their ids and weights loaded before the wait.
#   bash docs/results/v31-one-h200/runE.sh      (carry: build-base; logs to $OUT)
# A = build-base/A (a copy of main b08233a, carried: on the device `git archive HEAD` gives the
# session's first commit), B = ./ (built with tests), T = B + trace-v31.patch (globaltimer
# stamps; the ranks' phases). Trace at 1 and 128 tokens, bench A B A B, then the whole GPU suite.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml"
R=docs/results/v31-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu/T && cp -r build-base/A tmp-gpu/A && tar -c $SRC | tar -x -C tmp-gpu/T
(cd tmp-gpu/T && patch -p1 -s < ../../$R/trace-v31.patch) || echo "trace patch did not apply"
build() {  # build DIR TESTS JOBS TARGETS...
  local d=$1 tests=$2 jobs=$3; shift 3
  (cd $d && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=$tests > /dev/null 2>&1 &&
    cmake --build build/gpu -j$jobs --target "$@" > build-o.log 2>&1 || { echo "build of $d failed"; tail -30 build-o.log; })
}
build tmp-gpu/A OFF 3 moe-ep & build tmp-gpu/T OFF 3 moe-ep & build . ON 10 all & wait
t built
for n in 128 1; do
  timeout 60 tmp-gpu/T/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens $n --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20
done > $OUT/trace.log 2>&1
grep -E "TRACE (leg|ranks|step|send|expand|combine)|wrong" $OUT/trace.log
t trace
for round in 1 2; do
  for v in tmp-gpu/A .; do
    echo "== $v"; timeout 60 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 200 --warmup 20
  done
done > $OUT/bench-decode.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench-decode.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 590 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout|Test +#.*(Shapes|Scan)" $OUT/ctest.log | head -40
t end
