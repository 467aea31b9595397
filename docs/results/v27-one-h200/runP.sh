#!/bin/bash
# NOTE (found after the runs): `git archive HEAD` on the lent machine gave the session's first
# commit, 8aa1ef3, whatever was committed later (docs/perf-notes.md, How we measure), so A in
# runs P, Q and R is 8aa1ef3, not the commit named below.
# v27 run P (session 33): int8/e3m4's combine on the whole-row path, and a timeline of the legs.
#   bash docs/results/v27-one-h200/runP.sh       (logs to $OUT)
# A = main's source (tmp-gpu/A, `git archive HEAD`), ./ = the working tree: int8/e3m4 own-only
# rows on the whole-row path (fast-range steps inline, the rare steps out of line).
# ncu on int8/e3m4's combine kernel at 4096 tokens and 32 SMs (instructions, time, registers,
# then the local-memory instructions that ptxas's 28 spilled bytes would execute), the tests
# that take the path, the bench alternated, then timeline.py on A (kernels overlapping as in a
# real call: normal legs at 128 and 4096 tokens, decode legs at 1 and 128).
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
build tmp-gpu/A OFF 6 moe-ep moe_ep_python moe_ep_python_files & build . ON 10 moe-ep test_gpu_backend & wait
t built
echo "nsys: $(command -v nsys || echo none)"
A=tmp-gpu/A/build/gpu/tools/moe-ep; C=build/gpu/tools/moe-ep
N="bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check --dispatch-dtype bf16 --tokens 4096 --combine-dtype int8_e3m4"
for v in $A $C; do
  echo "== $v combine int8_e3m4 4096"
  timeout 30 ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread -k regex:combine_kernel -s 2 -c 3 $v $N
  timeout 30 ncu --metrics smsp__sass_inst_executed_op_local_ld.sum,smsp__sass_inst_executed_op_local_st.sum -k regex:combine_kernel -s 2 -c 1 $v $N
done 2>&1 | grep -v "^==PROF==" > $OUT/ncu.log
grep -E "^==|gpu__time|inst_executed|registers|local|rror" $OUT/ncu.log
t ncu
MOE_EP_TIMEOUT_S=10 ctest --test-dir build/gpu -R 'AllPairsDeepSeek|FiniteBlocks|OddShapes' --output-on-failure --timeout 90 > $OUT/ctest.log 2>&1
grep -E "tests passed|Failed|\*\*\*|Test +#" $OUT/ctest.log
t tests
for v in $A $C $A $C; do
  echo "== $v normal"; timeout 40 $v bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype bf16 --combine-dtype fp8,int8_e3m4 --iters 50 --warmup 5
done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench
PYTHONPATH=tmp-gpu/A/build/gpu/python timeout 150 python3 docs/results/v27-one-h200/timeline.py > $OUT/timeline.log 2>&1
tail -80 $OUT/timeline.log
t end
