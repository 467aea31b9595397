#!/bin/bash
# v44 run E: v42's next-runE.sh (the copy probe, then the one-GPU world's W = 8 tests repeated
# with next-stall-probe.patch, arms P without and Q with programmatic dependent launch), its loop
# cut at 330 s to fit the session's device time. Logs: runE-*.
#   bash docs/results/v44-one-h200/runE.sh      (logs to $OUT)
sed 's/-gt 550/-gt 330/' docs/results/v42-one-h200/next-runE.sh > /tmp/runE.sh && bash /tmp/runE.sh
