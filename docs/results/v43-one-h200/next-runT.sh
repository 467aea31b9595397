#!/bin/bash
# Prepared in v43, NOT RUN YET: where G's one-token cost goes (v43: G, the rows before the
# step's verdict, is up to 1.1 us slower than v42's send at one token, bf16 and fp8), and one
# candidate fix. Trees:
#   G  this tree (v43)
#   V  v42's code (git archive f332c15)
#   S  G + next-slots-a-thread.patch: the slots of sent_calls stored a slot a thread (G has
#      thread 0 store every slot of a larger grid in a loop: 32-64 serial stores before its
#      block's fence in a one-token send, which has one block; predicted 0.1-0.4 us off the
#      one-token dispatch, nothing at 128 and 256 tokens, where each block stores 1-2 slots)
# Part 1, the trace: each tree + v40's decode trace (next-trace-G.patch / next-trace-v42.patch:
# each decode kernel's first block entry and last block exit, %globaltimer, a ring of 32
# launches printed once a process), at 1 and 128 tokens, fp8 and bf16 dispatch with a bf16
# combine, one configuration a process, two rounds; trace_chain.py gives the medians of step
# end, send start and end, expand end and combine end from the step's entry. The probe adds
# spills to the kernels it stamps: compare the trees, not these times with the bench's.
# Part 2, without the trace: the decode bench G / S alternating, 3 rounds, then S's decode tests.
# If S wins at one token and loses nothing elsewhere: apply the patch, run the whole GPU suite.
#   bash docs/results/v43-one-h200/next-runT.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
TESTS="test_gpu_low_latency test_gpu_agreement test_gpu_low_latency_shapes test_gpu_late_rank test_gpu_timeouts test_gpu_low_latency_nodes"
R=docs/results/v43-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu
tree() {  # name source patches...
  local name=$1 src=$2; shift 2
  mkdir -p tmp-gpu/$name
  if [ $src = HEAD ]; then tar -c $SRC | tar -x -C tmp-gpu/$name; else git archive $src $SRC | tar -x -C tmp-gpu/$name; fi
  for p in "$@"; do (cd tmp-gpu/$name && patch -p1 -s < ../../$p) || echo "patch $p on $name failed"; done
}
build() {  # name targets jobs
  (cd tmp-gpu/$1 && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
    cmake --build build/gpu -j$3 --target $2 > ../build-$1.log 2>&1 || echo "build $1 failed")
}
tree TG HEAD $R/next-trace-G.patch
tree TV f332c15 $R/next-trace-v42.patch
tree TS HEAD $R/next-slots-a-thread.patch $R/next-trace-G.patch
tree S HEAD $R/next-slots-a-thread.patch
build TG moe-ep 3 & build TV moe-ep 3 & build TS moe-ep 3 & build S "moe-ep $TESTS" 7 &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
wait
cmake --build build/gpu -j16 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
for v in TG TV TS S; do echo "== $v" >> $OUT/build.log; tail -2 tmp-gpu/build-$v.log >> $OUT/build.log; done
grep -B1 -A3 "failed\|error" $OUT/build.log | head -20
t built
for r in 1 2; do for v in TG TV TS; do for tok in 1 128; do for d in fp8 bf16; do
  echo "== $v $tok $d round $r"
  timeout 60 tmp-gpu/$v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode \
    --tokens $tok --dispatch-dtype $d --combine-dtype bf16 --iters 200 --warmup 20
done; done; done; done > $OUT/trace.log 2>&1
grep -E "wrong|rror" $OUT/trace.log | sort | uniq -c
python3 $R/trace_chain.py $OUT/trace.log
t trace
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --combine-dtype bf16"
for r in 1 2 3; do for v in . tmp-gpu/S; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B --dispatch-dtype all
done; done > $OUT/decode.log 2>&1
grep -E "^==|^ +[0-9]+ +[a-z0-9]+ +[a-z0-9_]+ +[0-9]|wrong|rror" $OUT/decode.log | awk '/^ +[0-9]/{print $1, $2, $4, $5, $NF; next} {print}'
t bench
for b in $TESTS; do
  left=$(( 585 - $(date +%s) + T0 )); [ $left -lt 20 ] && { echo "$b: no time left"; continue; }
  BT=$(find tmp-gpu/S/build/gpu -name $b -type f | head -1)
  MOE_EP_TIMEOUT_S=10 timeout $left $BT >> $OUT/tests-S.log 2>&1; echo "$b rc $?"
done
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests-S.log | head -20
t end
