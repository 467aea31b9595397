#!/bin/bash
# v29 run A (session 36): fp8 blockwise's quotients from a table (no division) and two warp steps'
# block maxima in one packed reduction, against main.
#   bash docs/results/v29-one-h200/runA.sh       (logs to $OUT)
# A = `git archive HEAD` on the machine (the session's first commit, 7545fc6), ./ = the working
# tree. ncu (instructions and time) of the fp8 and mxfp4 dispatch kernels and the fp8 combine
# kernel at 4096 tokens, 32 SMs, on both; the bench alternated A B A B; decode at 128 tokens;
# then the codec, format and bit-exactness tests of the kernels that encode fp8 blockwise on ./.
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
for v in $A $B; do
  for pair in "fp8 bf16 dispatch_kernel" "fp4 bf16 dispatch_kernel" "fp8 fp8 combine_kernel"; do
    set -- $pair
    echo "== $v: $3, dispatch $1, combine $2, 4096 tokens"
    timeout 60 ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread -k regex:"^$3" -s 2 -c 3 $v bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check --dispatch-dtype $1 --combine-dtype $2 --tokens 4096
  done
done 2>&1 | grep -v "^==PROF==" > $OUT/ncu.log
grep -E "^== |^  [a-z_:<>]+.*\(|gpu__time|inst_executed|registers|rror" $OUT/ncu.log | sed 's/(moe_ep::cuda_backend::[^)]*)//' | head -80
t ncu
for v in $A $B $A $B; do
  echo "== $v"; timeout 60 $v bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype fp8,fp4 --combine-dtype bf16,fp8 --iters 100 --warmup 10
done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench
for v in $A $B; do
  echo "== $v"; timeout 60 $v bench --backend cuda --ranks 1 --mode decode --tokens 128 --dispatch-dtype fp8 --combine-dtype bf16,fp8 --iters 200 --warmup 20
done > $OUT/bench-decode.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench-decode.log
t decode
MOE_EP_TIMEOUT_S=10 timeout $(( 560 - $(date +%s) + T0 )) ctest --test-dir build/gpu -R 'GpuFastCodecs|GpuFormats|FiniteBlocks|AllPairsDeepSeek|WorldSizeOneEqualsCpu|OddShapes|Ranks/SingleGpuWorld.AllDtypePairs|Ranks/GpuLowLatency.AllDtypePairs.*W2|GpuLowLatencyGraph|Nodes/GpuLowLatencyNodes.EveryDtypePair.*W4L2|Ranks/GpuNodes.AllDtypePairsEqualTheReference/W4_L2' --output-on-failure --timeout 90 > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout|Test +#" $OUT/ctest.log | head -40
t end
