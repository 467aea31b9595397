#!/bin/bash
# v65 (prepared in v64), one GPU, about 6 minutes: main + the PATCHes' normal-mode GPU tests, as
# v64's test-patch.sh (each failure run alone 5 more times), with the PDL order test added.
#   [DEADLINE=560] bash docs/results/v65-one-gpu/test-patch.sh PATCH...   (logs: $OUT)
# Each PATCH is a path from the repository root or a file name in docs/results/v65-one-gpu.
V=docs/results/v65-one-gpu \
  TESTS="PdlOrder|GpuAgreement|GpuBackend|GpuNodes|GpuCopyEngine|SingleGpuWorld|GpuLateRank|GpuTimeout" \
  exec bash docs/results/v64-one-gpu/test-patch.sh "$@"
