#!/bin/bash
# v32 run H (one H200): run G's tree (B: the last window's slot ranks and the totals beside the
# step's word exchange, their ids loaded again there) against the same with the last window's
# pass 1 on the threads that run its pass 2 (B2: the ids stay in registers), and F.
#   bash docs/results/v32-one-h200/runH.sh      (carry: build-base; logs to $OUT)
# Trees (carried as files: on the device `git archive HEAD` gives the session's first commit):
#   F = build-base/F, a26a81b (v31 run F's tree);  B = build-base/B (run G's tree);
#   B2 = ./ (built with the tests; runH-last-window-ids-kept.patch on run G's tree);  TF = F + v31's trace patch;  TB2 = B2 + trace-v32-last.patch.
# Traces at 128 and 1 tokens (TF, TB2), bench F B B2 three times, then the decode, scan,
# agreement, validation and timeout tests on B2.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml"
R=docs/results
rm -rf tmp-gpu && mkdir -p tmp-gpu/TB2 && cp -r build-base/B tmp-gpu/B && cp -r build-base/F tmp-gpu/F &&
  cp -r build-base/F tmp-gpu/TF && tar -c $SRC | tar -x -C tmp-gpu/TB2
(cd tmp-gpu/TF && patch -p1 -s < ../../$R/v31-one-h200/trace-v31.patch) || echo "v31 trace patch did not apply"
(cd tmp-gpu/TB2 && patch -p1 -s < ../../$R/v32-one-h200/trace-v32-last.patch) || echo "v32 trace patch did not apply"
build() {  # build DIR TESTS JOBS TARGETS...
  local d=$1 tests=$2 jobs=$3; shift 3
  (cd $d && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=$tests > /dev/null 2>&1 &&
    cmake --build build/gpu -j$jobs --target "$@" > build-o.log 2>&1 || { echo "build of $d failed"; tail -30 build-o.log; })
}
for d in B F TF TB2; do build tmp-gpu/$d OFF 2 moe-ep & done
build . ON 8 all & wait
t built
for v in TF TB2; do
  for n in 128 1; do
    echo "== $v $n tokens"
    timeout 60 tmp-gpu/$v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens $n --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20
  done
done > $OUT/trace.log 2>&1
grep -E "^==|TRACE (leg|ranks|step|send|expand|combine)|wrong" $OUT/trace.log
t trace
for round in 1 2 3; do
  for v in tmp-gpu/F tmp-gpu/B .; do
    echo "== $v"; timeout 60 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype bf16,fp8 --combine-dtype bf16 --iters 200 --warmup 20
  done
done > $OUT/bench-decode.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench-decode.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 575 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 60 \
  -R 'LowLatency|Scan|Validat|Agreement|Timeout|AllPairs|WorldSizeOne|SingleGpuWorld' > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout|Test +#.*(Shapes|Scan)" $OUT/ctest.log | head -40
t end
