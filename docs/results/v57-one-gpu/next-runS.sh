#!/bin/bash
# v57, NOT RUN YET (one GPU, DEADLINE seconds, 300 by default): S = main + next-send128.patch,
# decode's send alone in blocks of 128 threads, 8 a SM of budget (the same threads and registers;
# the expand and the combine keep 256, 4 a SM). v57 run E halved every data kernel's blocks: the
# round 0.4-0.5 us faster at 1 and 32 tokens, the fp8 dispatch 0.9 / 1.5 us slower at 128 / 256,
# the combine level. The send's items (a token's metadata, then its row slices) spread over
# twice the blocks; the expand's fixed costs a block (its barrier, its wait for the sources) do
# not double. Predicted: the small-call gain kept (0.3-0.5 us at 1-32 tokens), level at 128 and
# 256 if the expand took E's loss; slower there too if the send did. ptxas here: the same
# registers and spills as main. Bench-only (tests off): the op's sent_calls grows by a slot a
# send block (+1024 bytes at 32 SMs), which the op-memory test's figures would need.
#   DEADLINE=<seconds> bash docs/results/v57-one-gpu/next-runS.sh     (logs to $OUT)
NAME=S PATCH=docs/results/v57-one-gpu/next-send128.patch \
  exec bash docs/results/v56-one-h100/next-runD.sh
