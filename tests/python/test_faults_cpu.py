"""Faults of one rank, through the Python API on the CPU backend, with short timeouts.

Each test breaks the collective protocol on one rank in one way: it never joins a call, joins
after the others gave up, raises between dispatch and combine (skipping its combine), skips one
call, calls two ops in another order, or destroys its op. Each must end in a clear error on
every rank (TimeoutError within the world's timeout naming the missing rank, RemoteError at once
for a late rank, InvalidUsage naming both sides of calls out of step) and a working next op: a
fresh get_op with another instance_id works on every rank, its outputs compared exactly with
np_reference.py, and where the op was not poisoned the same op works again too. Inputs are
seeded (conftest.py); the seed is printed.
"""

import gc
import threading
import time

import numpy as np
import pytest

import moe_ep
from test_cpu_ops import check_pipeline, config, dispatch_args, snapshot, y_pools

E, K, H, MAX_T = 12, 3, 256, 16
TIMEOUT_S = 1.0
SLACK_S = 3.0      # scheduling noise on a busy machine
WAIT_S = 30.0      # bound of the tests' own events


def get_op(world, rank, instance_id=0, d="fp8", c="fp8"):
    return moe_ep.get_op(world.communicator(rank), E, K, H, MAX_T, dispatch_dtype=d,
                         combine_dtype=c, instance_id=instance_id)


def round_trip(op, inp, ypool_rank):
    args, kwargs = dispatch_args(inp)
    recv, handle = op.dispatch(*args, **kwargs)
    snap = snapshot(recv)
    out = op.combine(ypool_rank[:recv.num_recv], handle)
    return snap, np.array(out, copy=True)


def timed(fn):
    """(the moe_ep error fn raised, or None; seconds)."""
    start = time.monotonic()
    try:
        fn()
    except moe_ep.Error as e:
        return e, time.monotonic() - start
    return None, time.monotonic() - start


class Case:
    """Seeded inputs of one test: `rounds` rounds of every rank plus a y pool per round."""

    def __init__(self, rng, make_inputs, random_bf16, world_size, rounds=3):
        self.world_size = world_size
        tokens = [[int(t) for t in rng.integers(0, MAX_T + 1, world_size)] for _ in range(rounds)]
        self.inputs = [make_inputs(rng, world_size, E, K, H, t) for t in tokens]
        self.ypools = y_pools(rng, random_bf16, world_size, MAX_T, H, rounds)

    def trip(self, op, i, rank):
        return round_trip(op, self.inputs[i][rank], self.ypools[i][rank])

    def check(self, got, rounds, cfg=None):
        """got[rank] = [(snap, out) per round in `rounds`]."""
        cfg = cfg or config("fp8", "fp8", e=E, k=K, max_t=MAX_T)
        check_pipeline(got, cfg, [self.inputs[i] for i in rounds],
                       [self.ypools[i] for i in rounds])


def check_timeout(err, seconds, rank, missing):
    assert isinstance(err, moe_ep.Timeout) and isinstance(err, TimeoutError), (rank, err)
    msg = str(err)
    assert f"rank {rank} timed out" in msg, msg
    assert f"waiting for ranks [{missing}]" in msg, msg
    assert TIMEOUT_S * 0.9 <= seconds < TIMEOUT_S + SLACK_S, (rank, seconds, msg)


def check_out_of_step(err, seconds, rank):
    assert isinstance(err, moe_ep.InvalidUsage), (rank, err)
    assert "calls out of step" in str(err) and f"rank {rank} is in" in str(err), str(err)
    assert seconds < SLACK_S, (rank, seconds)


# ---------------------------------------------------------------------------------------------

