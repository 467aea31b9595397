#!/bin/bash
# Written in session 35 for the next session, NOT RUN: three small changes to count_kernel after
# v28, each against main, before any of them is merged.
#   bash docs/results/v28-one-h200/next-runZ.sh       (logs to $OUT)
# A  = main (`git archive HEAD` on the machine: the next session's first commit, see perf-notes'
#      How we measure);
# B1 = A + next-receiver-early-launch.patch + next-no-fence-for-num-recv.patch (the receiver lets
#      the dispatch kernel launch once its waits are over; no system fence after num_recv, which
#      the host reads behind an event). Predicted: 0.5-1.5 us off the 128-token dispatch.
# B2 = B1 + next-notify-512-threads.patch (512-thread count/notify blocks: half an SM's registers,
#      cheaper barriers, a chunk of 2048 tokens). Prediction: unknown sign at 4096 tokens, better
#      at 128 (the barriers were half of notify's stalls in v28 run S); it also tests whether the
#      one-GPU world's stall needs whole-SM blocks (the W8 repeat at the end).
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
P=docs/results/v28-one-h200
for v in A B1 B2; do
  rm -rf tmp-gpu/$v && mkdir -p tmp-gpu/$v &&
    git archive HEAD CMakeLists.txt CMakePresets.json cmake include src tools tests python pyproject.toml | tar -x -C tmp-gpu/$v
done
for v in B1 B2; do
  git apply --directory=tmp-gpu/$v $P/next-receiver-early-launch.patch $P/next-no-fence-for-num-recv.patch
done
git apply --directory=tmp-gpu/B2 $P/next-notify-512-threads.patch
grep -c "kNotifyThreads = 512" tmp-gpu/*/src/backends/cuda/policy.h  # B2 only
build() {  # build DIR TESTS JOBS TARGETS...
  local d=$1 tests=$2 jobs=$3; shift 3
  (cd $d && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=$tests > /dev/null 2>&1 &&
    cmake --build build/gpu -j$jobs --target "$@" > build-o.log 2>&1 || { echo "build of $d failed"; tail -30 build-o.log; })
}
build tmp-gpu/A OFF 4 moe-ep & build tmp-gpu/B1 OFF 4 moe-ep & build tmp-gpu/B2 ON 8 all & wait
t built
for tok in 128 4096; do
  N="bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check --dispatch-dtype fp8 --combine-dtype bf16 --tokens $tok"
  for v in A B1 B2; do
    echo "== $v $tok tokens"
    timeout 60 ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__grid_size -k regex:"count_kernel|dispatch_kernel" -s 4 -c 4 tmp-gpu/$v/build/gpu/tools/moe-ep $N
  done
done 2>&1 | grep -v "^==PROF==" > $OUT/ncu.log
grep -E "^==|^  [a-z_:<>]+.*\(|gpu__time|inst_executed|grid_size|rror" $OUT/ncu.log | sed 's/(moe_ep::cuda_backend::[^)]*)//' | head -80
t ncu
for round in 1 2; do for v in A B1 B2; do
  echo "== $v round $round"; timeout 60 tmp-gpu/$v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 100 --warmup 10
done; done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 470 - $(date +%s) + T0 )) ctest --test-dir tmp-gpu/B2/build/gpu -R '^(GpuBackend|unvalidated|GpuAgreement|Ranks/SingleGpuWorld|Ranks/GpuCopyEngine)' --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout" $OUT/ctest.log | head -30
MOE_EP_TIMEOUT_S=5 timeout $(( 580 - $(date +%s) + T0 )) ctest --test-dir tmp-gpu/B2/build/gpu -R 'Ranks/GpuCopyEngine.PrequantizedInputEqualsTheReference/W8' --repeat until-fail:60 --timeout 25 > $OUT/ctest-w8.log 2>&1
echo "W8 repeat rc $?"; grep -c "Passed" $OUT/ctest-w8.log; grep -E "Failed|Timeout" $OUT/ctest-w8.log | head -5
t end
