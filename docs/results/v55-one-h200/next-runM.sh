#!/bin/bash
# v55, NOT RUN YET (one GPU, DEADLINE seconds, 560 by default): B = main + next-step-count.patch.
# One node's decode send waits for its step kernel's release of a count of ranked step kernels
# (LowLatencyState::ranked_steps, polled by thread 0 of each block at GPU scope, ll_wait_step_count)
# instead of griddepcontrol.wait for the step kernel's grid, and an accepted one-node combine's
# launch the same for its step kernel's count (counted_combines); the expand loads the state's
# words at system scope. v54's trace (one H100) put the send's wait 1.2-1.3 us after the step
# kernel's last point at 1 and 128 tokens, and the combine's wait for its step kernel at 2.3-2.5
# us; a GPU-scope signal between SMs took 0.9 us with release and acquire (v46 run L).
# Predicted: 0.3-0.8 us off every one-node decode dispatch and combine.
# 1. ctest on B: -L gpu -R 'LowLatency|LateRank|OpMemory|GpuCapture|python_gpu'.
# 2. Decode bench main / B, fp8 and mxfp4 (fp4) dispatch with a bf16 combine, 3 rounds.
# v53's runI2.sh with these three settings; TESTS and DTYPES may be set in the environment
# instead (a short device budget: DTYPES='--dispatch-dtype fp8 --combine-dtype bf16').
#   DEADLINE=<seconds> bash docs/results/v55-one-h200/next-runM.sh     (logs to $OUT)
B_PATCH=docs/results/v55-one-h200/next-step-count.patch \
  TESTS=${TESTS:-'LowLatency|LateRank|OpMemory|GpuCapture|python_gpu'} \
  DTYPES=${DTYPES:-'--dispatch-dtype fp8,fp4 --combine-dtype bf16'} \
  exec bash docs/results/v53-one-h200/runI2.sh