def test_rank_that_never_joins(rng, run_ranks, make_inputs, random_bf16):
    case = Case(rng, make_inputs, random_bf16, 3)
    world = moe_ep.CpuWorld(3, timeout_s=TIMEOUT_S)
    gave_up = threading.Barrier(3, timeout=WAIT_S)

    def rank_fn(rank):
        op = get_op(world, rank)
        first = second = None
        if rank != 2:  # rank 2 never joins this op's dispatch
            first = timed(lambda: op.dispatch(*dispatch_args(case.inputs[0][rank])[0]))
            second = timed(lambda: op.dispatch(*dispatch_args(case.inputs[0][rank])[0]))
        gave_up.wait()
        fresh = get_op(world, rank, instance_id=1)
        return first, second, [case.trip(fresh, 1, rank)]

    res = run_ranks(3, rank_fn)
    for rank in (0, 1):
        (err, seconds), (poisoned, again) = res[rank][0], res[rank][1]
        check_timeout(err, seconds, rank, "2")
        assert "dispatch/publish" in str(err)
        assert isinstance(poisoned, moe_ep.InvalidUsage), poisoned
        assert "op unusable after: dispatch/publish" in str(poisoned)
        assert again < SLACK_S
    case.check([r[2] for r in res], [1])


def test_rank_that_joins_after_the_others_gave_up(rng, run_ranks, make_inputs, random_bf16):
    case = Case(rng, make_inputs, random_bf16, 2)
    world = moe_ep.CpuWorld(2, timeout_s=TIMEOUT_S)
    gave_up = threading.Event()
    done = threading.Barrier(2, timeout=WAIT_S)

    def rank_fn(rank):
        op = get_op(world, rank)
        if rank == 0:
            error = timed(lambda: op.dispatch(*dispatch_args(case.inputs[0][0])[0]))
            gave_up.set()
        else:
            assert gave_up.wait(WAIT_S)
            error = timed(lambda: op.dispatch(*dispatch_args(case.inputs[0][1])[0]))
        done.wait()
        return error, [case.trip(get_op(world, rank, instance_id=1), 1, rank)]

    res = run_ranks(2, rank_fn)
    err, seconds = res[0][0]
    check_timeout(err, seconds, 0, "1")
    late, seconds = res[1][0]
    assert isinstance(late, moe_ep.RemoteError), late
    assert "rank 1 cannot proceed: rank 0 failed in this op" in str(late), str(late)
    assert "timed out" in str(late)
    assert seconds < 0.5 * TIMEOUT_S, seconds  # at once, not after another timeout
    case.check([r[1] for r in res], [1])


