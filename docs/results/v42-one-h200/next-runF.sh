#!/bin/bash
# Prepared in v42 for the next session, NOT RUN YET. F = main + next-ll-early-rows.patch: one
# node's decode send stores its rows before the step kernel's verdict. The step kernel of a
# one-node dispatch stores the number the call takes if it runs (LowLatencyState::send_call) and
# fences it before letting the send launch; the send loads and encodes its row items and stores
# them at once into the stage of that number's parity (the stage is now [2][W][Tmax] rows), then
# waits for the step kernel, and only then (the call ran, and ran under that number: else
# kDevSendCall, an internal error) stores the counts, flags and metadata and adds its done
# counts. A call that did not run leaves its rows in a stage no expand reads. The expand reads
# the stage of dispatch_calls' parity (several nodes: parity 0, unchanged order). ptxas: no
# spills (ll_send one node: mxfp4 62 -> 64 registers, fp8 62, bf16 62 -> 60).
# v40 run R: the send ends 5.5-6 us after the step kernel at 128 tokens (about 1 us less since
# v42's done counts); the rows' stores, issued after the step today, overlap its ranks here (and
# at W >= 2 its exchange). Predicted at world size 1: 0.3-1.0 us off each decode dispatch at 1 to
# 128 tokens, 1-2 us at 256; the combine level.
# Bench main / F alternating, 3 rounds, --decode-graph round; then world_decode_time.py (this
# folder) main / F alternating, 2 rounds, at W = 2 in the one-GPU world (the two ranks share the
# GPU: only the difference between the trees means something; there the step's exchange is a
# real wait, which F's rows overlap too); then F's decode GPU tests (W = 1 and the one-GPU
# world's W = 2/4/8, rejections on one rank, late rank, timeouts, nodes) within the call's 600 s.
#   bash docs/results/v42-one-h200/next-runF.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
TESTS="test_layout test_gpu_low_latency test_gpu_agreement test_gpu_low_latency_shapes test_gpu_late_rank test_gpu_timeouts test_gpu_low_latency_nodes"
rm -rf tmp-gpu && mkdir -p tmp-gpu/F && tar -c $SRC | tar -x -C tmp-gpu/F
(cd tmp-gpu/F && patch -p1 -s < ../../docs/results/v42-one-h200/next-ll-early-rows.patch &&
  cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j10 --target moe-ep moe_ep_python $TESTS > $OUT/build-F.log 2>&1 || echo "build F failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j6 --target moe-ep moe_ep_python > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
cat $OUT/build-F.log >> $OUT/build.log; rm -f $OUT/build-F.log
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --combine-dtype bf16"
for r in 1 2 3; do for v in . tmp-gpu/F; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B --dispatch-dtype all
done; done > $OUT/decode.log 2>&1
grep -E "^==|^ +[0-9]+ +[a-z0-9]+ +[a-z0-9_]+ +[0-9]|wrong|rror" $OUT/decode.log | awk '/^ +[0-9]/{print $1, $2, $3, $4, $5, $NF; next} {print}'
t bench
for r in 1 2; do for v in . tmp-gpu/F; do
  echo "== $v round $r"
  PYTHONPATH=$v/build/gpu/python timeout 90 python3 docs/results/v42-one-h200/world_decode_time.py --ranks 2 --tokens 128
done; done > $OUT/world.log 2>&1
cat $OUT/world.log
t world
for b in $TESTS; do
  left=$(( 585 - $(date +%s) + T0 )); [ $left -lt 20 ] && { echo "$b: no time left"; continue; }
  BT=$(find tmp-gpu/F/build/gpu -name $b -type f | head -1)
  MOE_EP_TIMEOUT_S=10 timeout $left $BT >> $OUT/tests-F.log 2>&1; echo "$b rc $?"
done
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests-F.log | head -20
t end
