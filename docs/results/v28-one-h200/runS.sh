#!/bin/bash
# v28 run S (session 35): where notify's time goes, before changing it.
#   bash docs/results/v28-one-h200/runS.sh       (logs to $OUT)
# Main as committed (2781ce6). ncu with the full set and SASS-level warp samples on notify_kernel
# and validate_step_kernel at 128 and 4096 tokens (32 SMs, world size 1), every kernel of one
# fp8 dispatch at both sizes (time, instructions), then the one-GPU-world W8 test repeated (v27
# run R met the known first-kernel stall there).
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j16 > $OUT/build.log 2>&1 || { echo "build failed"; tail -30 $OUT/build.log; exit 1; }
t built
C=build/gpu/tools/moe-ep
for tok in 128 4096; do
  N="bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check --dispatch-dtype fp8 --combine-dtype bf16 --tokens $tok"
  echo "== every kernel, $tok tokens"
  timeout 60 ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__grid_size -k regex:"validate_step|notify_kernel|dispatch|step_kernel|combine_kernel" -s 6 -c 12 $C $N
  for k in notify_kernel validate_step_kernel; do
    timeout 90 ncu --set full --import-source yes -f -o $OUT/$k-$tok -k regex:$k -s 2 -c 1 $C $N > /dev/null 2>&1
    echo "== $k $tok details"; ncu -i $OUT/$k-$tok.ncu-rep --page details
    ncu -i $OUT/$k-$tok.ncu-rep --page source --csv --print-source sass > $OUT/$k-$tok-sass.csv 2>&1
  done
done 2>&1 | grep -v "^==PROF==" > $OUT/ncu.log
grep -E "^==|gpu__time|inst_executed|grid_size|Duration|rror" $OUT/ncu.log | head -80
t ncu
MOE_EP_TIMEOUT_S=10 timeout $(( 560 - $(date +%s) + T0 )) ctest --test-dir build/gpu \
  -R 'Ranks/SingleGpuWorld.AllDtypePairsEqualTheReference/W8' --repeat until-fail:10 \
  --output-on-failure --timeout 60 > $OUT/ctest-w8.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout|Test #" $OUT/ctest-w8.log | head -40
t end
