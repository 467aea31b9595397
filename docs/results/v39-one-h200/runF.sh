#!/bin/bash
# v39 run F. main (M) is v38 + the dispatch half of v38's next-l1-prefetch.patch (run D: the
# dispatch 3-7 us faster at 32 SMs, its combine half 1-2 us slower), now only where a warp takes
# the row's next slice itself (whole rows a warp; ptxas: the same spills as run D's P). Against M,
# three deeper prefetches of the dispatch (patches beside this script): A two slices ahead
# (mxfp4's whole-slice kernel spills 12 bytes, from 0), B the warp's next row's first slice at a
# row's last slice (44 bytes), C both (44). Predicted: A 1-3 us at 32 SMs if the loads' latency
# still bounds the slices (twice the bytes in flight), B and C at most 1 us (one slice in seven),
# less if the spills cost. Then the decode table of every pair on M (no decode kernel changed),
# and M's GpuBackend AllPairs / ExtremeFinite.
#   bash docs/results/v39-one-h200/runF.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
D=docs/results/v39-one-h200
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu
for v in A:dispatch-l1-two-ahead B:dispatch-l1-next-row C:dispatch-l1-two-ahead-next-row; do
  n=${v%%:*}; mkdir -p tmp-gpu/$n && tar -c $SRC | tar -x -C tmp-gpu/$n
  (cd tmp-gpu/$n && patch -p1 -s < ../../$D/${v#*:}.patch && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
    cmake --build build/gpu -j3 --target moe-ep > $OUT/build-$n.log 2>&1 || echo "build $n failed") &
done
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
cmake --build build/gpu -j6 --target moe-ep test_gpu_backend > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
cat $OUT/build-*.log >> $OUT/build.log; rm -f $OUT/build-*.log
t built
B="bench --backend cuda --ranks 1 --tokens 1024,4096 --num-sms 32,132 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 20 --warmup 3"
for r in 1 2; do for v in . tmp-gpu/A tmp-gpu/B tmp-gpu/C; do
  echo "== $v round $r"; timeout 60 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror|tokens [0-9]" $OUT/bench.log | grep -v "^#" | cut -c1-60
t bench
timeout 150 build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode \
  --tokens 1,32,128,256 --iters 200 --warmup 20 > $OUT/decode.log 2>&1
echo "decode rc $?"; grep -E "^ +[0-9]+ +|wrong|rror" $OUT/decode.log | cut -c1-60
t decode
BT=$(find build/gpu -name test_gpu_backend -type f | head -1)
MOE_EP_TIMEOUT_S=10 timeout $(( 590 - $(date +%s) + T0 )) $BT --gtest_filter='GpuBackend.ExtremeFinite*:GpuBackend.AllPairs*' > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests.log
t end
