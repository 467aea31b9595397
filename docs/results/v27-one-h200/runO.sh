#!/bin/bash
# Written in session 32, ran in session 33 (v27) on main 8aa1ef3 with the two patches of v26
# applied (`untested-combine-whole-rows.patch`, `untested-gpu-timeouts-test.patch`; both merged
# after this run, see the commit that added this file):  bash runO.sh   (logs to $OUT; took 341 s)
# A = main's source (tmp-gpu/A, `git archive HEAD`, before the patches), ./ = the patches.
# ncu on the fp8 blockwise, direct-cast and bf16 combine kernels at 4096 tokens and 32 SMs
# (instructions, duration),
# the bench alternated, the combine tests that take the new path (hidden 7168, 2048 and 1536;
# zero, subnormal, huge, Inf and NaN blocks), the new decode timeout test, then the --num-sms
# sweep of all 12 pairs that issue 12 asks for (in the time left of the 600 s; if it is cut, run
# it in its own call).
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
build tmp-gpu/A OFF 5 moe-ep & build . ON 11 moe-ep test_gpu_backend test_gpu_timeouts & wait
t built
A=tmp-gpu/A/build/gpu/tools/moe-ep; C=build/gpu/tools/moe-ep
M="--metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread"
N="bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check --dispatch-dtype bf16 --tokens 4096"
for c in fp8 fp8_direct_cast bf16; do for v in $A $C; do
  echo "== $v combine $c 4096"; timeout 30 ncu $M -k regex:combine_kernel -s 2 -c 3 $v $N --combine-dtype $c
done; done 2>&1 | grep -v "^==PROF==" > $OUT/ncu.log
grep -E "^==|gpu__time|inst_executed|registers" $OUT/ncu.log
t ncu
MOE_EP_TIMEOUT_S=10 ctest --test-dir build/gpu -R 'AllPairsDeepSeek|FiniteBlocks|PrequantizedInputEqualsCpu|OddShapes|GpuTimeoutLog' --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
grep -E "tests passed|Failed|\*\*\*|Test +#" $OUT/ctest.log
t tests
for v in $A $C $A $C; do
  echo "== $v normal"; timeout 30 $v bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype bf16,fp8 --combine-dtype bf16,fp8,fp8_direct_cast --iters 50 --warmup 5
done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench
timeout $(( 590 - $(date +%s) + T0 )) $C bench --backend cuda --ranks 1 --tokens 4096 --num-sms 8,16,32,64,132 --dispatch-dtype all --combine-dtype all --iters 20 --warmup 3 > $OUT/sweep.log 2>&1
grep -E "^ +[0-9]|wrong|rror" $OUT/sweep.log
t end
