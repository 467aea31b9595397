#!/bin/bash
# v26 run K (one H200; written in session 31 as v25's next-runK.sh, run in session 32 on main at
# b5ba73a): the run that decided the two patches of v25. Trees under tmp-gpu/ (copies of main's
# source): B = main + untested-whole-slice-dispatch.patch, C = main +
# untested-ll-fused-dispatch.patch (both in docs/results/v25-one-h200/); ./ is main (A). ncu
# (instructions and duration) on the kernels each patch changes, then the benches with the trees
# alternated. Its tests are runL.sh. Usage: bash docs/results/v26-one-h200/runK.sh
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
R=docs/results/v25-one-h200
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
tree() {  # tree NAME PATCH: a copy of the source with PATCH applied
  rm -rf tmp-gpu/$1 && mkdir -p tmp-gpu/$1 &&
    cp -r CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tmp-gpu/$1/ &&
    (cd tmp-gpu/$1 && patch -s -p1 < ../../$R/$2)
}
tree B untested-whole-slice-dispatch.patch || exit 1
tree C untested-ll-fused-dispatch.patch || exit 1
build() { (cd $1 && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j5 --target moe-ep > build.log 2>&1 || { echo "build of $1 failed"; tail -30 build.log; }); }
build . & build tmp-gpu/B & build tmp-gpu/C & wait
t built
A=build/gpu/tools/moe-ep; B=tmp-gpu/B/build/gpu/tools/moe-ep; C=tmp-gpu/C/build/gpu/tools/moe-ep
M="--metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread"
N="bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check --combine-dtype bf16"
D="bench --backend cuda --ranks 1 --mode decode --iters 3 --warmup 1 --no-check --dispatch-dtype fp8 --combine-dtype bf16"
{
for d in fp8 fp4; do for v in $A $B; do
  echo "== $v dispatch $d 4096"; timeout 40 ncu $M -k regex:dispatch_kernel -s 2 -c 3 $v $N --tokens 4096 --dispatch-dtype $d
done; done
for n in 1 128; do for v in $A $C; do
  echo "== $v decode dispatch $n"; timeout 40 ncu --print-summary per-kernel -k regex:'ll_send|ll_expand|ll_dispatch' $v $D --tokens $n
done; done
} > $OUT/ncu.log 2>&1
grep -E "^==|gpu__time|inst_executed|registers|    Duration|^  [a-z_v].*\(" $OUT/ncu.log
t ncu done
{
for v in $A $B $A $B; do
  echo "== $v normal"; timeout 60 $v bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32,132 --dispatch-dtype fp8,fp4 --combine-dtype bf16 --iters 50 --warmup 5
done
for v in $A $C $A $C; do
  echo "== $v decode"; timeout 40 $v bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype fp8,fp4,bf16 --combine-dtype bf16 --iters 200 --warmup 20
done
} > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t end
