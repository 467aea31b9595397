#!/bin/bash
# v29 run B (session 36): the whole GPU suite on the working tree (the fp8 quotient table, the
# packed maxima, the own rows' fused decode, the decode test limited to the fast scales), and
# 128-token legs A B A B A B (run A's one round at 128 tokens looked slower on B's combine, whose
# bf16 kernel B does not change); then, in the time left, ncu's per-instruction counts (SASS, CSV)
# of the mxfp4 dispatch kernel at 4096 tokens and of the decode kernels at 128 tokens, for the
# next session's instruction accounting.
#   bash docs/results/v29-one-h200/runB.sh       (logs to $OUT)
# A = `git archive HEAD` on the machine (the session's first commit, 7545fc6), ./ = the working tree.
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
build tmp-gpu/A OFF 4 moe-ep & build . ON 12 all & wait
t built
A=tmp-gpu/A/build/gpu/tools/moe-ep; B=build/gpu/tools/moe-ep
for v in $A $B $A $B $A $B; do
  echo "== $v"; timeout 60 $v bench --backend cuda --ranks 1 --tokens 128 --num-sms 32 --dispatch-dtype fp8 --combine-dtype bf16,fp8 --iters 200 --warmup 20
done > $OUT/bench-128.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench-128.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 480 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout" $OUT/ctest.log | head -40
t ctest
prof() {  # prof NAME KERNEL-REGEX SKIP COUNT BENCH-ARGS...
  local name=$1 k=$2 s=$3 c=$4; shift 4
  timeout $(( 560 - $(date +%s) + T0 )) ncu --set full --import-source yes -k regex:"$k" -s $s -c $c -o $OUT/$name -f \
    $B bench --backend cuda --ranks 1 --num-sms 32 --no-check "$@" > $OUT/$name-ncu.log 2>&1 &&
    ncu -i $OUT/$name.ncu-rep --page source --csv --print-source sass > $OUT/$name-sass.csv 2>&1 &&
    ncu -i $OUT/$name.ncu-rep --page details > $OUT/$name-details.txt 2>&1
  echo "$name rc $?"; rm -f $OUT/$name.ncu-rep
}
prof mxfp4-dispatch '^dispatch_kernel' 2 1 --iters 2 --warmup 1 --dispatch-dtype fp4 --combine-dtype bf16 --tokens 4096
prof decode-128 'll_send|ll_expand|ll_combine' 30 3 --mode decode --iters 20 --warmup 10 --dispatch-dtype fp8 --combine-dtype bf16 --tokens 128
ls -la $OUT
t end
