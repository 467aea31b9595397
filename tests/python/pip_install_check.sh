#!/usr/bin/env bash
# `pip install .` works: builds the package (CPU backend only, to keep CI lean) into a fresh
# virtual environment that sees the system's numpy, then imports it from outside the source
# tree and runs one dispatch/combine on a 2-rank CPU world.
# Usage: pip_install_check.sh PYTHON WORKDIR
set -euo pipefail
python=$1
work=$2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rm -rf "$work"
mkdir -p "$work"
"$python" -m venv --system-site-packages "$work/venv"
# A private copy of the sources, so that setuptools' in-tree build/ and egg-info stay out of
# the checkout and parallel test runs do not share them.
mkdir -p "$work/src"
(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work/src")
CMAKE_ARGS="-DMOE_EP_ENABLE_CUDA=OFF" "$work/venv/bin/python" -m pip install -q \
  --no-build-isolation --no-index "$work/src"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import threading
import numpy as np
import moe_ep

assert "site-packages" in moe_ep.__file__, moe_ep.__file__
world = moe_ep.CpuWorld(2)
outs = [None, None]

def rank(r):
    op = moe_ep.get_op(world.communicator(r), 4, 2, 128, 8)
    x = np.full((3, 128), 0x3F80, np.uint16)  # bf16 1.0
    idx = np.array([[0, 3], [1, -1], [2, 3]], np.int32)
    w = np.ones((3, 2), np.float32)
    recv, handle = op.dispatch(x, idx, w)
    outs[r] = op.combine(recv.recv_x, handle)  # identity partials: out = number of ranks hit

threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join(60)
expected = np.array([0x4000, 0x3F80, 0x3F80], np.uint16)  # only token 0 reaches both ranks
for r in range(2):
    assert (outs[r] == expected[:, None]).all(), (r, outs[r][:, :4])
print("pip install check: moe_ep from", moe_ep.__file__, "dispatch/combine OK")
PY