def test_rank_that_raises_between_dispatch_and_combine(rng, run_ranks, make_inputs,
                                                       random_bf16):
    case = Case(rng, make_inputs, random_bf16, 3)
    world = moe_ep.CpuWorld(3, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = get_op(world, rank)
        args, kwargs = dispatch_args(case.inputs[0][rank])
        recv, handle = op.dispatch(*args, **kwargs)
        y = case.ypools[0][rank][:recv.num_recv]
        errors = []
        for _ in range(2):  # the application retries; the calls stay out of step
            if rank == 1:  # raised in its own code after dispatch: goes on with the next batch
                next_args, next_kwargs = dispatch_args(case.inputs[1][rank])
                errors.append(timed(lambda: op.dispatch(*next_args, **next_kwargs)))
            else:
                errors.append(timed(lambda: op.combine(y, handle)))
        # Every rank starts a new round on the same op: it works, and so does a fresh op.
        got = [case.trip(op, 1, rank), case.trip(get_op(world, rank, instance_id=1), 2, rank)]
        return errors, got

    res = run_ranks(3, rank_fn)
    for rank, (errors, _) in enumerate(res):
        for err, seconds in errors:
            check_out_of_step(err, seconds, rank)
            if rank == 1:
                assert "rank 1 is in dispatch #2, rank 0 in combine #1" in str(err), str(err)
            else:
                assert f"rank {rank} is in combine #1, rank 1 in dispatch #2" in str(err)
    case.check([r[1] for r in res], [1, 2])


def test_rank_that_skips_one_call(rng, run_ranks, make_inputs, random_bf16):
    case = Case(rng, make_inputs, random_bf16, 2)
    world = moe_ep.CpuWorld(2, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = get_op(world, rank)
        args, kwargs = dispatch_args(case.inputs[0][rank])
        recv, handle = op.dispatch(*args, **kwargs)
        first = (snapshot(recv), np.array(op.combine(case.ypools[0][rank][:recv.num_recv],
                                                     handle), copy=True))
        # Round 2: rank 1 skips its dispatch and goes straight to the combine.
        if rank == 1:
            error = timed(lambda: op.combine(case.ypools[0][rank][:recv.num_recv], handle))
        else:
            next_args, next_kwargs = dispatch_args(case.inputs[1][rank])
            error = timed(lambda: op.dispatch(*next_args, **next_kwargs))
        got = [first, case.trip(op, 1, rank),
               case.trip(get_op(world, rank, instance_id=1), 2, rank)]
        return error, got

    res = run_ranks(2, rank_fn)
    err, seconds = res[0][0]
    check_out_of_step(err, seconds, 0)
    assert "rank 0 is in dispatch #2, rank 1 in combine #1" in str(err), str(err)
    err, seconds = res[1][0]
    check_out_of_step(err, seconds, 1)
    assert "rank 1 is in combine #1, rank 0 in dispatch #2" in str(err), str(err)
    case.check([r[1] for r in res], [0, 1, 2])


def test_ranks_that_call_two_ops_in_another_order(rng, run_ranks, make_inputs, random_bf16):
    case = Case(rng, make_inputs, random_bf16, 2)
    world = moe_ep.CpuWorld(2, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        a, b = get_op(world, rank, instance_id=0), get_op(world, rank, instance_id=1)
        args = dispatch_args(case.inputs[0][rank])[0]
        if rank == 0:  # A then B
            errors = [timed(lambda: a.dispatch(*args)), timed(lambda: b.dispatch(*args))]
        else:  # B then A, a little later, so that rank 0's wait in A ends first
            time.sleep(0.5 * TIMEOUT_S)
            errors = [timed(lambda: b.dispatch(*args)), timed(lambda: a.dispatch(*args))]
        return errors, [case.trip(get_op(world, rank, instance_id=2), 1, rank)]

    res = run_ranks(2, rank_fn)
    # Rank 0 waited in A for rank 1, which was in B: a timeout naming rank 1. Rank 0 then
    # joined B, where rank 1 was still waiting: B's dispatch worked on both. Rank 1 then came
    # to A, which rank 0 had given up on: a RemoteError at once, naming rank 0's timeout.
    (a0, a0_s), (b0, _) = res[0][0]
    check_timeout(a0, a0_s, 0, "1")
    assert b0 is None, b0
    (b1, _), (a1, a1_s) = res[1][0]
    assert b1 is None, b1
    assert isinstance(a1, moe_ep.RemoteError), a1
    assert "rank 1 cannot proceed: rank 0 failed in this op" in str(a1), str(a1)
    assert "rank 0 timed out" in str(a1) and a1_s < 0.5 * TIMEOUT_S
    case.check([r[1] for r in res], [1])


def test_rank_that_destroys_its_op(rng, run_ranks, make_inputs, random_bf16):
    case = Case(rng, make_inputs, random_bf16, 2)
    world = moe_ep.CpuWorld(2, timeout_s=TIMEOUT_S)
    destroyed = threading.Event()
    done = threading.Barrier(2, timeout=WAIT_S)

    def rank_fn(rank):
        op = get_op(world, rank)
        got = [case.trip(op, 0, rank)]
        errors = []
        if rank == 1:
            del op
            moe_ep.clear_op_cache(world.communicator(1))  # this rank's cache only
            gc.collect()
            destroyed.set()
        else:
            assert destroyed.wait(WAIT_S)
            args = dispatch_args(case.inputs[1][rank])[0]
            errors = [timed(lambda: op.dispatch(*args)), timed(lambda: op.dispatch(*args))]
        done.wait()
        got.append(case.trip(get_op(world, rank, instance_id=1), 2, rank))
        return errors, got

    res = run_ranks(2, rank_fn)
    (err, seconds), (poisoned, _) = res[0][0]
    check_timeout(err, seconds, 0, "1")
    assert isinstance(poisoned, moe_ep.InvalidUsage) and "op unusable after" in str(poisoned)
    case.check([r[1] for r in res], [0, 2])


@pytest.mark.parametrize("timeout_s", [0.0001, -1.0, float("nan"), float("inf"), 2e9])
def test_world_timeout_outside_the_allowed_range_is_rejected(timeout_s):
    with pytest.raises(ValueError, match="timeout_s="):
        moe_ep.CpuWorld(2, timeout_s=timeout_s)
