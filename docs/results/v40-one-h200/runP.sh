#!/bin/bash
# v40 run P: the executed code footprint of the fixed-cost kernels (footprint.py on ncu's SASS
# source page): count_kernel and dispatch_kernel (fp8, 128 tokens, 32 SMs), count_kernel at 4096,
# and the decode kernels of one fp8 dispatch and bf16 combine at 128 tokens. Run O measured about
# 11 cycles a cold 128-byte line from L2; run I's count_kernel samples at 128 tokens were 46%
# no_inst outside barriers.
#   bash docs/results/v40-one-h200/runP.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
D=docs/results/v40-one-h200
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j16 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
M=build/gpu/tools/moe-ep
mkdir -p $OUT/s
prof() {  # name, kernel regex, skip, count, bench args
  local r=$1 k=$2 s=$3 c=$4; shift 4
  timeout 150 ncu --section SourceCounters --section LaunchStats -k regex:"$k" -s $s -c $c -f -o $OUT/s/$r \
    $M bench --backend cuda --ranks 1 --num-sms 32 --iters 2 --warmup 1 --no-check "$@" >> $OUT/s/log.txt 2>&1
  timeout 90 ncu --import $OUT/s/$r.ncu-rep --page source --csv --print-source sass > $OUT/s/$r.csv 2>&1
  echo "==== $r"; python3 $D/footprint.py $OUT/s/$r.csv
}
{
prof count128 count_kernel 1 1 --tokens 128 --dispatch-dtype fp8 --combine-dtype bf16
prof count4096 count_kernel 1 1 --tokens 4096 --dispatch-dtype fp8 --combine-dtype bf16
prof data128 dispatch_kernel 1 1 --tokens 128 --dispatch-dtype fp8 --combine-dtype bf16
for k in ll_step_kernel ll_send_kernel ll_expand_kernel ll_combine_kernel; do
  prof $k $k 5 1 --mode decode --tokens 128 --dispatch-dtype fp8 --combine-dtype bf16
done
} > $OUT/footprint.txt 2>&1
cat $OUT/footprint.txt | cut -c1-250
tail -3 $OUT/s/log.txt
head -c 3000 $OUT/s/count128.csv > $OUT/csv-head.txt
gzip -c $OUT/s/count128.csv > $OUT/count128-sass.csv.gz
rm -rf $OUT/s
t end
