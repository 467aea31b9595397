#!/bin/bash
# Prepared in v44, NOT RUN YET: the whole-slice dispatch's store offsets in unsigned arithmetic
# (next-dispatch-unsigned.patch, tree D). v29 run B counted about 40 instructions a slice of the
# mxfp4 kernel on signed-division fix-ups and sign extensions of the store offsets (v44's SASS of
# main, cuobjdump in run A: 35 between the slice's encode and its destination loop, then 8 sign
# extensions); unsigned, they are shifts. Predicted: 20-30 fewer SASS instructions a slice for
# mxfp4 (about 5% of its 442), fewer for fp8 (its payload offset needs no division); at 4096 tokens
# and 32 SMs, where the data kernels issue in 58-60% of their cycles, 1-3 us off mxfp4's dispatch
# and up to 1 us off fp8's. ptxas: same registers and no spills; the PTX of the mxfp4 kernel 16
# instructions shorter, fp8's 30 longer (split stores?), so the SASS counts decide.
# 1. SASS of both trees' whole-slice kernels (instructions in the kernel, and per opcode).
# 2. Bench main / D alternating, 3 rounds, 128 and 4096 tokens, 32 SMs.
# 3. D's tests: test_gpu_backend, test_gpu_fast_codecs, test_gpu_world (bit-exact against the CPU).
#   bash docs/results/v44-one-h200/next-runD.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
TESTS="test_gpu_backend test_gpu_fast_codecs test_gpu_world"
rm -rf tmp-gpu && mkdir -p tmp-gpu/D && tar -c $SRC | tar -x -C tmp-gpu/D
(cd tmp-gpu/D && patch -p1 -s < ../../docs/results/v44-one-h200/next-dispatch-unsigned.patch) || exit 1
(cd tmp-gpu/D && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j10 --target moe-ep $TESTS > ../build-D.log 2>&1 || echo "build D failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j6 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
tail -3 tmp-gpu/build-D.log >> $OUT/build.log
t built
for v in . tmp-gpu/D; do
  O=$(find $v/build/gpu -name 'dispatch.cu.o' | head -1)
  echo "== $v"
  cuobjdump -sass "$O" | python3 -c '
import re, sys, collections
name = None; ops = collections.defaultdict(collections.Counter)
for l in sys.stdin:
    m = re.search(r"Function : (\S+)", l)
    if m: name = m.group(1); continue
    m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", l)
    if m and name and "ELb0ELb0ELb1" in name: ops[name][m.group(1)] += 1
for n, c in ops.items():
    print(n[-70:], sum(c.values()), "instructions;", ", ".join(f"{k} {v}" for k, v in c.most_common(12)))
'
done > $OUT/sass.txt 2>&1
cat $OUT/sass.txt
B="bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype fp8,fp4 --combine-dtype bf16 --iters 100 --warmup 10"
for r in 1 2 3; do for v in . tmp-gpu/D; do
  echo "== $v round $r"; timeout 120 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/bench.log 2>&1
grep -E "wrong|rror" $OUT/bench.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/bench.log
t bench
for b in $TESTS; do
  left=$(( 585 - $(date +%s) + T0 )); [ $left -lt 20 ] && { echo "$b: no time left"; continue; }
  BT=$(find tmp-gpu/D/build/gpu -name $b -type f | head -1)
  echo "== $b" >> $OUT/tests.log
  MOE_EP_TIMEOUT_S=10 timeout $left $BT >> $OUT/tests.log 2>&1; echo "$b rc $?"
done
grep -E "^== |^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log | head -30
t end
