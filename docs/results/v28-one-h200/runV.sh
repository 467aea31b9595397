#!/bin/bash
# v28 run V (session 35): count_kernel whose senders never wait for the step (positions into the
# spare half of two; only the receiver waits for the step's word), after run U's W8 stall.
#   bash docs/results/v28-one-h200/runV.sh       (logs to $OUT)
# A = `git archive HEAD` on the machine (the session's first commit, 2781ce6: validate_step_kernel
# then notify_kernel), ./ = the working tree. ncu of the kernels of one fp8 dispatch at 128 and
# 4096 tokens on ./ (A's are in run T), the bench alternated A B A B, then the tests of normal mode's dispatch on ./.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
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
for tok in 128 4096; do
  N="bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check --dispatch-dtype fp8 --combine-dtype bf16 --tokens $tok"
  for v in $C; do
    echo "== $v $tok tokens: kernels of a dispatch (name, then time, instructions, grid)"
    timeout 60 ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__grid_size,launch__registers_per_thread -k regex:"validate_step|notify_kernel|count_kernel|dispatch" -s 6 -c 8 $v $N
  done
done 2>&1 | grep -v "^==PROF==" > $OUT/ncu.log
grep -E "^==|^  [a-z_:<>]+.*\(|gpu__time|inst_executed|grid_size|registers|rror" $OUT/ncu.log | sed 's/(moe_ep::cuda_backend::[^)]*)//' | head -120
t ncu
for v in $A $C $A $C; do
  echo "== $v"; timeout 60 $v bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 100 --warmup 10
done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 390 - $(date +%s) + T0 )) ctest --test-dir build/gpu -R '^(GpuBackend|unvalidated|GpuTimeoutLog|Ranks/SingleGpuWorld|SingleGpuWorld|GpuCopyEngine|Ranks/GpuCopyEngine|GpuAgreement|GpuMemory)' --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout" $OUT/ctest.log | head -40
t ctest
# The W8 tests of the one-GPU world again (run U's stall was in one), in the time left.
MOE_EP_TIMEOUT_S=10 timeout $(( 470 - $(date +%s) + T0 )) ctest --test-dir build/gpu -R '/W8$' -E 'LowLatency' --repeat until-fail:3 --output-on-failure --timeout 60 > $OUT/ctest-w8.log 2>&1
echo "ctest W8 rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout|Test +#" $OUT/ctest-w8.log | head -40
t end
