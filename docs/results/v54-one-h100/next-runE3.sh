#!/bin/bash
# v54, run in v57 (docs/results/v57-one-gpu/runE3/, one H100; the probe failed in creation): v44's
# next-runE2.sh (read its notes there) with next-stall-probe3.patch,
# v44's probe made again on v54's main (only its hunk in CudaOp's constructor moved). Compiled on
# this machine (cuda_op.cc and agreement.cu, with v41's next-no-pdl-probe.patch too).
#   bash docs/results/v54-one-h100/next-runE3.sh      (logs to $OUT; about 560 s)
PROBE_PATCH=docs/results/v54-one-h100/next-stall-probe3.patch \
  exec bash docs/results/v44-one-h200/next-runE2.sh
