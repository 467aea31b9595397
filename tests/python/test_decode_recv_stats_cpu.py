"""low_latency_dispatch's cumulative_local_expert_recv_stats on the CPU backend (DeepEP's
argument of that name, docs/decode-mode.md#coming-from-deepeps-low-latency-mode): each call adds
its recv_count to the caller's int32 [E/W] array, at the call or, with return_recv_hook, in
hook(); a call that fails leaves it as it was; a bad array is refused on every rank, naming the
argument. Inputs are seeded (conftest.py); the seed is printed."""

import numpy as np

import moe_ep
from test_cpu_ops import dispatch_args

W, E, K, H, MAX_T = 2, 8, 3, 128, 6
TIMEOUT_S = 30


def ll_op(world, rank):
    return moe_ep.get_op(world.communicator(rank), E, K, H, MAX_T, dispatch_dtype="fp8",
                         combine_dtype="bf16", low_latency=True)


def test_counts_add_up_over_calls_and_hooks(rng, run_ranks, make_inputs):
    rounds = [make_inputs(rng, W, E, K, H, [6, 4]) for _ in range(3)]
    world = moe_ep.CpuWorld(W, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = ll_op(world, rank)
        stats = np.array([5, -2, 0, 7], dtype=np.int32)  # whatever the caller had
        start = stats.copy()
        counts, seen = [], []
        for i, inputs in enumerate(rounds):
            args = dispatch_args(inputs[rank])[0]
            if i == 1:  # a hooked call adds in its hook, not before
                recv, handle, hook = op.low_latency_dispatch(
                    *args, return_recv_hook=True, cumulative_local_expert_recv_stats=stats)
                seen.append(stats.copy())
                hook()
            else:
                recv, handle = op.low_latency_dispatch(
                    *args, cumulative_local_expert_recv_stats=stats)
            counts.append(np.array(recv.recv_count, copy=True))
            seen.append(stats.copy())
            y = np.zeros(recv.recv_x.shape[:2] + (H,), dtype=np.uint16)
            op.low_latency_combine(y, handle)
        return start, counts, seen

    for start, counts, seen in run_ranks(W, rank_fn):
        assert sum(int(c.sum()) for c in counts) > 0  # rows moved
        assert np.array_equal(seen[0], start + counts[0])
        assert np.array_equal(seen[1], start + counts[0])  # the hooked call, before its hook
        assert np.array_equal(seen[2], start + counts[0] + counts[1])
        assert np.array_equal(seen[3], start + counts[0] + counts[1] + counts[2])
    moe_ep.clear_op_cache()


def test_a_bad_array_is_refused_on_every_rank(rng, run_ranks_outcomes, make_inputs):
    inputs = make_inputs(rng, W, E, K, H, [3, 2])
    world = moe_ep.CpuWorld(W, timeout_s=TIMEOUT_S)
    bad = {0: np.zeros(4, dtype=np.int64), 1: np.zeros(4, dtype=np.int32)}

    def rank_fn(rank):
        op = ll_op(world, rank)
        stats = bad[rank]
        before = stats.copy()
        try:
            op.low_latency_dispatch(*dispatch_args(inputs[rank])[0],
                                    cumulative_local_expert_recv_stats=stats)
        except moe_ep.InvalidArgument as e:
            return str(e), np.array_equal(stats, before)
        return "no error", False

    outcomes = run_ranks_outcomes(W, rank_fn)
    for rank, (message, untouched) in enumerate(outcomes):
        assert "cumulative_local_expert_recv_stats" in message, (rank, message)
        assert untouched, rank
    assert "int32" in outcomes[0][0] and "rank 0" in outcomes[1][0], outcomes
    moe_ep.clear_op_cache()
