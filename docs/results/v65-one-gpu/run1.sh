#!/bin/bash
# v65 (prepared in v64), one GPU, about 7 minutes:
#   M   = main (v64: S and W2 merged)
#   E   = main + ready-early.patch: v64's R (the data kernel waits for count_kernel's ready word,
#         which the receiver releases once every sender ticket's word and send_offset are in,
#         not for count_kernel's end; griddepcontrol.wait last) and the receiver's block letting
#         the data kernel launch once it has seen the step, before its own work. R alone lost
#         0.4-1.4 us in v64 (the data grid still launched only after the receiver's end, the
#         guess). Predicted: 0.5-1.5 us off every dispatch (the data grid's launch, about 1 us
#         after the trigger in v64's points, overlaps the receiver's 1.1-2.3 us).
#   EN  = E without the data kernel's last griddepcontrol.wait (v64's probe: later work waits for
#         every earlier kernel anyway). Predicted: level with E or slightly faster.
#   F   = main + fused-wait.patch: no wait kernel on one node's SM path; the last of the data
#         kernel's blocks (the one whose add completes this rank's own done count) waits for
#         every source's count and clears it, and the data kernel lets nothing launch early (that
#         block waits on peers). v64's points: the wait kernel ended 0.9 us after its poll passed.
#         Predicted: 0.3-1 us off every dispatch (one launch and one kernel's end fewer).
#   C   = main + count-trace.patch (v59's points on today's main; wait point 0 is now "every done
#         count in", since W2 the wait kernel does not wait for the data kernel), and
#   CEN = EN + the same points (count-trace-ready.patch; dispatch point 0 is "past the ready
#         word"): where the data kernel's launch goes with the early trigger.
# 1. M against E, EN and F: normal mode at 32 SMs, 128 / 1024 / 4096 tokens, bf16 and fp8 dispatch
#    with a bf16 combine, alternating, ROUNDS rounds (default 3).
# 2. C and CEN: fp8 dispatch with a bf16 combine at 128 and 4096 tokens, 2 rounds, read by
#    v59's count_points.py.
#   bash docs/results/v65-one-gpu/run1.sh   (logs: $OUT)
# Then the tests of a winner: bash docs/results/v65-one-gpu/test-patch.sh fused-wait.patch
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
V=docs/results/v65-one-gpu
rm -rf tmp-gpu && mkdir -p tmp-gpu
for v in E EN F C CEN; do mkdir -p tmp-gpu/$v && tar -c $SRC | tar -x -C tmp-gpu/$v; done
(cd tmp-gpu/E && patch -p1 -s < ../../$V/ready-early.patch) || exit 1
(cd tmp-gpu/EN && patch -p1 -s < ../../$V/ready-early-nowait.patch) || exit 1
(cd tmp-gpu/F && patch -p1 -s < ../../$V/fused-wait.patch) || exit 1
(cd tmp-gpu/C && patch -p1 -s < ../../$V/count-trace.patch) || exit 1
(cd tmp-gpu/CEN && patch -p1 -s < ../../$V/count-trace-ready.patch) || exit 1
for v in M E EN F C CEN; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  (cd $b && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j3 --target moe-ep > $OUT/build-$v.log 2>&1 &&
    rm $OUT/build-$v.log) || echo "build $v failed" &
done
wait
t built
B="bench --backend cuda --ranks 1 --tokens 128,1024,4096 --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype bf16,fp8 --combine-dtype bf16"
for r in $(seq ${ROUNDS:-3}); do for v in M E EN F; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  echo "== $v round $r"; timeout 60 $b/build/gpu/tools/moe-ep $B
done; done > $OUT/normal.log 2>&1
grep -E "wrong|rror" $OUT/normal.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal.log | tee $OUT/run.txt
t bench
for v in C CEN; do for r in 1 2; do for tok in 128 4096; do
  echo "== $v $tok fp8 round $r"
  timeout 60 tmp-gpu/$v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --tokens $tok \
    --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype fp8 --combine-dtype bf16
done; done; done > $OUT/trace.log 2>&1
grep -E "wrong|rror" $OUT/trace.log | sort | uniq -c
python3 docs/results/v59-one-gpu/count_points.py $OUT/trace.log | tee $OUT/points.txt
t end
