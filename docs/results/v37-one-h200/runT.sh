#!/bin/bash
# v37 run T: W = the working tree, the combine's L2 prefetch of own-only rows only where the
# grid's rows in flight take at most a third of L2 (combine_prefetch_bytes, policy.h: on the
# H200 at 4096 tokens of hidden 7168, up to 45 SMs); M = git archive HEAD on the device
# (0d838a8, prefetch always); N = M with no-prefetch.patch (never). Run R measured M against N at
# 32 / 64 / 132 SMs (N 4-9 us slower at 32, faster at 64 and 132).
#   1. where the sides cross: M and N at 40 / 44 / 48 / 56 SMs, bf16 / fp8 / int8_e3m4 combine,
#      4096 tokens, twice (predicted: M faster up to about 44 SMs, N from about 48);
#   2. W at 32 / 64 / 132 SMs with M at 32 (predicted: W as M at 32, as N at 64 and 132; the
#      int8_e3m4 whole-row kernel spills 48 bytes of loads in W against 32 in M, ptxas);
#   3. SASS of the fp8 blockwise and int8_e3m4 whole-row combine kernels (instruction counts for
#      the next cut), W's GpuBackend selection.
#   bash docs/results/v37-one-h200/runT.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
R=docs/results/v37-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu/M tmp-gpu/N && git archive HEAD | tar -x -C tmp-gpu/M && git archive HEAD | tar -x -C tmp-gpu/N
(cd tmp-gpu/M && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j4 --target moe-ep > $OUT/build-M.log 2>&1 || echo "build M failed") &
(cd tmp-gpu/N && patch -p1 -s < ../../$R/no-prefetch.patch && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j4 --target moe-ep > $OUT/build-N.log 2>&1 || echo "build N failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
cmake --build build/gpu -j8 --target moe-ep test_gpu_backend > $OUT/build-W.log 2>&1 || { echo "build W failed"; grep -B2 -A10 error $OUT/build-W.log | head -40; }
wait
t built
B="bench --backend cuda --ranks 1 --tokens 4096 --dispatch-dtype bf16 --combine-dtype bf16,fp8,int8_e3m4 --iters 20 --warmup 3"
for r in 1 2; do
  for v in tmp-gpu/M tmp-gpu/N; do echo "== $v cross $r"; timeout 60 $v/build/gpu/tools/moe-ep $B --num-sms 40,44,48,56; done
  echo "== W rule $r"; timeout 60 build/gpu/tools/moe-ep $B --num-sms 32,64,132
  echo "== tmp-gpu/M at 32 $r"; timeout 30 tmp-gpu/M/build/gpu/tools/moe-ep $B --num-sms 32
done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench.log
t bench
O=$(find build/gpu -name 'combine.cu.o' | head -1)
cuobjdump -sass $O > tmp-gpu/sass-all.txt 2>&1
for f in 12Fp8BlockWireELb1ELb1 12Int8E3m4WireELb1ELb1; do
  awk -v f="$f" '/Function :/ { on = index($0, f) > 0 } on' tmp-gpu/sass-all.txt
done > $OUT/sass-combine.txt 2>&1
grep "Function :" $OUT/sass-combine.txt; wc -l < $OUT/sass-combine.txt
t sass
BT=$(find build/gpu -name test_gpu_backend -type f | head -1)
MOE_EP_TIMEOUT_S=10 timeout $(( 420 - $(date +%s) + T0 )) $BT --gtest_filter='GpuBackend.OneSm*:GpuBackend.RejectedInput*:GpuBackend.AllPairs*:GpuBackend.OddShapes*' > $OUT/tests.log 2>&1
echo "rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|OK \]" $OUT/tests.log | head -20
t end
