#!/bin/bash
# v32 run G (one H200): the decode step kernel's last window of slot ranks and its totals beside
# the word exchange (ll_rank_slots_last on the warps without a peer), against v31 run F's tree
# (whose logs were lost) and main before it.
#   bash docs/results/v32-one-h200/runG.sh      (carry: build-base; logs to $OUT)
# Trees (carried as files: on the device `git archive HEAD` gives the session's first commit):
#   A = build-base/A, main 3dd8886 (v31 run F's A);  F = build-base/F, a26a81b (run F's tree);
#   B = ./ (built with the tests);  TF = F + v31's trace patch;  TB = B + trace-v32.patch.
# Traces at 128 and 1 tokens (TF, TB), bench A F B A F B, then the decode, scan, agreement,
# validation and timeout tests on B.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml"
R=docs/results
rm -rf tmp-gpu && mkdir -p tmp-gpu/TB && cp -r build-base/A tmp-gpu/A && cp -r build-base/F tmp-gpu/F &&
  cp -r build-base/F tmp-gpu/TF && tar -c $SRC | tar -x -C tmp-gpu/TB
(cd tmp-gpu/TF && patch -p1 -s < ../../$R/v31-one-h200/trace-v31.patch) || echo "v31 trace patch did not apply"
(cd tmp-gpu/TB && patch -p1 -s < ../../$R/v32-one-h200/trace-v32.patch) || echo "v32 trace patch did not apply"
build() {  # build DIR TESTS JOBS TARGETS...
  local d=$1 tests=$2 jobs=$3; shift 3
  (cd $d && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=$tests > /dev/null 2>&1 &&
    cmake --build build/gpu -j$jobs --target "$@" > build-o.log 2>&1 || { echo "build of $d failed"; tail -30 build-o.log; })
}
for d in A F TF TB; do build tmp-gpu/$d OFF 2 moe-ep & done
build . ON 8 all & wait
t built
for v in TF TB; do
  for n in 128 1; do
    echo "== $v $n tokens"
    timeout 60 tmp-gpu/$v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens $n --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20
  done
done > $OUT/trace.log 2>&1
grep -E "^==|TRACE (leg|ranks|step|send|expand|combine)|wrong" $OUT/trace.log
t trace
for round in 1 2; do
  for v in tmp-gpu/A tmp-gpu/F .; do
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
