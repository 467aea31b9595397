#!/usr/bin/env python3
"""Instructions of the kernels that only the second PTX file has (ptx_counts.py prints those of
the first only), counted as ptx_counts.py counts them:
  new_kernels.py before.ptx after.ptx"""
import importlib.util
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    'ptx_counts', os.path.join(here, '..', 'v50-one-h200', 'ptx_counts.py'))
pc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pc)
a, b = pc.kernels(sys.argv[1]), pc.kernels(sys.argv[2])
for k in b:
    if k not in a:
        print(len(b[k]), k)
