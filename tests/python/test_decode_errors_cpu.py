"""Decode mode's errors from Python on the CPU backend, collective like every call: decode calls
on an op created without low_latency, wrong shapes and dtypes, T > Tmax, stale handles, handles
of another op or of the other mode, a low_latency that is not a bool, a decode call meeting a
normal one (out of step); after each the op works and nothing was written. The helpers and the
shapes are test_decode_cpu.py's. Inputs are seeded (conftest.py); the seed is printed.
"""

import numpy as np
import pytest

import moe_ep
import np_reference as ref
from test_cpu_ops import check_pipeline, dispatch_args, snapshot, y_pools
from test_decode_cpu import (E, H, K, MAX_T, TIMEOUT_S, check_ll_rounds, ll_config, ll_op,
                             ll_snapshot, ll_y_pools, poison_unused_rows)
from test_reject_cpu import FAST_S, check_collective_rejection, timed

BAD = 1


def test_decode_calls_on_an_op_without_low_latency(rng, run_ranks, make_inputs, random_bf16):
    w = 2
    cfg = {"E": 8, "K": 2, "H": H, "max_t": 8, "d": "fp8", "c": "bf16"}
    inputs = make_inputs(rng, w, 8, 2, H, [5, 8])
    ypool = y_pools(rng, random_bf16, w, 8, H, 1)[0]
    world = moe_ep.CpuWorld(w, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        plain = moe_ep.get_op(world.communicator(rank), 8, 2, H, 8, dispatch_dtype="fp8",
                              combine_dtype="bf16")
        ll = moe_ep.get_op(world.communicator(rank), 8, 2, H, 8, dispatch_dtype="fp8",
                           combine_dtype="bf16", low_latency=True)
        args = dispatch_args(inputs[rank])[0]
        errors = [timed(lambda: plain.low_latency_dispatch(*args))]
        _, ll_handle = ll.low_latency_dispatch(*args)
        y = np.zeros((4, 16, H), dtype=np.uint16)
        errors.append(timed(lambda: plain.low_latency_combine(y, ll_handle)))
        ll.low_latency_combine(y, ll_handle)
        recv, handle = plain.dispatch(*args)  # the plain op works
        snap = snapshot(recv)
        out = plain.combine(ypool[rank][:recv.num_recv], handle)
        return errors, [(snap, np.array(out, copy=True))]

    res = run_ranks(w, rank_fn)
    for rank, (errors, _) in enumerate(res):
        for (err, seconds), kind in zip(errors, ("low_latency_dispatch", "low_latency_combine")):
            assert isinstance(err, moe_ep.InvalidArgument), (rank, err)
            assert str(err).startswith(f"{kind}: this op was created with low_latency=false"), (
                rank, str(err))
            assert seconds < FAST_S
    check_pipeline([r[1] for r in res], cfg, [inputs], [ypool])


def ll_dispatch_cases(max_t):
    def too_many(x, i, w):
        t = max_t + 1
        return dict(x=np.zeros((t, H), dtype=np.uint16), topk_idx=np.full((t, K), -1, np.int32),
                    topk_weights=np.zeros((t, K), dtype=np.float32))
    return {
        "T > Tmax": ("num_tokens", f"exceeds max_tokens_per_rank={max_t}", too_many),
        "x columns": ("x", "columns, expected 256 (hidden)",
                      lambda x, i, w: dict(x=np.zeros((len(x), H + 32), dtype=np.uint16))),
        "float32 x": ("x", "x has dtype fp32", lambda x, i, w: dict(x=ref.bf16_to_f32(x))),
        "int16 topk_idx": ("topk_idx", "dtype int16 is not supported",
                           lambda x, i, w: dict(topk_idx=i.astype(np.int16))),
        "topk_idx rows": ("topk_idx", "rows, expected",
                          lambda x, i, w: dict(topk_idx=np.vstack([i, i]))),
        "id out of range": ("topk_idx", "out of range",
                            lambda x, i, w: dict(topk_idx=np.full_like(i, E))),
        "3-D x": ("x", "3 dimensions", lambda x, i, w: dict(x=x.reshape(len(x), 2, H // 2))),
        "list weights": ("topk_weights", "expected a tensor",
                         lambda x, i, w: dict(topk_weights=w.tolist())),
        "x_scales with bf16 x": ("x_scales", "must be undefined when x is bf16",
                                 lambda x, i, w: dict(x_scales=np.ones((len(x), 2), np.float32))),
    }


@pytest.mark.parametrize("case", list(ll_dispatch_cases(MAX_T)))
def test_bad_low_latency_dispatch_fails_every_rank(case, rng, run_ranks, make_inputs,
                                                   random_bf16):
    w = 3
    arg, fragment, change = ll_dispatch_cases(MAX_T)[case]
    cfg = ll_config("fp8", "int8_e3m4", e=12, k=K, max_t=MAX_T)
    rounds = [make_inputs(rng, w, 12, K, H, t) for t in ([7, 5, 0], [24, 1, 3])]
    ypools = ll_y_pools(rng, random_bf16, w, cfg, 2)
    world = moe_ep.CpuWorld(w, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = ll_op(world, rank, cfg)
        got = []
        args = dispatch_args(rounds[0][rank])[0]
        recv, handle = op.low_latency_dispatch(*args)
        inp = rounds[1][rank]
        kwargs = dict(x=inp["x"], topk_idx=inp["topk_idx"], topk_weights=inp["topk_weights"])
        if rank == BAD:
            kwargs.update(change(inp["x"], inp["topk_idx"], inp["topk_weights"]))
        error = timed(lambda: op.low_latency_dispatch(**kwargs))
        # The rejected dispatch changed nothing: round 0's outputs and handle are still good.
        snap = ll_snapshot(recv)
        y = poison_unused_rows(ypools[0][rank], snap["recv_count"])
        got.append((snap, y, np.array(op.low_latency_combine(y, handle)), True))
        recv, handle = op.low_latency_dispatch(*dispatch_args(inp)[0])
        snap = ll_snapshot(recv)
        y = poison_unused_rows(ypools[1][rank], snap["recv_count"])
        got.append((snap, y, np.array(op.low_latency_combine(y, handle)), True))
        return error, got

    res = run_ranks(w, rank_fn)
    check_collective_rejection([r[0] for r in res], "low_latency_dispatch", arg, fragment)
    check_ll_rounds([r[1] for r in res], cfg, rounds)


def ll_combine_cases(epr, slab):
    return {
        "2-D y": ("y", "has the wrong shape, expected bf16[",
                  lambda y, out, h, other: dict(y=y.reshape(epr * slab, H))),
        "y slab rows": ("y", "has the wrong shape",
                        lambda y, out, h, other: dict(y=y[:, :slab - 1].copy())),
        "float32 y": ("y", "y has dtype fp32",
                      lambda y, out, h, other: dict(y=ref.bf16_to_f32(y))),
        "4-D y": ("y", "4 dimensions; y takes 1-D to 3-D tensors",
                  lambda y, out, h, other: dict(y=y.reshape(epr, slab, 2, H // 2))),
        "int8 y": ("y", "dtype int8 is not supported",
                   lambda y, out, h, other: dict(y=y.astype(np.int8))),
        "non-contiguous y": ("y", "not contiguous",
                             lambda y, out, h, other: dict(y=np.repeat(y, 2, axis=2)[:, :, ::2])),
        "out rows": ("out", "rows, expected",
                     lambda y, out, h, other: dict(out=np.zeros((len(out) + 1, H), np.uint16))),
        "read-only out": ("out", "read-only", lambda y, out, h, other: dict(out=out)),
        "normal handle": ("handle", "expected the moe_ep.LowLatencyHandle of a "
                          "low_latency_dispatch, got Handle",
                          lambda y, out, h, other: dict(handle=other[1])),
        "handle of another op": ("handle", "handle belongs to op uid",
                                 lambda y, out, h, other: dict(handle=other[0])),
        "str handle": ("handle", "got str", lambda y, out, h, other: dict(handle="h")),
    }


@pytest.mark.parametrize("case", list(ll_combine_cases(1, 1)))
def test_bad_low_latency_combine_fails_every_rank(case, rng, run_ranks, make_inputs,
                                                  random_bf16):
    w, e, max_t = 3, 12, 8
    epr, slab = e // w, w * max_t
    arg, fragment, change = ll_combine_cases(epr, slab)[case]
    cfg = ll_config("fp4", "fp8", e=e, k=3, max_t=max_t)
    rounds = [make_inputs(rng, w, e, 3, H, [8, 3, 0])]
    ypools = ll_y_pools(rng, random_bf16, w, cfg, 1)
    world = moe_ep.CpuWorld(w, timeout_s=TIMEOUT_S)
    sentinel = 0x1234

    def rank_fn(rank):
        op = ll_op(world, rank, cfg)
        other = ll_op(world, rank, cfg, instance_id=1)
        args = dispatch_args(rounds[0][rank])[0]
        _, other_handle = other.low_latency_dispatch(*args)
        _, normal_handle = op.dispatch(*args)
        recv, handle = op.low_latency_dispatch(*args)
        snap = ll_snapshot(recv)
        y = poison_unused_rows(ypools[0][rank], snap["recv_count"])
        out = np.full((len(args[0]), H), sentinel, dtype=np.uint16)
        if rank == BAD and case == "read-only out":
            out.setflags(write=False)
        call = dict(y=y, handle=handle, out=out)
        if rank == BAD:
            call.update(change(y, out, handle, (other_handle, normal_handle)))
        error = timed(lambda: op.low_latency_combine(**call))
        untouched = bool((out == sentinel).all())
        good = np.array(op.low_latency_combine(y, handle))  # the handle is still the latest
        return error, untouched, [(snap, y, good, True)]

    res = run_ranks(w, rank_fn)
    check_collective_rejection([r[0] for r in res], "low_latency_combine", arg, fragment)
    assert [r[1] for r in res] == [True] * w
    check_ll_rounds([r[2] for r in res], cfg, rounds)


def test_stale_handle_and_cross_mode_handles(rng, run_ranks, make_inputs, random_bf16):
    w = 2
    cfg = ll_config("bf16", "bf16", e=8, k=2, max_t=8)
    rounds = [make_inputs(rng, w, 8, 2, H, t) for t in ([8, 3], [4, 6])]
    ypools = ll_y_pools(rng, random_bf16, w, cfg, 2)
    world = moe_ep.CpuWorld(w, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = ll_op(world, rank, cfg)
        _, first = op.low_latency_dispatch(*dispatch_args(rounds[0][rank])[0])
        recv, second = op.low_latency_dispatch(*dispatch_args(rounds[1][rank])[0])
        snap = ll_snapshot(recv)
        y = poison_unused_rows(ypools[1][rank], snap["recv_count"])
        errors = [timed(lambda: op.low_latency_combine(y, first))]
        nrecv, nhandle = op.dispatch(*dispatch_args(rounds[0][rank])[0])
        ny = np.zeros((nrecv.num_recv, H), dtype=np.uint16)
        errors.append(timed(lambda: op.combine(ny, second)))  # a decode handle in normal mode
        op.combine(ny, nhandle)
        good = np.array(op.low_latency_combine(y, second))
        return errors, [(snap, y, good, True)]

    res = run_ranks(w, rank_fn)
    for rank, (errors, _) in enumerate(res):
        (stale, s1), (cross, s2) = errors
        assert isinstance(stale, moe_ep.InvalidArgument) and isinstance(cross,
                                                                         moe_ep.InvalidArgument)
        assert str(stale).startswith("low_latency_combine: handle is from low-latency dispatch "
                                     "call 1"), str(stale)
        # Both ranks refused their own call: each raises its own reason.
        assert str(cross).startswith("combine: handle: expected the moe_ep.Handle of a "
                                     "dispatch, got LowLatencyHandle"), str(cross)
        assert max(s1, s2) < FAST_S
    check_ll_rounds([r[1] for r in res], cfg, rounds[1:])


def test_low_latency_must_be_a_bool_on_every_rank(rng, run_ranks, make_inputs, random_bf16):
    w = 3
    world = moe_ep.CpuWorld(w, timeout_s=10)
    cfg = ll_config("bf16", "int8_e3m4", e=12, k=3, max_t=8)
    rounds = [make_inputs(rng, w, 12, 3, H, [8, 0, 5])]
    ypools = ll_y_pools(rng, random_bf16, w, cfg, 1)

    def rank_fn(rank):
        flag = 1 if rank == BAD else True
        error = timed(lambda: moe_ep.get_op(world.communicator(rank), 12, 3, H, 8,
                                            dispatch_dtype="bf16", combine_dtype="int8_e3m4",
                                            low_latency=flag))
        op = ll_op(world, rank, cfg, instance_id=1)  # the next creation works
        recv, handle = op.low_latency_dispatch(*dispatch_args(rounds[0][rank])[0])
        snap = ll_snapshot(recv)
        y = poison_unused_rows(ypools[0][rank], snap["recv_count"])
        return error, [(snap, y, np.array(op.low_latency_combine(y, handle)), True)]

    res = run_ranks(w, rank_fn)
    for rank, ((err, seconds), _) in enumerate(res):
        assert isinstance(err, moe_ep.InvalidArgument), (rank, err)
        assert "low_latency=1 is not a bool (int)" in str(err), str(err)
        if rank != BAD:
            assert str(err).startswith(f"create_op aborted: rank {BAD} rejected its "
                                       "configuration: "), str(err)
        assert seconds < FAST_S
    check_ll_rounds([r[1] for r in res], cfg, rounds)


def test_decode_call_meeting_a_normal_call_is_out_of_step(rng, run_ranks, make_inputs,
                                                          random_bf16):
    w = 2
    cfg = ll_config("fp8", "fp8", e=8, k=2, max_t=8)
    rounds = [make_inputs(rng, w, 8, 2, H, [6, 3])]
    ypools = ll_y_pools(rng, random_bf16, w, cfg, 1)
    world = moe_ep.CpuWorld(w, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = ll_op(world, rank, cfg)
        args = dispatch_args(rounds[0][rank])[0]
        call = op.low_latency_dispatch if rank == 0 else op.dispatch
        error = timed(lambda: call(*args))
        recv, handle = op.low_latency_dispatch(*args)  # in step again: low_latency_dispatch #1
        snap = ll_snapshot(recv)
        y = poison_unused_rows(ypools[0][rank], snap["recv_count"])
        return error, [(snap, y, np.array(op.low_latency_combine(y, handle)), True)]

    res = run_ranks(w, rank_fn)
    for rank, ((err, seconds), _) in enumerate(res):
        mine, theirs = (("low_latency_dispatch #1", "dispatch #1") if rank == 0 else
                        ("dispatch #1", "low_latency_dispatch #1"))
        assert isinstance(err, moe_ep.InvalidUsage), (rank, err)
        assert (f"calls out of step: rank {rank} is in {mine}, rank {1 - rank} in {theirs}"
                in str(err)), str(err)
        assert seconds < FAST_S
    check_ll_rounds([r[1] for r in res], cfg, rounds)


def test_one_rank_op_reject_kinds():
    op = moe_ep.get_op(moe_ep.CpuWorld(1, timeout_s=TIMEOUT_S).communicator(0), 8, 2, H, 8,
                       dispatch_dtype="bf16", combine_dtype="bf16", low_latency=True)
    for kind in ("low_latency_dispatch", "low_latency_combine"):
        with pytest.raises(moe_ep.InvalidArgument, match=f"^{kind}: my reason"):
            op._op.reject(kind, "my reason")
    with pytest.raises(moe_ep.InvalidArgument) as info:
        op._op.reject("decode", "x")
    assert "valid: dispatch|combine|low_latency_dispatch|low_latency_combine" in str(info.value)
    # After the rejections the op works at one rank: out = bf16(w * y) of the single slot.
    x = ref.f32_to_bf16(np.ones((3, H), dtype=np.float32))
    idx = np.array([[0, -1], [5, -1], [-1, -1]], dtype=np.int32)
    wts = np.array([[0.5, 9.0], [2.0, 9.0], [1.0, 1.0]], dtype=np.float32)
    recv, handle = op.low_latency_dispatch(x, idx, wts)
    y = np.zeros((8, 8, H), dtype=np.uint16)
    y[0, 0] = ref.f32_to_bf16(np.full(H, 3.0, dtype=np.float32))
    y[5, 0] = ref.f32_to_bf16(np.full(H, -1.5, dtype=np.float32))
    out = ref.bf16_to_f32(op.low_latency_combine(y, handle))
    assert (out[0] == 1.5).all() and (out[1] == -3.0).all() and (out[2] == 0).all()
    assert np.asarray(recv.recv_count).tolist() == [1, 0, 0, 0, 0, 1, 0, 0]
