"""Overlap hooks of decode mode from Python on the CPU backend (docs/decode-mode.md#overlap-hooks):
Op.low_latency_dispatch(..., return_recv_hook=True) -> (recv, handle, hook) and
Op.low_latency_combine(..., return_recv_hook=True) -> (out, hook).

Two micro-batches on two ops per rank (instance_id 0 and 1) in the overlapped order
    dispatch(A, hook), dispatch(B, hook), hook_A(), hook_B(), experts,
    combine(A, hook), combine(B, hook), hook_A(), hook_B()
at world sizes 1, 2 and 4 and several dtype pairs, two rounds per op, bit for bit equal to the
numpy reference and to the same calls without hooks; before its hook a dispatch's views hold
nothing of the call and a combine's out is untouched. Misuse, on every rank and at once: any other
call while a receive is pending (InvalidUsage naming the pending receive and what completes it), a
hook called twice, a receive of the other kind or with another handle (each rank alone); the op
works afterwards. return_recv_hook that is not a bool, or an argument this layer refuses, on one
rank fails every rank and leaves nothing pending. Inputs are seeded (conftest.py).
"""

import numpy as np
import pytest

import moe_ep
from test_cpu_ops import assert_bits_equal, dispatch_args
from test_decode_cpu import (H, TIMEOUT_S, check_ll_rounds, ll_config, ll_op, ll_snapshot,
                             ll_y_pools, poison_unused_rows, run_ll_rounds)
from test_reject_cpu import BAD, FAST_S, timed

HOOK_PAIRS = [("fp8", "fp8"), ("bf16", "int8_e3m4"), ("fp4", "bf16"), ("fp8", "fp8_direct_cast")]


