#!/bin/bash
# v64 call 4, one GPU: pdl_probe.cu (does work after a PDL kernel that never waits wait for its
# predecessor?), then, if every later launch and the host's event saw D's end, nothing more (W2,
# the wait kernel without griddepcontrol.wait, is then as safe as decode's expand); if not, the
# tests of wait-first.patch (W, which keeps the wait) on main with S.
set -u
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
V=docs/results/v64-one-gpu
nvcc -arch=sm_90 -O2 -o /tmp/pdl_probe $V/pdl_probe.cu && /tmp/pdl_probe | tee $OUT/pdl.txt
if grep -qE "(event|sync|waits\)|plain X|two: PDL X \(waits\)) saw 0" $OUT/pdl.txt || ! grep -q "round 2" $OUT/pdl.txt; then
  echo "== not every later launch saw D's end: W's tests"
  DEADLINE=500 bash $V/test-patch.sh wait-first.patch
fi
