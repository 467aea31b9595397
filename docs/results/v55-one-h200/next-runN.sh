#!/bin/bash
# v55, NOT RUN YET (one GPU, DEADLINE seconds, 560 by default); for main once it holds
# next-step-count.patch (rebase this patch first if that one is not merged). B = main +
# next-combine-early.patch: the world-size-1 decode combine (by warp) issues its first item's
# loads before its step's verdict (the token's mask and slots, the slot table, the pipe's first
# copies of y); only the sums' stores into `out` wait for it. v54's trace (one H100): the combine
# waited 2.3-2.5 us for its step kernel, then summed 6.8 us at 128 tokens (2.9 at 1 token).
# ptxas: 40-44 bytes of spills in the bf16, fp8 blockwise and int8 by-warp instantiations (0,
# 16 and 0 before). Predicted: 0.3-1.0 us off the world-size-1 combine at 1-128 tokens, unless
# the spills cost it back; dispatches level.
# 1. ctest on B: -L gpu -R 'LowLatency|GpuCapture|python_gpu'.
# 2. Decode bench main / B, fp8 dispatch with bf16 and fp8 combines, 3 rounds.
#   DEADLINE=<seconds> bash docs/results/v55-one-h200/next-runN.sh     (logs to $OUT)
B_PATCH=docs/results/v55-one-h200/next-combine-early.patch \
  TESTS=${TESTS:-'LowLatency|GpuCapture|python_gpu'} \
  DTYPES=${DTYPES:-'--dispatch-dtype fp8 --combine-dtype bf16,fp8'} \
  exec bash docs/results/v53-one-h200/runI2.sh