def run_two_micro_batches(run_ranks, cfg, rounds_a, rounds_b, ypools_a, ypools_b):
    """On every rank: ops A (instance 0) and B (instance 1), then per round the overlapped
    sequence with hooks. Returns [rank] = (got_a, got_b, checks), got_* in run_ll_rounds' form
    and checks the views seen before each hook ran; nothing is asserted inside the threads."""
    w = len(rounds_a[0])
    world = moe_ep.CpuWorld(w, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        ops = (ll_op(world, rank, cfg), ll_op(world, rank, cfg, instance_id=1))
        got, checks = ([], []), []
        for i in range(len(rounds_a)):
            inputs = (rounds_a[i][rank], rounds_b[i][rank])
            ypools = (ypools_a[i][rank], ypools_b[i][rank])
            dispatched = []
            for m in range(2):
                args, kwargs = dispatch_args(inputs[m])
                dispatched.append(ops[m].low_latency_dispatch(*args, **kwargs,
                                                              return_recv_hook=True))
            # The first round's slabs were never filled: their counts are still 0 before the hook.
            counts_before = [np.array(d[0].recv_count, copy=True) for d in dispatched]
            for _, _, hook in dispatched:
                hook()
            snaps = [ll_snapshot(recv) for recv, _, _ in dispatched]
            ys = [poison_unused_rows(ypools[m], snaps[m]["recv_count"]) for m in range(2)]
            outs = [np.full((len(inputs[m]["topk_idx"]), H), 0xA5A5, dtype=np.uint16)
                    for m in range(2)]
            hooks = []
            for m in range(2):
                res, hook = ops[m].low_latency_combine(ys[m], dispatched[m][1], out=outs[m],
                                                       return_recv_hook=True)
                hooks.append((res, hook))
            untouched = [bool((o == 0xA5A5).all()) for o in outs]
            for _, hook in hooks:
                hook()
            for m in range(2):
                got[m].append((snaps[m], ys[m], np.array(hooks[m][0], copy=True),
                               hooks[m][0] is outs[m]))
            checks.append((counts_before, untouched, [type(d[2]).__name__ for d in dispatched]))
        return got[0], got[1], checks

    return run_ranks(w, rank_fn)


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("d,c", HOOK_PAIRS)
def test_two_micro_batches_equal_the_reference_and_the_calls_without_hooks(
        world_size, d, c, rng, run_ranks, make_inputs, random_bf16):
    e = 4 * world_size
    cfg = ll_config(d, c, e=e, k=3, max_t=10)
    tokens = [[10, 3, 0, 7], [2, 10, 6, 0]]
    rounds_a = [make_inputs(rng, world_size, e, 3, H, t[:world_size]) for t in tokens]
    rounds_b = [make_inputs(rng, world_size, e, 3, H, t[::-1][:world_size]) for t in tokens]
    ypools_a = ll_y_pools(rng, random_bf16, world_size, cfg, 2)
    ypools_b = ll_y_pools(rng, random_bf16, world_size, cfg, 2)
    res = run_two_micro_batches(run_ranks, cfg, rounds_a, rounds_b, ypools_a, ypools_b)
    got_a, got_b = [r[0] for r in res], [r[1] for r in res]
    check_ll_rounds(got_a, cfg, rounds_a)
    check_ll_rounds(got_b, cfg, rounds_b)
    for rank, (_, _, checks) in enumerate(res):
        counts_before, _, _ = checks[0]
        assert all(not cb.any() for cb in counts_before), (rank, counts_before)
        for i, (_, untouched, hook_types) in enumerate(checks):
            assert untouched == [True, True], (rank, i)
            assert hook_types == ["RecvHook", "RecvHook"], (rank, i)
    # The same calls without hooks, one op per micro-batch, give the same bits.
    for rounds, ypools, got in ((rounds_a, ypools_a, got_a), (rounds_b, ypools_b, got_b)):
        plain = run_ll_rounds(run_ranks, cfg, rounds, ypools)
        for rank in range(world_size):
            for i in range(len(rounds)):
                where = f"rank {rank} round {i}: hooks against none"
                for f in ("recv_count", "recv_src_rank", "recv_src_token", "recv_src_slot"):
                    assert_bits_equal(f"{where} {f}", got[rank][i][0][f], plain[rank][i][0][f])
                assert_bits_equal(f"{where} out", got[rank][i][2], plain[rank][i][2])


def test_combine_hook_allocates_and_keeps_out(rng, run_ranks, make_inputs, random_bf16):
    # out=None: the hook keeps the allocated out alive; the caller may drop its own reference.
    w = 2
    cfg = ll_config("fp8", "bf16", e=8, k=2, max_t=8)
    rounds = [make_inputs(rng, w, 8, 2, H, [8, 5])]
    ypools = ll_y_pools(rng, random_bf16, w, cfg, 1)
    world = moe_ep.CpuWorld(w, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = ll_op(world, rank, cfg)
        recv, handle = op.low_latency_dispatch(*dispatch_args(rounds[0][rank])[0])
        snap = ll_snapshot(recv)
        y = poison_unused_rows(ypools[0][rank], snap["recv_count"])
        out, hook = op.low_latency_combine(y, handle, return_recv_hook=True)
        keep = id(out)
        del out
        hook()
        return [(snap, y, np.array(hook._keep, copy=True), id(hook._keep) == keep)]

    check_ll_rounds(run_ranks(w, rank_fn), cfg, rounds)


# ---------------------------------------------------------------------------------------------
# Misuse

def test_calls_while_a_receive_is_pending_fail_on_every_rank(rng, run_ranks, make_inputs,
                                                             random_bf16):
    w = 2
    cfg = ll_config("fp8", "int8_e3m4", e=8, k=3, max_t=8)
    rounds = [make_inputs(rng, w, 8, 3, H, [6, 8])]
    ypools = ll_y_pools(rng, random_bf16, w, cfg, 1)
    world = moe_ep.CpuWorld(w, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = ll_op(world, rank, cfg)
        args = dispatch_args(rounds[0][rank])[0]
        recv, handle, hook = op.low_latency_dispatch(*args, return_recv_hook=True)
        y0 = np.zeros((4, 16, H), dtype=np.uint16)
        errors = {
            "low_latency_dispatch": timed(lambda: op.low_latency_dispatch(*args)),
            "dispatch": timed(lambda: op.dispatch(*args)),
            "low_latency_combine": timed(lambda: op.low_latency_combine(y0, handle)),
            "combine hook": timed(lambda: op._op.low_latency_combine_recv(handle)),
        }
        hook()
        snap = ll_snapshot(recv)
        errors["hook twice"] = timed(hook)
        y = poison_unused_rows(ypools[0][rank], snap["recv_count"])
        out, chook = op.low_latency_combine(y, handle, return_recv_hook=True)
        errors["dispatch hook"] = timed(lambda: op._op.low_latency_dispatch_recv(handle))
        errors["int8 y"] = timed(lambda: op.low_latency_combine(y.astype(np.int8), handle))
        stale = op._op.low_latency_combine_recv
        errors["other handle"] = timed(lambda: stale(recv))  # not a handle at all
        chook()
        return errors, [(snap, y, np.array(out, copy=True), True)]

    res = run_ranks(w, rank_fn)
    pending = ("low_latency_dispatch_recv of low-latency dispatch call 1 of op uid",
               "is pending (the call was made with return_recv_hook=true)",
               "call low_latency_dispatch_recv(handle) first")
    for rank, (errors, _) in enumerate(res):
        for kind in ("low_latency_dispatch", "dispatch", "low_latency_combine"):
            err, seconds = errors[kind]
            assert isinstance(err, moe_ep.InvalidUsage) and isinstance(err, RuntimeError), err
            assert str(err).startswith(f"{kind}: "), str(err)
            assert all(p in str(err) for p in pending), str(err)
            assert seconds < FAST_S
        err, _ = errors["combine hook"]
        assert isinstance(err, moe_ep.InvalidUsage), err
        assert "low_latency_combine_recv: the receive pending on op uid" in str(err), str(err)
        err, _ = errors["hook twice"]
        assert isinstance(err, moe_ep.InvalidUsage), err
        assert str(err).startswith("low_latency_dispatch_recv: no receive is pending"), str(err)
        err, _ = errors["dispatch hook"]
        assert isinstance(err, moe_ep.InvalidUsage), err
        assert "is low_latency_combine_recv of the low-latency combine of low-latency " \
               "dispatch call 1" in str(err), str(err)
        # This layer refuses y on every rank: collective, and it names the pending receive.
        err, seconds = errors["int8 y"]
        assert isinstance(err, moe_ep.InvalidArgument), err
        assert str(err).startswith("low_latency_combine: y"), str(err)
        assert "dtype int8 is not supported" in str(err), str(err)
        assert "; also, low_latency_combine_recv of the low-latency combine" in str(err), str(err)
        assert seconds < FAST_S
        err, _ = errors["other handle"]
        assert isinstance(err, moe_ep.InvalidArgument), err
        assert str(err).startswith("low_latency_combine_recv: handle: expected the "
                                   "moe_ep.LowLatencyHandle"), str(err)
    check_ll_rounds([r[1] for r in res], cfg, rounds)


def test_hook_of_another_call_is_refused_and_the_pending_one_still_works(rng, run_ranks,
                                                                         make_inputs,
                                                                         random_bf16):
    w = 2
    cfg = ll_config("bf16", "fp8", e=8, k=2, max_t=8)
    rounds = [make_inputs(rng, w, 8, 2, H, t) for t in ([8, 3], [4, 6])]
    ypools = ll_y_pools(rng, random_bf16, w, cfg, 2)
    world = moe_ep.CpuWorld(w, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = ll_op(world, rank, cfg)
        got, errors = [], []
        for i in range(2):
            recv, handle, hook = op.low_latency_dispatch(*dispatch_args(rounds[i][rank])[0],
                                                         return_recv_hook=True)
            if i == 0:
                first_hook = hook
            else:
                errors.append(timed(first_hook))  # round 0's hook, round 1's receive pending
            hook()
            snap = ll_snapshot(recv)
            y = poison_unused_rows(ypools[i][rank], snap["recv_count"])
            got.append((snap, y, np.array(op.low_latency_combine(y, handle)), True))
        return errors, got

    res = run_ranks(w, rank_fn)
    for errors, _ in res:
        (err, seconds), = errors
        assert isinstance(err, moe_ep.InvalidArgument), err
        assert str(err).startswith("low_latency_dispatch_recv: handle is low-latency dispatch "
                                   "call 1"), str(err)
        assert "but the pending receive is low_latency_dispatch_recv of low-latency dispatch " \
               "call 2" in str(err), str(err)
        assert seconds < FAST_S
    check_ll_rounds([r[1] for r in res], cfg, rounds)


@pytest.mark.parametrize("call", ["low_latency_dispatch", "low_latency_combine"])
def test_return_recv_hook_must_be_a_bool_on_every_rank(call, rng, run_ranks, make_inputs,
                                                       random_bf16):
    # One rank passes 1: every rank's call fails at once and nothing is pending anywhere.
    w = 3
    cfg = ll_config("fp4", "fp8", e=12, k=3, max_t=8)
    rounds = [make_inputs(rng, w, 12, 3, H, [8, 0, 5])]
    ypools = ll_y_pools(rng, random_bf16, w, cfg, 1)
    world = moe_ep.CpuWorld(w, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = ll_op(world, rank, cfg)
        args = dispatch_args(rounds[0][rank])[0]
        flag = 1 if rank == BAD else True
        if call == "low_latency_dispatch":
            error = timed(lambda: op.low_latency_dispatch(*args, return_recv_hook=flag))
            recv, handle, hook = op.low_latency_dispatch(*args, return_recv_hook=True)
            hook()
        else:
            recv, handle = op.low_latency_dispatch(*args)
        snap = ll_snapshot(recv)
        y = poison_unused_rows(ypools[0][rank], snap["recv_count"])
        if call == "low_latency_combine":
            error = timed(lambda: op.low_latency_combine(y, handle, return_recv_hook=flag))
        nothing = timed(lambda: op._op.low_latency_combine_recv(handle))
        return error, nothing, [(snap, y, np.array(op.low_latency_combine(y, handle)), True)]

    res = run_ranks(w, rank_fn)
    for rank, ((err, seconds), (nothing, _), _) in enumerate(res):
        assert isinstance(err, moe_ep.InvalidArgument), (rank, err)
        assert "return_recv_hook=1 is not a bool (int)" in str(err), str(err)
        if rank != BAD:
            assert str(err).startswith(f"{call} aborted: rank {BAD} rejected its input: "), str(err)
        assert seconds < FAST_S
        assert isinstance(nothing, moe_ep.InvalidUsage), nothing
        assert "no receive is pending" in str(nothing), str(nothing)
    check_ll_rounds([r[2] for r in res], cfg, rounds)
