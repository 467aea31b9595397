#!/bin/bash
# v40 run M: run L's probe (count-trace2.patch) with host-trace.patch as well: the host clock
# (system_clock, epoch ns) at the dispatch call's entry, before and after count_kernel's launch,
# after the other launches, after the host's wait for num_recv and at its return, for the calls
# of steps 25 to 39 (printed at step 41). The host clock and %globaltimer turned out not to be
# aligned (the host's entry read 50 us after count_kernel's first block), so only the host's
# intervals are used. fp8 -> bf16 at 128 / 4096 tokens, 32 SMs.
#   bash docs/results/v40-one-h200/runM.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/T && tar -c $SRC | tar -x -C tmp-gpu/T
cd tmp-gpu/T && patch -p1 -s < ../../docs/results/v40-one-h200/count-trace2.patch && patch -p1 -s < ../../docs/results/v40-one-h200/host-trace.patch &&
  cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j16 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
cd ../..
t built
for tok in 128 4096; do for dt in fp8; do
  B="bench --backend cuda --ranks 1 --tokens $tok --num-sms 32 --dispatch-dtype $dt --combine-dtype bf16 --iters 20 --warmup 3"
  echo "== T $tok $dt"; timeout 60 tmp-gpu/T/build/gpu/tools/moe-ep $B
done; done > $OUT/trace.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror|^CT3[35] stamp|^DT|^HT|^CT step" $OUT/trace.log | cut -c1-250
t end
