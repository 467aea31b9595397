#!/bin/bash
# v54, NOT RUN, superseded by docs/results/v57-one-gpu/next-x2-combine3.sh (this patch no longer
# applies since v56). For two GPUs (about 5 minutes): v48's next-x2-combine.sh (read its notes in
# docs/results/v48-two-h200/) with pre-v47-combine.patch made again on v54's main: v48's older
# combine kernel, which now accepts main's by-warp template argument and ignores it (that
# kernel runs only at world size 1).
#   bash docs/results/v54-one-h100/next-x2-combine2.sh      (logs to $OUT)
OLD_COMBINE_PATCH=docs/results/v54-one-h100/pre-v47-combine.patch \
  exec bash docs/results/v48-two-h200/next-x2-combine.sh
