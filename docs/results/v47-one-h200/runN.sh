#!/bin/bash
# v47 run N (prepared in v46 as next-runN.sh; about 3 min, one H200): each decode kernel's own duration at
# world size 1, with the clocks and caches as the bench has them (ncu --clock-control none
# --cache-control none; v35 run J's ncu locked the clocks at base and flushed the caches, where a
# 64-thread step kernel that does nothing at world size 1 took 3.2-3.5 us), at 1 and 128 tokens,
# fp8 dispatch and bf16 combine. ncu serializes the kernels (no programmatic launch overlap), so
# the sum runs above the 18.3 / 27.5 us rounds of v46 run F; v46 run X2's five empty kernels
# took 2.6-2.9 us a round. Which kernel holds the 15 us of work a round is what this answers.
#   bash docs/results/v47-one-h200/runN.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3) \
  > /dev/null 2>&1
cmake --build build/gpu -j16 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
M=build/gpu/tools/moe-ep
for tok in 1 128; do
  D="bench --backend cuda --ranks 1 --mode decode --tokens $tok --iters 10 --warmup 2 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16"
  # The checked run's host calls and the warm-up replays first (5 kernels a round): the last 20
  # launches are 4 timed rounds' kernels.
  timeout 150 ncu --clock-control none --cache-control none -k regex:'ll_' \
    --metrics gpu__time_duration.sum,sm__cycles_active.max,smsp__inst_executed.sum,launch__grid_size \
    --launch-skip 40 --launch-count 20 --csv $M $D > $OUT/ncu-t$tok.csv 2> $OUT/ncu-t$tok.err
  echo "ncu $tok tokens rc $?"
  python3 - "$OUT/ncu-t$tok.csv" <<'PY'
import csv, collections, statistics, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
k, m, u, v = (head.index(c) for c in ("Kernel Name", "Metric Name", "Metric Unit", "Metric Value"))
seen = collections.defaultdict(list)
for r in rows[1:]:
    seen[(r[k].split("(")[0][-60:], r[m], r[u])].append(float(r[v].replace(",", "")))
for (name, metric, unit), xs in sorted(seen.items()):
    print(f"{name:60s} {metric:28s} {unit:8s} median {statistics.median(xs):12.1f}  n={len(xs)}")
PY
done
t end
