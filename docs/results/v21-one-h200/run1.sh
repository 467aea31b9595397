#!/bin/bash
# run 1 (session 27): main (ac3e4d3) as base vs wip/combined (main + ll-send-one-node + normal-pdl)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
nvidia-smi -L > $OUT/head.txt
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG > $OUT/configure.log 2>&1
cmake -S tmp-gpu/base -B tmp-gpu/base/build $CFG > $OUT/configure-base.log 2>&1
cmake --build build/gpu -j10 > $OUT/build.log 2>&1 &
P1=$!
cmake --build tmp-gpu/base/build -j6 --target moe-ep > $OUT/build-base.log 2>&1 &
P2=$!
wait $P1 || { tail -50 $OUT/build.log; exit 1; }
wait $P2 || { tail -50 $OUT/build-base.log; exit 1; }
t build done
ctest --test-dir build/gpu -R GpuMemory --output-on-failure --timeout 60 > $OUT/ctest-memory.log 2>&1
grep -E "tests passed|\*\*\*" $OUT/ctest-memory.log
t memory tests done
for v in base new; do
  B=build/gpu/tools/moe-ep; [ $v = base ] && B=tmp-gpu/base/build/tools/moe-ep
  $B bench --mode decode --backend cuda --ranks 1 --tokens 1,128 --iters 50 --warmup 10 > $OUT/bench-decode-w1-$v.log 2>&1
  echo "== decode $v"; grep -E "^ +(1|128) fp8 +bf16|wrong" $OUT/bench-decode-w1-$v.log
  t decode bench $v done
done
for v in base new; do
  B=build/gpu/tools/moe-ep; [ $v = base ] && B=tmp-gpu/base/build/tools/moe-ep
  $B bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32,132 --iters 20 --warmup 3 > $OUT/bench-normal-w1-$v.log 2>&1
  echo "== normal $v"; tail -40 $OUT/bench-normal-w1-$v.log | grep -E "bf16|fp8|mxfp4|wrong" | head -60
  t normal bench $v done
done
build/gpu/tools/moe-ep-link-floor --gpus 0 --sms 8,16,32,64,132 > $OUT/link-floor-local.log 2>&1
cat $OUT/link-floor-local.log | tail -30
t link floor done
REM=$(( 560 - ($(date +%s) - T0) ))
t "ctest -L gpu with ${REM} s"
MOE_EP_TIMEOUT_S=10 timeout $REM ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 90 > $OUT/ctest-gpu.log 2>&1
grep -E "tests passed|Total Test time|\*\*\*" $OUT/ctest-gpu.log | head -30
tail -3 $OUT/ctest-gpu.log
t end
