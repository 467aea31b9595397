#!/bin/bash
# Prepared in v52 (no GPU that session), NOT RUN YET, for nvidia-h200-x2 (one call, about 3
# minutes; after v48's next-x2-combine.sh and v46's next-x2.sh A and B): the legs at W = 2 under
# group-limited routing (v52's --routing, docs/bench.md#routing) against uniform, main's tree,
# fp8 dispatch with bf16 and fp8 combines:
#   uniform      nearly every token reaches both ranks (the figures so far);
#   groups:2:1   each token's experts inside one rank's half: no token goes to both ranks.
# The rows, counted on the CPU from the bench's inputs (moe-ep bench --backend cpu --ranks 2
# --tokens 4096 --hidden 128 --experts 256 --topk 8 --routing R, seed 1): uniform 8166 rows
# received by the busier rank (538,626 fp8 bytes a rank to the other), groups:2:1 4144 (270,864:
# half). zipf:S is left out: at W = 2 with 256 experts its tokens reach both ranks as uniform
# ones do (zipf:1.2: 8187 rows; its skew is per expert, 29.8x the mean, which the GEMMs feel, not
# the links).
# Normal mode at 4096 tokens and 32 SMs, decode at 1/32/128/256 tokens (--decode-graph round), 2
# rounds each. Predicted: groups:2:1's 4096-token legs well below uniform's (half the link bytes;
# the bf16 combine, bound by its SMs in v46 X1, less than half off); decode level at 1 token
# (fixed costs), lower at 128-256.
#   bash docs/results/v52-two-h200/next-x2-routing.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
nvidia-smi -L
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j28 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
N="bench --backend cuda --ranks 2 --tokens 4096 --num-sms 32 --dispatch-dtype fp8 --combine-dtype bf16,fp8"
D="bench --backend cuda --ranks 2 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16,fp8"
for r in 1 2; do for routing in uniform groups:2:1; do
  echo "== normal $routing round $r"; timeout 120 ./build/gpu/tools/moe-ep $N --routing $routing
  echo "== decode $routing round $r"; timeout 120 ./build/gpu/tools/moe-ep $D --routing $routing
done; done > $OUT/routing.log 2>&1
grep -E "wrong|rror" $OUT/routing.log | sort | uniq -c
grep -E "^# routing" $OUT/routing.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/routing.log
t end
