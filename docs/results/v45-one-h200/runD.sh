#!/bin/bash
# v45 run D: v44's next-runD.sh (the whole-slice dispatch's store offsets in unsigned arithmetic,
# next-dispatch-unsigned.patch, tree D) with a third tree, C (v44's next-release-adds.patch: the
# done-count adds as system-scope releases after the block's barrier), in the normal-mode bench:
# run C measured C's decode dispatch 0.3-0.5 us faster, its normal mode only in two noisy rounds.
# 1. SASS of main's and D's whole-slice kernels. 2. Normal-mode bench main / C / D alternating,
# 3 rounds, 128 and 4096 tokens, 32 SMs, bf16 / fp8 / mxfp4 dispatch with a bf16 combine.
# 3. D's tests: test_gpu_backend, test_gpu_fast_codecs, test_gpu_world.
#   bash docs/results/v45-one-h200/runD.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
TESTS="test_gpu_backend test_gpu_fast_codecs test_gpu_world"
rm -rf tmp-gpu && mkdir -p tmp-gpu/D tmp-gpu/C && tar -c $SRC | tar -x -C tmp-gpu/D && tar -c $SRC | tar -x -C tmp-gpu/C
(cd tmp-gpu/C && patch -p1 -s < ../../docs/results/v44-one-h200/next-release-adds.patch) || exit 1
(cd tmp-gpu/D && patch -p1 -s < ../../docs/results/v44-one-h200/next-dispatch-unsigned.patch) || exit 1
(cd tmp-gpu/D && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j8 --target moe-ep $TESTS > ../build-D.log 2>&1 || echo "build D failed") &
(cd tmp-gpu/C && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j4 --target moe-ep > ../build-C.log 2>&1 || echo "build C failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j4 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
tail -n 3 tmp-gpu/build-D.log tmp-gpu/build-C.log >> $OUT/build.log
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
B="bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 100 --warmup 10"
for r in 1 2 3; do for v in . tmp-gpu/C tmp-gpu/D; do
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
