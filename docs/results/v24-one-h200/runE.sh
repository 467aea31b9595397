#!/bin/bash
# run E (session 30): wip/grid-end merged with main (./), against main (tmp-gpu/main), the branch
# without the redux amax (tmp-gpu/noredux) and without the one-fence grid end (tmp-gpu/nofence).
# ncu per kernel (clocks locked), then timed benches alternating main and the branch.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
for d in . tmp-gpu/main tmp-gpu/noredux tmp-gpu/nofence; do
  (cd $d && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 && cmake --build build/gpu -j5 --target moe-ep > build.log 2>&1 || tail -30 build.log) &
done
wait
t build done
declare -A M=([B]=build/gpu/tools/moe-ep [A]=tmp-gpu/main/build/gpu/tools/moe-ep [C]=tmp-gpu/noredux/build/gpu/tools/moe-ep [D]=tmp-gpu/nofence/build/gpu/tools/moe-ep)
ls -la ${M[@]} | awk '{print $5, $9}'
S="--print-summary per-kernel"
N="bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check"
g() { grep -E "^==|^  [a-zA-Z_v].*\(|    Duration" "$@"; }
{
for v in A B; do
  echo "== $v normal bf16/bf16 128"; timeout 40 ncu $S ${M[$v]} $N --dispatch-dtype bf16 --combine-dtype bf16 --tokens 128
  echo "== $v decode fp8/bf16 128"; timeout 40 ncu $S ${M[$v]} $N --dispatch-dtype fp8 --combine-dtype bf16 --mode decode --tokens 128
  echo "== $v decode fp8/bf16 1"; timeout 40 ncu $S ${M[$v]} $N --dispatch-dtype fp8 --combine-dtype bf16 --mode decode --tokens 1
done
for v in A B C; do
  echo "== $v decode fp8/fp8 combine 1"; timeout 30 ncu $S -k regex:ll_combine ${M[$v]} $N --dispatch-dtype fp8 --combine-dtype fp8 --mode decode --tokens 1
  echo "== $v decode fp8/fp8 combine 128"; timeout 30 ncu $S -k regex:ll_combine ${M[$v]} $N --dispatch-dtype fp8 --combine-dtype fp8 --mode decode --tokens 128
  echo "== $v normal fp8 dispatch 4096"; timeout 30 ncu $S -k regex:dispatch_kernel ${M[$v]} $N --dispatch-dtype fp8 --combine-dtype bf16 --tokens 4096
  echo "== $v normal fp8 combine 4096"; timeout 30 ncu $S -k regex:combine_kernel ${M[$v]} $N --dispatch-dtype bf16 --combine-dtype fp8 --tokens 4096
done
for v in B D; do
  echo "== $v decode send 1"; timeout 30 ncu $S -k regex:ll_send ${M[$v]} $N --dispatch-dtype fp8 --combine-dtype bf16 --mode decode --tokens 1
done
} > $OUT/ncu.log 2>&1
g $OUT/ncu.log
t ncu done
{
for r in 1 2; do for v in A B; do
  echo "== $v round $r decode"; timeout 40 ${M[$v]} bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20
done; done
for v in C D; do
  echo "== $v decode"; timeout 40 ${M[$v]} bench --backend cuda --ranks 1 --mode decode --tokens 1,128 --dispatch-dtype fp8 --combine-dtype fp8 --iters 200 --warmup 20
done
echo "== B decode fp8/fp8"; timeout 40 ${M[B]} bench --backend cuda --ranks 1 --mode decode --tokens 1,128 --dispatch-dtype fp8 --combine-dtype fp8 --iters 200 --warmup 20
for v in A B; do
  echo "== $v normal all pairs"; timeout 90 ${M[$v]} bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype all --combine-dtype all --iters 50 --warmup 5
done
echo "== B decode all pairs checked"; timeout 90 ${M[B]} bench --backend cuda --ranks 1 --mode decode --tokens 1,128,256 --dispatch-dtype all --combine-dtype all --iters 20 --warmup 5
} > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t end
