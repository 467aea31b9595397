#!/bin/bash
# v35 run M: validation mode's count_kernel as its own instantiation (count_kernel<true>) with
# four 16-byte loads of x in flight a thread; count_kernel<false> (outside validation mode) has
# no scan of x, so its code and spills stay as they were (ptxas: 12/44 bytes; <true> 48/92).
# B = this tree with runM-count-kernel-validate.patch reversed (main caa56a8's kernels).
# Predicted: the validated 4096-token fp8 dispatch from 340 us (run K) to about 150 us (run L:
# the scan waits on its loads, 75% of the samples, DRAM 15% busy; four times the loads in flight
# should take the scan from ~270 us to ~70-90); unvalidated dispatch unchanged.
#   bash docs/results/v35-one-h200/runM.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/B && tar -c $SRC | tar -x -C tmp-gpu/B
(cd tmp-gpu/B && patch -p1 -R -s < ../../docs/results/v35-one-h200/runM-count-kernel-validate.patch) || echo "reverse patch failed"
(cd tmp-gpu/B && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 && cmake --build build/gpu -j6 --target moe-ep > $OUT/build-B.log 2>&1 || echo "build B failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
cmake --build build/gpu -j10 --target moe-ep test_gpu_policy test_gpu_backend test_gpu_nodes > $OUT/build.log 2>&1 || { echo "build failed"; grep -B2 -A10 error $OUT/build.log | head -30; }
wait
t built
V="bench --backend cuda --ranks 1 --num-sms 32 --tokens 4096 --dispatch-dtype bf16,fp8 --combine-dtype bf16 --iters 20 --warmup 3"
for r in 1 2; do for v in tmp-gpu/B .; do echo "== $v validated"; MOE_EP_VALIDATE=1 timeout 40 $v/build/gpu/tools/moe-ep $V; done; done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench.log
t validated
MOE_EP_TIMEOUT_S=10 timeout $(( 215 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 60 -R 'GpuPolicy|GpuBackend|GpuNodes' > $OUT/ctest.log 2>&1
echo "ctest rc $?"; grep -E "tests passed|Failed|\*\*\*|Total Test" $OUT/ctest.log | head -20
t ctest
for v in tmp-gpu/B .; do echo "== $v"; timeout 30 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --num-sms 32 --tokens 128,4096 --dispatch-dtype bf16,fp8 --combine-dtype bf16 --iters 20 --warmup 3; done >> $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench.log | tail -14
t end
