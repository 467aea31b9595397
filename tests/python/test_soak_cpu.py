"""The randomized soak (soak.py) as a test: random worlds of 1..6 ranks, shapes, dtype pairs and
inputs (zero-token ranks, masked slots, duplicate expert ids, NaN and Inf), every output compared
bit for bit with np_reference.py, for a wall-clock budget of about a minute split between the
two validation modes: this process's (MOE_EP_VALIDATE as ctest sets it) and the other one in a
child process, since the library reads the variable once per process. The count of round trips
and the seed are printed; MOE_EP_TEST_SEED replays a run (scripts/soak runs longer soaks).
"""

import os
import subprocess
import sys

import moe_ep
import soak

IN_PROCESS_S = 25.0
CHILD_S = 25.0
MIN_ROUND_TRIPS = 100  # a soak that ran but compared almost nothing fails


def test_soak_in_this_process():
    summary = soak.run_soak(soak.base_seed(), seconds=IN_PROCESS_S)
    assert summary["round_trips"] >= MIN_ROUND_TRIPS, summary
    if summary["validate"]:
        assert summary["rejected"] > 0, summary  # validation was exercised


def test_soak_with_the_other_validation_mode():
    env = dict(os.environ)
    env["MOE_EP_VALIDATE"] = "0" if soak.validation_mode() else "1"
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(moe_ep.__file__)), env.get("PYTHONPATH", "")])
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "soak.py")
    proc = subprocess.run([sys.executable, script, "--seconds", str(CHILD_S)], env=env,
                          capture_output=True, text=True, timeout=CHILD_S + 240)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stderr[-4000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert "round trips compared with the reference" in last, proc.stdout
    assert int(last.split()[1]) >= MIN_ROUND_TRIPS, last
