#!/bin/bash
# v46 run X1 on nvidia-h200-x2 (two H200s, world size 2 across NVLink), one call of under 10
# minutes, its parts in order of need, each skipped when too little time is left:
#   1. GPU tests at W = 2 on two GPUs (test_gpu_backend, test_gpu_low_latency): the merged flag
#      release (flag-release.patch, R) and the decode combine's acquire-release ticket count (T)
#      across GPUs for the first time.
#   2. moe-ep-link-floor between the GPUs (the NVLink floor a leg is read against).
#   3. The two-GPU decode figures (issue 13): graph replays, 1-256 tokens, every dispatch dtype
#      with a bf16 combine and every combine dtype after an fp8 dispatch.
#   4. R against the tree before it (flag-release.patch reversed), alternating, 3 rounds: the
#      combines that send rows across GPUs (normal mode at 4096 tokens and 32 SMs, decode at 128).
#   5. The SM path against the copy engine at 32 SMs (issue 12 point 5), 4096 then 128 tokens.
#   bash docs/results/v46-two-h200/runX1.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
left() { echo $((570 - $(date +%s) + T0)); }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
nvidia-smi -L
nvidia-smi topo -m | head -4
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v46-two-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu/noR && tar -c $SRC | tar -x -C tmp-gpu/noR
(cd tmp-gpu/noR && patch -R -p1 -s < ../../$R/flag-release.patch) || exit 1
(cd tmp-gpu/noR && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j10 --target moe-ep > ../build-noR.log 2>&1 || echo "build noR failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
cmake --build build/gpu -j22 --target moe-ep moe-ep-link-floor test_gpu_backend test_gpu_low_latency \
  > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
tail -n 2 tmp-gpu/build-noR.log >> $OUT/build.log
t built
B=build/gpu/tools/moe-ep
for b in test_gpu_backend test_gpu_low_latency; do
  BT=$(find build/gpu -name $b -type f | head -1)
  echo "== $b" >> $OUT/tests.log
  MOE_EP_TIMEOUT_S=10 timeout 150 $BT >> $OUT/tests.log 2>&1
  echo "$b rc $?"
done
grep -E "^== |^\[  (PASSED|FAILED)|FAILED  \]|SKIPPED|world|W = " $OUT/tests.log | head -30
t tests
timeout 60 build/gpu/tools/moe-ep-link-floor --reps 3 --sms 32,132 > $OUT/link-floor.log 2>&1
echo "link floor rc $?"; cat $OUT/link-floor.log
t "link floor"
D="bench --backend cuda --ranks 2 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round"
{ timeout 120 $B $D --dispatch-dtype all --combine-dtype bf16
  echo "rc $?"
  timeout 100 $B $D --dispatch-dtype fp8 --combine-dtype fp8,fp8_direct_cast,int8_e3m4
  echo "rc $?"; } > $OUT/decode.log 2>&1
grep -vE "^\s*$" $OUT/decode.log | cut -c1-160
t decode
N="bench --backend cuda --ranks 2 --tokens 4096 --num-sms 32 --iters 50 --warmup 5 --dispatch-dtype fp8 --combine-dtype bf16,fp8"
DR="bench --backend cuda --ranks 2 --mode decode --tokens 128 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16,fp8"
for r in 1 2 3; do
  [ "$(left)" -lt 200 ] && { echo "R: no time left for round $r"; break; }
  for v in . tmp-gpu/noR; do
    echo "== $v round $r"
    timeout 60 $v/build/gpu/tools/moe-ep $N
    timeout 40 $v/build/gpu/tools/moe-ep $DR
  done
done > $OUT/flag-release.log 2>&1
grep -E "wrong|rror" $OUT/flag-release.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/flag-release.log
t "R against noR"
for tok in 4096 128; do
  for ce in "" --copy-engine; do
    [ "$(left)" -lt 40 ] && { echo "path $tok $ce: no time left"; continue; }
    echo "== tokens $tok ${ce:-sm-path}"
    timeout $(($(left) - 10)) $B bench --backend cuda --ranks 2 --tokens $tok --num-sms 32 --iters 20 \
      --warmup 3 --dispatch-dtype all --combine-dtype all $ce
    echo "rc $?"
  done
done > $OUT/paths.log 2>&1
grep -vE "^\s*$" $OUT/paths.log | cut -c1-160
t end
