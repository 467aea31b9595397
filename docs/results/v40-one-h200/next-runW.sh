#!/bin/bash
# Prepared in v40, NOT RUN YET: run L again with one more stamp (next-count-trace3.patch = run L's
# count-trace2.patch and stamp 215, thread 0's first loaded id in hand in the sender's flags of
# destination 0): do the 2.0-2.3 us of 128 tokens' flags wait for the ids' loads (215 late) or
# for code (215 early, 211 late)? Run L's stamps: inside
# count_kernel the last scan share's step (after its counter, after step_block, before the step
# word's release), sender part 0 (after its zeroing, flags, scan, positions, publish or its
# parts counter), the last part's look-back, the receiver (after the count words, the expert
# words, before and after the system fence behind num_recv); in dispatch_kernel its grid-wide
# end inlined with stamps (system fence, counter atomic, device fence, release stores).
# fp8 and bf16 -> bf16 at 128 tokens, 32 SMs. About 1 minute.
#   bash docs/results/v40-one-h200/next-runW.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/T && tar -c $SRC | tar -x -C tmp-gpu/T
cd tmp-gpu/T && patch -p1 -s < ../../docs/results/v40-one-h200/next-count-trace3.patch &&
  cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j16 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
cd ../..
t built
for tok in 128; do for dt in fp8 bf16; do
  B="bench --backend cuda --ranks 1 --tokens $tok --num-sms 32 --dispatch-dtype $dt --combine-dtype bf16 --iters 20 --warmup 3"
  echo "== T $tok $dt"; timeout 60 tmp-gpu/T/build/gpu/tools/moe-ep $B
done; done > $OUT/trace.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror|^CT3[35] stamp|^DT" $OUT/trace.log | cut -c1-250
t end
