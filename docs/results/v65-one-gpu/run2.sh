#!/bin/bash
# v65 run 2, one GPU, about 3 minutes: where a normal call's host time goes.
#   M  = main; HT = main + host-trace.patch (steady_clock at points of dispatch and combine,
#   printed at exit, read by host_points.py). 128 and 4096 tokens, 32 SMs, bf16 and fp8
#   dispatch with a bf16 combine; M and HT alternate for 2 rounds (the trace's own cost).
#   bash docs/results/v65-one-gpu/run2.sh   (logs: $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
V=docs/results/v65-one-gpu
rm -rf tmp-gpu && mkdir -p tmp-gpu/HT && tar -c $SRC | tar -x -C tmp-gpu/HT
(cd tmp-gpu/HT && patch -p1 -s < ../../$V/host-trace.patch) || exit 1
for v in M HT; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  (cd $b && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j8 --target moe-ep > $OUT/build-$v.log 2>&1 &&
    rm $OUT/build-$v.log) || echo "build $v failed" &
done
wait
t built
for r in 1 2; do for v in M HT; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  echo "== $v round $r"
  for tok in 128 4096; do for d in bf16 fp8; do
    echo "## $v $tok $d round $r"
    timeout 60 $b/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --tokens $tok \
      --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype $d --combine-dtype bf16 2>&1
  done; done
done; done > $OUT/host.log 2>&1
grep -E "wrong|rror" $OUT/host.log | sort | uniq -c
grep -v "^H[TC]" $OUT/host.log > $OUT/bench.log
python3 tools/bench_compare.py $OUT/bench.log | tee $OUT/run.txt
python3 $V/host_points.py $OUT/host.log | tee $OUT/points.txt
t end
