#!/bin/bash
# Prepared in v54, NOT RUN YET (one GPU, DEADLINE seconds, 560 by default): B = main +
# next-step-overlap.patch, the one-node decode dispatch's step kernel with two round trips out of
# its ranks' chain. v54's trace points (one H100) put the step kernel at 5 us whatever the tokens
# (1 or 128): after pass 1's barrier, thread 0 loaded the state and the error flag and a barrier
# of the whole block followed, and only then did the ranks' threads load the last window's ids
# again for pass 2. Now every pass runs on the threads from the first warp without a peer on, so
# pass 1's ids stay in the registers of the threads that rank them in pass 2, and only the
# exchange threads wait for thread 0's words (a named barrier, `bar.sync 1, skip`); the ranks'
# threads go straight on to pass 2 and the totals. ptxas: ll_step_kernel<true> 61 registers (64
# before), no spill, 2 barriers. Predicted: every decode dispatch 0.5-1.0 us faster at 1-256
# tokens (two L2 round trips of about 0.5 us in the step kernel's chain), combines level.
# 1. ctest on B: -L gpu -R 'LowLatency|LateRank|GpuCapture|python_gpu' (the ranks at every shape
#    the shapes test covers: several windows at E = 4096, repeated experts, masked slots).
# 2. Decode bench main / B, fp8 and mxfp4 (fp4) dispatch with a bf16 combine, rounds until the deadline.
# v53's runI2.sh with these three settings.
#   DEADLINE=<seconds> bash docs/results/v54-one-h100/next-runL.sh     (logs to $OUT)
B_PATCH=docs/results/v54-one-h100/next-step-overlap.patch \
  TESTS='LowLatency|LateRank|GpuCapture|python_gpu' \
  DTYPES='--dispatch-dtype fp8,fp4 --combine-dtype bf16' \
  exec bash docs/results/v53-one-h200/runI2.sh
