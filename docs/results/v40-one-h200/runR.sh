#!/bin/bash
# v40 run R: where a decode round trip's time goes. T = main + decode-trace.patch (a probe, not
# for merging): the first block entry and last block exit (%globaltimer) of ll_step, ll_send,
# ll_expand and ll_combine for ten launches each, from graph replays of the decode bench (fp8
# dispatch, bf16 combine) at 1 and at 128 tokens. The probe adds spills to the kernels it stamps.
#   bash docs/results/v40-one-h200/runR.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/T && tar -c $SRC | tar -x -C tmp-gpu/T
cd tmp-gpu/T && patch -p1 -s < ../../docs/results/v40-one-h200/decode-trace.patch &&
  cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j16 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
cd ../..
t built
for tok in 1 128; do
  echo "== T $tok"; timeout 60 tmp-gpu/T/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode \
    --tokens $tok --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20
done > $OUT/trace.log 2>&1
grep -E "^==|^ +[0-9]+ +fp8|wrong|rror" $OUT/trace.log | cut -c1-80
grep -c "^LL" $OUT/trace.log
t end
