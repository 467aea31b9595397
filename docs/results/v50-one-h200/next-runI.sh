#!/bin/bash
# Prepared in v50 (no GPU that session), NOT RUN YET (one H200, about 8 minutes). Run it before
# v49's next-runH.sh: its tests are the first GPU run of v50's main.
# B = main + next-by-warp.patch: at world size 1 the decode combine's launch has reduces only and
# none waits for anything, so a kernel of its own (ll_combine_kernel<F, true, true>) gives warp w
# items w, w + n, ... instead of tickets: no add on tickets[0] before each warp's item (a round
# trip, every warp at once on one word) and no acquire-release count on tickets[1] at its end.
# ptxas: the new instantiations spill nothing, the others as main. Predicted: every decode
# combine 0.3-0.9 us faster at 1-256 tokens (v36 run Q took one of the ticket round trips out
# for 0.2-0.5 us), dispatches level.
# 1. Decode bench main / B, 3 rounds, fp8 dispatch, bf16 and fp8 combines.
# 2. The decode GPU tests on B: v50's work items (low_latency_items.h) and by-warp items, and the
#    new world-size-1 tests (Ranks/GpuLowLatency.AllDtypePairsEqualTheReference/W1,
#    GpuLowLatencyWorldOfOne.OneSmBudgetTakesEveryItem: 8 items a warp,
#    GpuLowLatencyGraph...AtWorldSize1).
# 3. (Added in v51, after column_major_scales landed; runs after the tests, in the time left.)
#    The decode bench on main with and
#    without --column-major-scales, fp8 dispatch / bf16 combine, 3 rounds: the cost of storing
#    each fp32 scale to its own column (56 scattered 4-byte stores per received (token, expert)
#    instead of 224 contiguous bytes). Predicted: dispatch +0.2-1 us at 128-256 tokens, level at
#    1; combine level. The ctest of step 2 also runs GpuLowLatencyColumnScales.EqualTheReference
#    and the python_gpu set runs test_gpu_decode_scale_layout.py, both new in v51, and
#    GpuOpMemory.CreationAllocatesWhatOpMemorySaid (v51: a creation's pool bytes against
#    op_memory, which also covers the constructor's allocations moved into one list). v52 adds
#    GpuCapture.* (tests/test_gpu_capture.cc: normal-mode calls inside a capture refused, a
#    decode reject inside one raising its reason, a captured decode op kept by OpCache past its
#    eviction and its graph replayed) and, in python_gpu's
#    test_gpu_single_gpu_world.py, a normal-mode dispatch inside torch.cuda.graph.
#   bash docs/results/v50-one-h200/next-runI.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v50-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu/B && tar -c $SRC | tar -x -C tmp-gpu/B
(cd tmp-gpu/B && patch -p1 -s < ../../$R/next-by-warp.patch) || exit 1
(cd tmp-gpu/B && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j12 > ../build-B.log 2>&1 || echo "build B failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j4 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
tail -n 2 tmp-gpu/build-B.log >> $OUT/build.log
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16,fp8"
for r in 1 2 3; do for v in . tmp-gpu/B; do
  echo "== $v round $r"; timeout 60 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $((480 - $(date +%s) + T0)) ctest --test-dir tmp-gpu/B/build/gpu -L gpu \
  -R 'LowLatency|LateRank|OpMemory|GpuCapture|python_gpu' --output-on-failure --timeout 120 > $OUT/tests.log 2>&1
echo "ctest decode rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/tests.log | head -30
# 3. Last, in what time is left (the tests come first): rows against columns.
C="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16"
timeout $((585 - $(date +%s) + T0)) bash -c "for r in 1 2 3; do
  echo \"== rows round \$r\"; timeout 60 ./build/gpu/tools/moe-ep $C
  echo \"== columns round \$r\"; timeout 60 ./build/gpu/tools/moe-ep $C --column-major-scales
done" > $OUT/columns.log 2>&1
grep -E "wrong|rror" $OUT/columns.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/columns.log
t columns
t end
