#!/bin/bash
# run 3 (session 26): + local memory reserved at preload
set -u
T0=$(date +%s)
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
nvidia-smi -L > $OUT/head.txt
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) > $OUT/configure.log 2>&1
cmake --build build/gpu -j16 > $OUT/build.log 2>&1 || { tail -50 $OUT/build.log; exit 1; }
echo "build done at $(( $(date +%s) - T0 )) s"
MOE_EP_LOG=debug build/gpu/tests/test_gpu_world --gtest_filter='Ranks/SingleGpuWorld.PrequantizedInputEqualsTheReference/W2' 2>&1 | grep -E "local memory|PASSED|FAILED" | head -5 | tee $OUT/local-memory-debug.log
ctest --test-dir build/gpu -R 'PrequantizedInputEqualsTheReference|RejectedCreationWithALateRank|DecodeAcrossNodesIsCreated' --repeat until-fail:4 --output-on-failure --timeout 70 > $OUT/ctest-prequantized-repeat.log 2>&1
grep -E "tests passed|Total Test time" $OUT/ctest-prequantized-repeat.log; grep -E "\*\*\*" $OUT/ctest-prequantized-repeat.log | head
echo "repeats done at $(( $(date +%s) - T0 )) s"
build/gpu/tools/moe-ep bench --mode decode --backend cuda --ranks 1 --tokens 1,128 --iters 50 --warmup 10 > $OUT/bench-decode-w1.log 2>&1
grep -E "^ +(1|128) fp8 +bf16|wrong" $OUT/bench-decode-w1.log
echo "decode bench done at $(( $(date +%s) - T0 )) s"
build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --num-sms 32 --iters 10 --warmup 2 > $OUT/bench-w1-32sms.log 2>&1
tail -14 $OUT/bench-w1-32sms.log
echo "end at $(( $(date +%s) - T0 )) s"
