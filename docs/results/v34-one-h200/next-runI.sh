#!/bin/bash
# Prepared in session 40 for the next session, NOT RUN YET (no device time was left). Patches
# against main 624b8d7 (docs/results/v34-one-h200/):
#   S  next-step-word-relaxed.patch: a rank that does not reject stores its step word without a
#      fence; its info word carries the step's low 7 bits, and a reader that saw the tag polls
#      the info word until they match (StepInfo::with_step / of_step, step_info_of). Predicted
#      (v34 run F's probe F): 0.4-0.5 us off every decode combine at W = 1.
#   S1 next-w1-no-self-exchange.patch (on top of S): a world of one skips the exchange with
#      itself. Predicted (probe X): the rest of the combine's step, 1.0-1.2 us in all at W = 1;
#      nothing on the dispatch (its exchange is off the critical path at W = 1).
#   G  next-budget-guard.patch: preload checks that the budgeted kernels (validate, notify,
#      count) fit their policy's blocks per SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor),
#      warns naming those that do not, and tests/test_gpu_policy.cu fails on them. Predicted on
#      G alone (main's constants): the test FAILS naming notify_kernel and count_kernel (2 an
#      SM claimed, 1 fits) and validate_kernel (8 claimed, 6 fit).
#   C  next-notify-validate-budget.patch (on top of G): count/notify blocks 1 an SM of budget
#      (a 1024-thread block at 64 registers is a whole SM), validate 6 an SM (40 registers).
#      Predicted: the policy test passes; no change at 128 tokens (grids of a few blocks); at
#      4096 tokens count_kernel's grid 32 blocks instead of 34, within the noise; the
#      validation-mode dispatch at 4096 tokens slower (its x scan has 3/4 of the blocks).
# Trees: M = ./, S, S1 = S + S1, G, C = G + C, ALL = S + S1 + G + C (built with the tests,
# whose decode, scan, agreement, validation, timeout and policy selection runs on it).
#   bash docs/results/v34-one-h200/next-runI.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v34-one-h200
rm -rf tmp-gpu && for v in S S1 G C ALL; do mkdir -p tmp-gpu/$v && tar -c $SRC | tar -x -C tmp-gpu/$v; done
ap() { (cd tmp-gpu/$1 && patch -p1 -s < ../../$R/$2) || echo "$2 did not apply to $1"; }
ap S next-step-word-relaxed.patch
ap S1 next-step-word-relaxed.patch; ap S1 next-w1-no-self-exchange.patch
ap G next-budget-guard.patch
ap C next-budget-guard.patch; ap C next-notify-validate-budget.patch
ap ALL next-step-word-relaxed.patch; ap ALL next-w1-no-self-exchange.patch
ap ALL next-budget-guard.patch; ap ALL next-notify-validate-budget.patch
b() { (cd $1 && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=$2 > /dev/null 2>&1 &&
  cmake --build build/gpu -j$3 $4 > $OUT/build-$5.log 2>&1 || { echo "build $5 failed"; grep -B2 -A10 error $OUT/build-$5.log | head -40; }); }
b . OFF 2 "--target moe-ep" M & b tmp-gpu/S OFF 2 "--target moe-ep" S & b tmp-gpu/S1 OFF 2 "--target moe-ep" S1 &
b tmp-gpu/C OFF 2 "--target moe-ep" C & b tmp-gpu/G ON 2 "--target test_gpu_policy" G &
b tmp-gpu/ALL ON 8 "" ALL &
wait
t built
echo "== policy test on G (predicted to fail)"; tmp-gpu/G/build/gpu/tests/test_gpu_policy 2>&1 | tail -8
for round in 1 2; do
  for v in . tmp-gpu/S tmp-gpu/S1; do
    echo "== $v"; timeout 60 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype bf16,fp8 --combine-dtype bf16 --iters 200 --warmup 20
  done
done > $OUT/bench-decode.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench-decode.log
t decode
for round in 1 2; do
  for v in . tmp-gpu/C; do
    echo "== $v"; timeout 60 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --num-sms 32 --tokens 128,4096 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 20 --warmup 3
    echo "== $v validated"; MOE_EP_VALIDATE=1 timeout 60 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --num-sms 32 --tokens 4096 --dispatch-dtype fp8 --combine-dtype bf16 --iters 20 --warmup 3
  done
done > $OUT/bench-normal.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench-normal.log
t normal
MOE_EP_TIMEOUT_S=10 timeout $(( 585 - $(date +%s) + T0 )) ctest --test-dir tmp-gpu/ALL/build/gpu -L gpu --output-on-failure --timeout 60 \
  -R 'LowLatency|Scan|Validat|Agreement|Timeout|AllPairs|WorldSizeOne|SingleGpuWorld|LateRank|OneSm|GpuPolicy' > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*" $OUT/ctest.log | head -30
t end
