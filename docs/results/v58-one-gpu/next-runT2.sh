#!/bin/bash
# v58, NOT RUN YET (one GPU, about 4 minutes): v58 run T (v57's next-runT.sh) put 2.0-2.1 us of a
# one-token dispatch in the send between its error check and its done add, where it stores the
# slots for the next send, block 0's per-expert counts (256 stores, one a thread) and one token's
# metadata. next-trace2.patch is v57's next-trace.patch with two more send points to split that:
# p5 past the slots for the next send (and the call-number check), p6 after block 0's counts
# (thread 0 of block 0), then p3 (the metadata stored) as before. The same bench as run T;
# trace_points.py reads the send's seven points (next-runT.sh with SEND_POINTS=7).
#   bash docs/results/v58-one-gpu/next-runT2.sh      (logs to $OUT)
PATCH=docs/results/v58-one-gpu/next-trace2.patch SEND_POINTS=7 \
  exec bash docs/results/v57-one-gpu/next-runT.sh
