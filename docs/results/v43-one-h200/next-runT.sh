#!/bin/bash
# Prepared in v43, NOT RUN YET: where G's one-token cost goes (v43: G, the rows before the
# step's verdict, is up to 1.1 us slower than v42's send at one token, bf16 and fp8). Two trees
# with v40's decode trace (each decode kernel's first block entry and last block exit,
# %globaltimer, launches of a ring of 32 printed once a process):
#   G  this tree (v43) + next-trace-G.patch
#   V  v42's code (git archive f332c15) + next-trace-v42.patch
# Bench at 1 and 128 tokens, fp8 and bf16 dispatch with a bf16 combine, one configuration a
# process (the trace prints once), two rounds alternating; then trace_chain.py gives the medians
# of step end, send start and end, expand end and combine end from the step's entry. The probe
# adds spills to the kernels it stamps: compare the trees, not these times with the bench's.
#   bash docs/results/v43-one-h200/next-runT.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v43-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu/G tmp-gpu/V
tar -c $SRC | tar -x -C tmp-gpu/G
git archive f332c15 $SRC | tar -x -C tmp-gpu/V || { echo "no f332c15 here"; exit 1; }
for v in G V; do
  p=$R/next-trace-G.patch; [ $v = V ] && p=$R/next-trace-v42.patch
  (cd tmp-gpu/$v && patch -p1 -s < ../../$p && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j8 --target moe-ep > ../build-$v.log 2>&1 || echo "build $v failed") &
done
wait
cat tmp-gpu/build-G.log tmp-gpu/build-V.log > $OUT/build.log
t built
for r in 1 2; do for v in G V; do for tok in 1 128; do for d in fp8 bf16; do
  echo "== $v $tok $d round $r"
  timeout 60 tmp-gpu/$v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode \
    --tokens $tok --dispatch-dtype $d --combine-dtype bf16 --iters 200 --warmup 20
done; done; done; done > $OUT/trace.log 2>&1
grep -E "wrong|rror" $OUT/trace.log | sort | uniq -c
python3 $R/trace_chain.py $OUT/trace.log
t end
