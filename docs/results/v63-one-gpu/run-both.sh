#!/bin/bash
# v63, one GPU, one call (about 6 minutes): v62's run-np.sh, then run-div.sh, the build logs
# dropped when the builds passed (the tool brings back 8 files).
#   bash docs/results/v63-one-gpu/run-both.sh   (logs: $OUT)
bash docs/results/v62-one-gpu/run-np.sh 2>&1 | tail -40
grep -L "FAILED\|rror" $OUT/build-*.log | xargs -r rm
bash docs/results/v63-one-gpu/run-div.sh 2>&1 | tail -40
grep -L "FAILED\|rror" $OUT/build-*.log | xargs -r rm
ls $OUT
