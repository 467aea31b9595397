#!/bin/bash
# v56, run in v57 (docs/results/v57-one-gpu/runE/, one H100; DEADLINE seconds, 300 by default): E =
# main + next-blocks128.patch,
# the data kernels' blocks halved again (Policy::kDataThreads 256 -> 128, kDataBlocksPerSm 4 -> 8;
# policy.h only: a bench-only tree, tests off, whose world-budget test figures are 4 blocks a
# SM's). v56 run D: 512 -> 256 took the decode round 0.7-2.2 us and normal mode's legs at 4096
# tokens 1.3 us each (one H100). Question: does the gain go on at 8 blocks a SM (a 128-token
# expand's 896 warps on 224 blocks, the grids reaching every SM), or do the blocks' fixed costs
# (each block's barrier and its wait for the sources) take it back?
# 1. Decode bench main / E, fp8 dispatch, bf16 combine, 3 alternating rounds.
# 2. Normal mode at 32 SMs, 4096 tokens, fp8 + bf16, main / E, 2 rounds.
# next-runD.sh with this tree and patch.
#   DEADLINE=<seconds> bash docs/results/v56-one-h100/next-runE.sh     (logs to $OUT)
NAME=E PATCH=docs/results/v56-one-h100/next-blocks128.patch \
  exec bash docs/results/v56-one-h100/next-runD.sh
