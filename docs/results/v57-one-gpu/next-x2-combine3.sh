#!/bin/bash
# v57, NOT RUN YET, for two GPUs (about 5 minutes): v48's next-x2-combine.sh (read its notes in
# docs/results/v48-two-h200/) with pre-v47-combine.patch made again on v57's main (v54's copy no
# longer applies: v56 changed two comments in the lines it removes; nothing else differs).
#   bash docs/results/v57-one-gpu/next-x2-combine3.sh      (logs to $OUT)
OLD_COMBINE_PATCH=docs/results/v57-one-gpu/pre-v47-combine.patch \
  exec bash docs/results/v48-two-h200/next-x2-combine.sh
