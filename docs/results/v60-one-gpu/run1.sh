#!/bin/bash
# v60 run 1 (one GPU, about 8 minutes): v59's two prepared probes in one call, their three trees
# built together. C = main + v59's next-count-trace.patch (count_kernel's, the data kernel's and
# the wait kernel's points, next-runC.sh's bench); T3 = main + v59's next-trace3.patch (the decode
# points with the ring slot read once, next-runT3.sh's benches, main M beside it).
#   bash docs/results/v60-one-gpu/run1.sh      (logs to $OUT/c and $OUT/t3, tarred into $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
mkdir -p $OUT/c $OUT/t3
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
V59=docs/results/v59-one-gpu
rm -rf tmp-gpu && mkdir -p tmp-gpu/C tmp-gpu/T3
for v in C T3; do tar -c $SRC | tar -x -C tmp-gpu/$v; done
(cd tmp-gpu/C && patch -p1 -s < ../../$V59/next-count-trace.patch) || exit 1
(cd tmp-gpu/T3 && patch -p1 -s < ../../$V59/next-trace3.patch) || exit 1
build() {  # dir log jobs
  (cd $1 && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j$3 --target moe-ep > $2 2>&1) || echo "build $1 failed"
}
build . $OUT/t3/build-M.log 5 & build tmp-gpu/T3 $OUT/t3/build-T3.log 6 &
build tmp-gpu/C $OUT/c/build-C.log 5
wait
t built
# C: count_kernel's points, fp8 dispatch with a bf16 combine, one configuration a process.
for r in 1 2; do for tok in 128 4096; do
  echo "== $tok fp8 round $r"
  timeout 60 tmp-gpu/C/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --tokens $tok \
    --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype fp8 --combine-dtype bf16
done; done > $OUT/c/trace.log 2>&1
grep -E "wrong|rror" $OUT/c/trace.log | sort | uniq -c
python3 $V59/count_points.py $OUT/c/trace.log > $OUT/c/table.txt 2>&1; cat $OUT/c/table.txt
t C done
D="bench --backend cuda --ranks 1 --mode decode --dispatch-dtype fp8 --combine-dtype bf16 --decode-graph round --iters 200 --warmup 20"
for r in 1 2; do for v in M T3; do
  b=.; [ $v = T3 ] && b=tmp-gpu/T3
  echo "== $v round $r"; timeout 100 $b/build/gpu/tools/moe-ep $D --tokens 1,32,128,256
done; done > $OUT/t3/decode.log 2>&1
grep -E "wrong|rror" $OUT/t3/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/t3/decode.log > $OUT/t3/run.txt 2>&1; cat $OUT/t3/run.txt
t compared
for r in 1 2; do for tok in 1 32 128 256; do
  echo "== $tok fp8 round $r"
  timeout 60 tmp-gpu/T3/build/gpu/tools/moe-ep $D --tokens $tok
done; done > $OUT/t3/trace.log 2>&1
grep -E "wrong|rror" $OUT/t3/trace.log | sort | uniq -c
sed "s/1: 5, 2: 6/1: 7, 2: 6/" docs/results/v49-one-h200/trace_points.py > tmp-gpu/trace_points.py
python3 tmp-gpu/trace_points.py $OUT/t3/trace.log > $OUT/t3/table.txt 2>&1; cat $OUT/t3/table.txt
(cd $OUT && tar -czf logs.tar.gz c t3 && rm -rf c t3)
t end
