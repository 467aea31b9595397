#!/bin/bash
# run F (session 40): three probes against main, decode at world size 1 (one H200, 32 SMs).
#   X: probeX-no-self-exchange.patch: the decode step kernel skips its exchange at world size 1
#      (an upper bound of what the exchange with itself costs; not for main).
#   F: probeF-relaxed-step-word.patch: the step word stored relaxed, no release fence (what the
#      fence costs; correct at world size 1 only, not for main as it is).
#   K: probeK-combine-block-tickets.patch: ll_combine takes its items a block at a time (one
#      atomic a block and chunk), built with the tests, whose decode selection runs on it.
# Bench M X F K twice: --mode decode --tokens 1,32,128,256, fp8 dispatch, bf16 combine.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v34-one-h200
rm -rf tmp-gpu && for v in X F K; do mkdir -p tmp-gpu/$v && tar -c $SRC | tar -x -C tmp-gpu/$v; done
(cd tmp-gpu/X && patch -p1 -s < ../../$R/probeX-no-self-exchange.patch) || echo "X did not apply"
(cd tmp-gpu/F && patch -p1 -s < ../../$R/probeF-relaxed-step-word.patch) || echo "F did not apply"
(cd tmp-gpu/K && patch -p1 -s < ../../$R/probeK-combine-block-tickets.patch) || echo "K did not apply"
b() { (cd $1 && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=$2 > /dev/null 2>&1 &&
  cmake --build build/gpu -j$3 $4 > $OUT/build-$5.log 2>&1 || { echo "build $5 failed"; grep -B2 -A10 error $OUT/build-$5.log | head -40; }); }
b . OFF 3 "--target moe-ep" M & b tmp-gpu/X OFF 3 "--target moe-ep" X & b tmp-gpu/F OFF 3 "--target moe-ep" F & b tmp-gpu/K ON 8 "" K &
wait
t built
for round in 1 2; do
  for v in . tmp-gpu/X tmp-gpu/F tmp-gpu/K; do
    echo "== $v"; timeout 60 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20
  done
done > $OUT/bench-decode.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench-decode.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 580 - $(date +%s) + T0 )) ctest --test-dir tmp-gpu/K/build/gpu -L gpu --output-on-failure --timeout 60 \
  -R 'LowLatency|Scan|Validat|Agreement|Timeout|AllPairs|WorldSizeOne|SingleGpuWorld' > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout" $OUT/ctest.log | head -30
t end
