#!/bin/bash
# NOTE (found after the runs): `git archive HEAD` on the lent machine gave the session's first
# commit, 8aa1ef3, whatever was committed later (docs/perf-notes.md, How we measure), so A in
# runs P, Q and R is 8aa1ef3, not the commit named below.
# v27 run Q (session 33): a one-node dispatch's input scan and step agreement in one kernel
# (validate_step_kernel), and int8/e3m4's whole-row combine with run P's -0 fixed.
#   bash docs/results/v27-one-h200/runQ.sh       (logs to $OUT)
# A = main's source (tmp-gpu/A, `git archive HEAD`), ./ = the working tree with both changes.
# ncu on int8/e3m4's combine kernel (instructions, time, local-memory instructions), the bench
# alternated (dispatch at 128 and 4096 tokens is where the launch saved shows), then the whole
# GPU suite on ./ in the time left.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
# A as in run P (same HEAD, e6e0dbe): its build is reused when the machine still has it.
if [ ! -x tmp-gpu/A/build/gpu/tools/moe-ep ]; then
  rm -rf tmp-gpu/A && mkdir -p tmp-gpu/A &&
    git archive HEAD CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml | tar -x -C tmp-gpu/A
fi
build() {  # build DIR TESTS JOBS TARGETS...
  local d=$1 tests=$2 jobs=$3; shift 3
  (cd $d && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=$tests > /dev/null 2>&1 &&
    cmake --build build/gpu -j$jobs --target "$@" > build-o.log 2>&1 || { echo "build of $d failed"; tail -30 build-o.log; })
}
build tmp-gpu/A OFF 4 moe-ep & build . ON 12 all & wait
t built
A=tmp-gpu/A/build/gpu/tools/moe-ep; C=build/gpu/tools/moe-ep
N="bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check --dispatch-dtype bf16 --tokens 4096 --combine-dtype int8_e3m4"
for v in $A $C; do
  echo "== $v combine int8_e3m4 4096"
  timeout 30 ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread -k regex:combine_kernel -s 2 -c 3 $v $N
  timeout 30 ncu --metrics smsp__sass_inst_executed_op_local_ld.sum,smsp__sass_inst_executed_op_local_st.sum -k regex:combine_kernel -s 2 -c 1 $v $N
done 2>&1 | grep -v "^==PROF==" > $OUT/ncu.log
grep -E "^==|gpu__time|inst_executed|registers|local|rror" $OUT/ncu.log
t ncu
for v in $A $C $A $C; do
  echo "== $v normal"; timeout 40 $v bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype bf16,fp8 --combine-dtype fp8,int8_e3m4 --iters 100 --warmup 10
done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 585 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout" $OUT/ctest.log | head -40
t end
