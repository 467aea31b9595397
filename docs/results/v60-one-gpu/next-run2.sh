#!/bin/bash
# v60, one GPU (the bench ran in v62: docs/results/v62-one-gpu): four stacked changes to a
# normal dispatch's count against main.
# Two calls, since both steps together would pass the tool's 10 minutes:
#   TESTS=0 bash docs/results/v60-one-gpu/next-run2.sh    (the bench, about 7 minutes)
#   BENCH=0 bash docs/results/v60-one-gpu/next-run2.sh    (the tests, about 7 minutes)
#   M  = main
#   N  = main + part-experts.patch: notify's parts (1024 tokens: 2, 4096: 8) added their
#        per-expert counts into sums by atomics, fenced, counted themselves finished (an atomic),
#        and the last one fenced again, took the sums by atomic exchanges and published: about
#        three round trips after the last part's scan. In N a lower part stores its counts as
#        words tagged with the step before its scan, and the top part adds them (all loads in
#        flight, one round trip once they are in) after its row prefix, and publishes.
#        Predicted: 0.7-1.5 us off the 1024- and 4096-token dispatches, nothing at 128 tokens.
#   NR = N + receiver-gather.patch: the receiver waited for the W x W count words, then each
#        expert's thread for its W expert words one after another; NR gathers all of them with
#        every load in flight first. Predicted: 0.3-0.7 us off every dispatch at world size 1
#        (two round trips become one); at W = 8 the expert words' 8 serial waits become one.
#   NRP = NR + poll-num-recv.patch: the host recorded an event between count_kernel and the
#        data kernel and waited on it for num_recv. An event there likely holds back the data
#        kernel's programmatic launch (v40: 1.0-1.3 us from count_kernel's end to the data
#        kernel's first block; v46 run L: a kernel boundary 1376-1600 ns in stream order, 480-512
#        with programmatic launch).
#        NRP polls num_recv in mapped memory (the receiver stores it only once every word came
#        in; a failed call's poll ends with the call's event) and records no event there.
#        Predicted: 0.5-1 us off every dispatch.
#   NRPS = NRP + small-count.patch: count_kernel in 512-thread blocks up to 512 tokens (one
#        part), 1024-thread blocks above (v29 run Z: 512-thread blocks took about 1 us off at
#        128 tokens and added 1.5-2 us at 4096). Predicted: 0.5-1 us off at 128 tokens, the
#        rest level.
# 1. Normal mode at 32 SMs, 128 / 1024 / 4096 tokens, bf16 and fp8 dispatch with a bf16 combine,
#    the five trees alternating, 3 rounds (tools/bench_compare.py, M the base).
# 2. Unless TESTS=0: tree $TEST_TREE's (default NRPS) normal-mode GPU tests (agreement, backend
#    with the parts test, nodes, copy engine, the one-GPU world at W = 2/4/8, late ranks,
#    timeouts).
#   [TESTS=0 | BENCH=0] [TEST_TREE=NR] bash docs/results/v60-one-gpu/next-run2.sh   (logs: $OUT)
#   BENCH=0 builds and tests $TEST_TREE alone (16 jobs).
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs/cuda-backend.md"
V=docs/results/v60-one-gpu
TT=${TEST_TREE:-NRPS}
[ "${TESTS:-1}" = 0 ] && TT=none
rm -rf tmp-gpu && mkdir -p tmp-gpu
for v in N NR NRP NRPS; do mkdir -p tmp-gpu/$v && tar -c $SRC | tar -x -C tmp-gpu/$v; done
apply() { (cd tmp-gpu/$1 && for f in ${@:2}; do patch -p1 -s < ../../$V/$f.patch || exit 1; done); }
apply N part-experts || exit 1
apply NR part-experts receiver-gather || exit 1
apply NRP part-experts receiver-gather poll-num-recv || exit 1
apply NRPS part-experts receiver-gather poll-num-recv small-count || exit 1
# RCZ=1: recv-count-zero.patch (decode, independent of the four) on the test tree too, with its tests
if [ "${RCZ:-0}" = 1 ] && [ $TT != none ]; then
  b=tmp-gpu/$TT; [ $TT = M ] && b=.
  (cd $b && patch -p1 -s < $PWD/$V/recv-count-zero.patch) || exit 1
fi
build() {  # tree (. or tmp-gpu/X), name
  local tests=OFF target="--target moe-ep" jobs=3
  [ "$2" = "$TT" ] && { tests=ON; target=; jobs=6; }
  (cd $1 && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=$tests > /dev/null 2>&1 &&
    cmake --build build/gpu -j$jobs $target > $OUT/build-$2.log 2>&1) || echo "build $2 failed"
}
if [ "${BENCH:-1}" = 0 ]; then
  b=tmp-gpu/$TT; [ $TT = M ] && b=.
  (cd $b && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
    cmake --build build/gpu -j16 > $OUT/build-$TT.log 2>&1) || { tail -40 $OUT/build-$TT.log; exit 1; }
else
  build . M & build tmp-gpu/N N & build tmp-gpu/NR NR & build tmp-gpu/NRP NRP &
  build tmp-gpu/NRPS NRPS & wait
fi
t built
B="bench --backend cuda --ranks 1 --tokens 128,1024,4096 --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype bf16,fp8 --combine-dtype bf16"
[ "${BENCH:-1}" = 0 ] && R="" || R="1 2 3"
for r in $R; do for v in M N NR NRP NRPS; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  echo "== $v round $r"; timeout 100 $b/build/gpu/tools/moe-ep $B
done; done > $OUT/normal.log 2>&1
if [ -n "$R" ]; then
  grep -E "wrong|rror" $OUT/normal.log | sort | uniq -c
  python3 tools/bench_compare.py $OUT/normal.log | tee $OUT/run.txt
  t bench
fi
[ $TT = none ] && { t end; exit 0; }
b=tmp-gpu/$TT; [ $TT = M ] && b=.
LL=; [ "${RCZ:-0}" = 1 ] && LL='|GpuLowLatencyScan|GpuLowLatency\.'
[ -n "${MORE_TESTS:-}" ] && LL="$LL|$MORE_TESTS"  # e.g. MORE_TESTS='GpuFormats|GpuFastCodecs'
MOE_EP_TIMEOUT_S=10 timeout 300 ctest --test-dir $b/build/gpu -L gpu \
  -R "GpuAgreement|GpuBackend|GpuNodes|GpuCopyEngine|SingleGpuWorld|GpuLateRank|GpuTimeout$LL" \
  --output-on-failure --timeout 120 > $OUT/tests.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Total Test" $OUT/tests.log
t end
