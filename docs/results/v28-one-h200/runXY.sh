#!/bin/bash
# v28 runs X and Y (session 35): the commands run, on the tree of run V (already built there by
# runs V and W), as two calls; logs runX-ctest-nodes.log and runY-ctest-decode.log.
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
# X: the several-node tests (notify after the step; positions in the op's two halves).
cmake --build build/gpu -j16 > $OUT/build.log 2>&1
MOE_EP_TIMEOUT_S=10 timeout 140 ctest --test-dir build/gpu -L gpu -R 'Node|Multiprocess|Transport' \
  -E 'LowLatency' --output-on-failure --timeout 60 > $OUT/ctest-nodes.log 2>&1
# Y: the decode-mode tests.
MOE_EP_TIMEOUT_S=10 timeout 95 ctest --test-dir build/gpu -L gpu -R 'LowLatency' \
  --output-on-failure --timeout 60 > $OUT/ctest-ll.log 2>&1
