#!/bin/bash
# Prepared in session 42 for the next session, NOT RUN YET (this session's device time was spent).
# Why is the bf16 combine at 4096 tokens slower at 132 SMs (47.6 us) than at 32 or 64 (41.4,
# 42.4; v36 run P's sweep, v27's the same)? A reading, not measured: at 132 SMs the grid has
# 4224 warps, so every one of the 4096 rows is reduced at once (token slices of 1, one row a
# warp), and each warp first asks L2 to prefetch the rest of its row (prefetch_l2, v25): 4096 x
# 14 KB = 57 MB of prefetches at once, more than an H100-class L2 (50 MB; the run prints the
# device's own size) with the 58.7 MB of `out`
# passing through it too, so prefetched lines may be evicted before their loads come and read
# from HBM twice. At 32 SMs 1024 rows (14.7 MB) are in flight at a time.
#   1. ncu on combine_kernel at 32 and 132 SMs: duration, DRAM bytes read (58.7 MB of y if each
#      line is read once; the reading predicts well above that at 132 SMs and about 58.7 at 32),
#      L2 hit rate, warp states;
#   2. N = next-no-prefetch.patch (the prefetch taken out) against main, combine at 4096 tokens,
#      32 / 64 / 132 SMs, bf16 / fp8 / int8_e3m4, alternated twice: predicted N slower at 32 SMs
#      (v25: the prefetch gained 3.2-4.8 us there) and faster at 132 (toward 41-42 us) if the
#      reading holds; if N is not faster at 132, the reading is wrong;
#   3. the normal (128 and 4096 tokens, 32 SMs) and decode benches on main (predicted as v36
#      runs O and Q: main has both of v36's changes).
# Then next-runS.sh: the whole GPU suite.
#   bash docs/results/v36-one-h200/next-runR.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v36-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu/N && tar -c $SRC | tar -x -C tmp-gpu/N
(cd tmp-gpu/N && patch -p1 -s < ../../$R/next-no-prefetch.patch && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j7 --target moe-ep > $OUT/build-N.log 2>&1 || echo "build N failed") &
cmake -S . -B build/gpu $CFG > /dev/null 2>&1
cmake --build build/gpu -j8 --target moe-ep > $OUT/build.log 2>&1 || { echo "build failed"; grep -B2 -A10 error $OUT/build.log | head -40; }
wait
t built
M=build/gpu/tools/moe-ep
python3 -c "import torch; p = torch.cuda.get_device_properties(0); print('L2 bytes', p.L2_cache_size)" 2>&1 | tail -1
for s in 32 132; do
  echo "== ncu combine_kernel, $s SMs"
  timeout 90 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
    -k regex:combine_kernel -s 3 -c 1 $M bench --backend cuda --ranks 1 --num-sms $s \
    --tokens 4096 --dispatch-dtype bf16 --combine-dtype bf16 --iters 3 --warmup 1 --no-check
done > $OUT/ncu-combine.log 2>&1
grep -E "^==|^  [a-zA-Z_v].*\(|Duration|DRAM Throughput|dram__bytes|lts__t_sector_hit|L2 Hit Rate|Achieved Occupancy" $OUT/ncu-combine.log | head -40
t ncu
for r in 1 2; do for v in . tmp-gpu/N; do
  echo "== $v combine $r"; timeout 60 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --num-sms 32,64,132 --tokens 4096 --dispatch-dtype bf16 --combine-dtype bf16,fp8,int8_e3m4 --iters 20 --warmup 3
done; done > $OUT/bench-prefetch.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench-prefetch.log
t prefetch
{ timeout 40 $M bench --backend cuda --ranks 1 --num-sms 32 --tokens 128,4096 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 20 --warmup 3
  timeout 30 $M bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20; } > $OUT/bench.log 2>&1
grep -E "^ +[0-9]+ +|wrong|rror" $OUT/bench.log
t end
