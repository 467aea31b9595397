#!/bin/bash
# Prepared in v45, NOT RUN YET: moe-ep-latency-floor (tools/latency_floor/), what the steps of a
# decode chain cost on one H200. v45 run P's points put 0.5-2.4 us between consecutive steps of a
# one-token dispatch at 1980 MHz (run K), and run M moved 2.4 us of them out of the send for no
# gain; this counts each kind of step alone (loads, fences, releases, barriers, a signal between
# SMs, cold code, kernel boundaries with and without programmatic launch, in a stream and in a
# graph), so that the next change to the chain rests on measured steps. Two runs of 256-op chains
# and one of 1024, 9 reps each (about 30 s), then the tool's own GPU test, then the size of each
# decode kernel's code (cuobjdump; 16 bytes an instruction), to read the cold-code rows against.
#   bash docs/results/v45-one-h200/next-runL.sh      (logs to $OUT)
set -u
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j16 --target moe-ep-latency-floor > $OUT/build-L.log 2>&1 || { tail -30 $OUT/build-L.log; exit 1; }
L=$(find build/gpu -name moe-ep-latency-floor -type f | head -1)
{ $L --reps 9 --chain 256; echo "rc $?"; $L --reps 9 --chain 256; echo "rc $?"
  $L --reps 9 --chain 1024; echo "rc $?"; } > $OUT/latency.log 2>&1
cat $OUT/latency.log
ctest --test-dir build/gpu -R latency_floor --output-on-failure 2>&1 | tail -5
cmake --build build/gpu -j16 --target moe_ep > $OUT/build-lib.log 2>&1 || { tail -30 $OUT/build-lib.log; exit 1; }
O=$(find build/gpu -name 'low_latency.cu.o' | head -1)
cuobjdump -sass "$O" | python3 -c '
import re, sys, collections
n = collections.Counter(); name = None
for l in sys.stdin:
    m = re.search(r"Function : (\S+)", l)
    if m: name = m.group(1); continue
    if name and re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+\S", l): n[name] += 1
for k, v in sorted(n.items(), key=lambda kv: -kv[1]):
    print(f"{v:7d} instructions {v * 16 / 1024:7.1f} KiB  {k[:110]}")
' > $OUT/decode-code-sizes.txt 2>&1
head -40 $OUT/decode-code-sizes.txt
