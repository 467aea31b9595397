"""Errors of moe_ep on the CPU backend, from Python.

The exception family (each moe_ep error derives from moe_ep.Error, carries .code and also
derives from the matching built-in: InvalidArgument is a ValueError, Timeout a TimeoutError, the
rest RuntimeError); bad dispatch and combine arguments (dtype, shape, layout, too many tokens,
expert ids out of range, x_scales that do not fit) each raise ValueError whose message names the
argument and leave the op usable; stale and foreign handles (InvalidArgument); bad get_op
configurations (E % W != 0, hidden not a multiple of the block size) raise ValueError naming the
field on every rank; a rank that never calls makes the others raise Timeout within a few
seconds, poisons their op (InvalidUsage afterwards) and the late rank gets RemoteError. That
these rejections reach every rank is test_reject_cpu.py's subject.
"""

import threading
import time

import numpy as np
import pytest

import moe_ep
import np_reference as ref

E, K, H, MAX_T = 8, 2, 256, 8
TIMEOUT_S = 30


@pytest.mark.parametrize("name,builtin", [
    ("InvalidArgument", ValueError), ("InvalidUsage", RuntimeError), ("Timeout", TimeoutError),
    ("RemoteError", RuntimeError), ("CudaError", RuntimeError), ("NcclError", RuntimeError),
    ("InternalError", RuntimeError)])
def test_exception_family(name, builtin):
    cls = getattr(moe_ep, name)
    assert issubclass(cls, moe_ep.Error) and issubclass(cls, builtin)
    assert issubclass(moe_ep.Error, Exception)
    assert isinstance(cls.code, str) and name.startswith(cls.code)  # InternalError: "Internal"
    others = {ValueError, TimeoutError, RuntimeError} - {builtin}
    assert not any(issubclass(cls, b) and not issubclass(builtin, b) for b in others)


def test_raised_errors_carry_their_code():
    with pytest.raises(moe_ep.Error) as info:
        moe_ep.resolve_dtypes("bf16", dispatch_dtype="fp16", env={})
    assert type(info.value) is moe_ep.InvalidArgument and info.value.code == "InvalidArgument"


def one_rank_op(d="fp8", c="bf16"):
    return moe_ep.get_op(moe_ep.CpuWorld(1, timeout_s=TIMEOUT_S).communicator(0), E, K, H, MAX_T,
                         dispatch_dtype=d, combine_dtype=c)


def valid_inputs(rng, t=5):
    x = ref.f32_to_bf16(rng.normal(size=(t, H)).astype(np.float32))
    idx = np.stack([rng.permutation(E)[:K] for _ in range(t)]).astype(np.int32)
    w = rng.random((t, K)).astype(np.float32)
    return x, idx, w


def round_trip(op, x, idx, w):
    """A valid dispatch and combine: the op still works."""
    recv, handle = op.dispatch(x, idx, w)
    y = np.zeros((recv.num_recv, H), dtype=np.uint16)
    out = op.combine(y, handle)
    assert out.shape == (len(x), H) and not out.any()
    return recv.num_recv


def bad_dispatch_cases(x, idx, w):
    t = len(x)
    wide = np.zeros((t, 2 * H), dtype=np.uint16)
    return [
        ("x", "fp32", dict(x=ref.bf16_to_f32(x))),
        ("x", "dtype float64 is not supported", dict(x=ref.bf16_to_f32(x).astype(np.float64))),
        ("x", "dtype float16 is not supported", dict(x=ref.bf16_to_f32(x).astype(np.float16))),
        ("x", "columns", dict(x=np.zeros((t, H + 128), dtype=np.uint16))),
        ("x", "3 dimensions", dict(x=x.reshape(t, 2, H // 2))),
        ("x", "contiguous", dict(x=wide[:, ::2])),
        ("x", "contiguous", dict(x=np.zeros((H, t), dtype=np.uint16).T)),
        ("x", "x is None", dict(x=None)),
        ("x", "got list", dict(x=x.tolist())),
        ("num_tokens", "max_tokens_per_rank", dict(
            x=np.zeros((MAX_T + 1, H), dtype=np.uint16),
            topk_idx=np.zeros((MAX_T + 1, K), dtype=np.int32),
            topk_weights=np.zeros((MAX_T + 1, K), dtype=np.float32))),
        ("topk_idx", "dtype int16 is not supported", dict(topk_idx=idx.astype(np.int16))),
        ("topk_idx", "dtype uint64 is not supported", dict(topk_idx=idx.astype(np.uint64))),
        ("topk_idx", "dtype int8 is not supported", dict(topk_idx=idx.astype(np.int8))),
        ("topk_idx", "columns", dict(topk_idx=np.zeros((t, K + 1), dtype=np.int32))),
        ("topk_idx", "rows", dict(topk_idx=np.zeros((t + 1, K), dtype=np.int32))),
        ("topk_idx", "out of range", dict(topk_idx=np.full((t, K), E, dtype=np.int32))),
        ("topk_idx", "out of range", dict(topk_idx=np.full((t, K), -2, dtype=np.int32))),
        ("topk_idx", "contiguous", dict(topk_idx=np.zeros((t, 2 * K), dtype=np.int32)[:, ::2])),
        ("topk_weights", "dtype float64 is not supported", dict(topk_weights=w.astype(np.float64))),
        ("topk_weights", "columns", dict(topk_weights=np.zeros((t, 1), dtype=np.float32))),
        ("topk_weights", "dtype complex64 is not supported",
         dict(topk_weights=w.astype(np.complex64))),
        ("x_scales", "bf16", dict(x_scales=np.ones((t, H // 128), dtype=np.float32))),
        ("x_scales", "x_scales", dict(x=np.zeros((t, H), dtype=np.uint8))),  # none given
        ("x_scales", "columns", dict(x=np.zeros((t, H), dtype=np.uint8),
                                     x_scales=np.ones((t, 1), dtype=np.float32))),
        ("x_scales", "float64", dict(x=np.zeros((t, H), dtype=np.uint8),
                                     x_scales=np.ones((t, H // 128), dtype=np.float64))),
    ]


def test_bad_dispatch_arguments_name_the_argument(rng):
    op = one_rank_op()
    x, idx, w = valid_inputs(rng)
    for arg, fragment, change in bad_dispatch_cases(x, idx, w):
        kwargs = {"x": x, "topk_idx": idx, "topk_weights": w}
        kwargs.update(change)
        with pytest.raises(ValueError) as info:
            op.dispatch(**kwargs)
        msg = str(info.value)
        assert isinstance(info.value, moe_ep.InvalidArgument), (arg, fragment, msg)
        # The reason names the argument first (as the collective rejection tests check).
        assert msg.startswith(f"dispatch: {arg}") and fragment in msg, (arg, fragment, msg)
    assert round_trip(op, x, idx, w) == len(x)  # the op stayed usable


def test_bad_combine_arguments_name_the_argument(rng):
    op = one_rank_op()
    x, idx, w = valid_inputs(rng)
    recv, handle = op.dispatch(x, idx, w)
    r = recv.num_recv
    cases = [
        ("y", dict(y=np.zeros((r + 1, H), dtype=np.uint16))),
        ("y", dict(y=np.zeros((r, H // 2), dtype=np.uint16))),
        ("y", dict(y=np.zeros((r, H), dtype=np.float32))),
        ("y", dict(y=np.zeros((r, 2 * H), dtype=np.uint16)[:, ::2])),
        ("out", dict(out=np.zeros((len(x) + 1, H), dtype=np.uint16))),
        ("out", dict(out=np.zeros((len(x), H), dtype=np.float32))),
        ("out", dict(out=np.zeros((len(x), H), dtype=np.int8))),
        ("y", dict(y=None)),
        ("y", dict(y=[[0] * H] * r)),
        ("handle", dict(handle="not a handle")),
        ("handle", dict(handle=None, out=np.zeros((len(x), H), dtype=np.uint16))),
    ]
    for arg, change in cases:
        kwargs = {"y": np.zeros((r, H), dtype=np.uint16), "handle": handle}
        kwargs.update(change)
        with pytest.raises(moe_ep.InvalidArgument) as info:
            op.combine(**kwargs)
        assert str(info.value).startswith(f"combine: {arg}"), (arg, str(info.value))
    out = op.combine(np.zeros((r, H), dtype=np.uint16), handle)  # the handle is still good
    assert out.shape == (len(x), H)


def test_stale_handle_is_invalid_argument(rng):
    op = one_rank_op()
    x, idx, w = valid_inputs(rng)
    _, first = op.dispatch(x, idx, w)
    recv, second = op.dispatch(x[:3], idx[:3], w[:3])
    y = np.zeros((first.num_recv, H), dtype=np.uint16)
    # errors.h: a stale or foreign handle is an InvalidArgument (every rank rejects the call
    # together and the op stays usable), as in C++ (tests/test_cpu_errors.cc).
    with pytest.raises(moe_ep.InvalidArgument) as info:
        op.combine(y, first)
    assert isinstance(info.value, ValueError)
    assert "handle is from dispatch call 1" in str(info.value)
    assert "latest dispatch is call 2" in str(info.value)
    out = op.combine(np.zeros((recv.num_recv, H), dtype=np.uint16), second)
    assert out.shape == (3, H)


def test_handle_of_another_op_is_rejected(rng):
    a = one_rank_op("fp8", "bf16")
    b = one_rank_op("bf16", "bf16")
    x, idx, w = valid_inputs(rng)
    recv_a, handle_a = a.dispatch(x, idx, w)
    b.dispatch(x, idx, w)
    with pytest.raises(moe_ep.InvalidArgument) as info:
        b.combine(np.zeros((recv_a.num_recv, H), dtype=np.uint16), handle_a)
    assert "handle belongs to op uid" in str(info.value)


def test_one_rank_rejecting_its_input_fails_every_rank(rng, run_ranks_outcomes):
    world = moe_ep.CpuWorld(2, timeout_s=TIMEOUT_S)
    x, idx, w = valid_inputs(rng)

    def rank_fn(rank):
        op = moe_ep.get_op(world.communicator(rank), E, K, H, MAX_T, dispatch_dtype="fp4",
                           combine_dtype="fp8")
        bad_idx = np.full_like(idx, 99) if rank == 1 else idx
        err = None
        try:
            op.dispatch(x, bad_idx, w)
        except moe_ep.InvalidArgument as e:
            err = e
        recv, handle = op.dispatch(x, idx, w)  # both ranks go on with the same op
        op.combine(np.zeros((recv.num_recv, H), dtype=np.uint16), handle)
        return err

    outcomes = run_ranks_outcomes(2, rank_fn)
    assert "topk_idx[0][0]=99 is out of range" in str(outcomes[1]), outcomes[1]
    assert isinstance(outcomes[0], moe_ep.InvalidArgument), outcomes[0]
    assert "rank 1 rejected its input" in str(outcomes[0])


@pytest.mark.parametrize("world_size,kwargs,fragment", [
    (2, dict(num_experts=15), "num_experts=15 is not divisible by world_size=2"),
    (2, dict(hidden=200), "hidden=200 is not a multiple of 128, the block size of "
                          "float8_blockwise (dispatch)"),
    (1, dict(hidden=48, dispatch_dtype="fp4"), "hidden=48 is not a multiple of 32"),
    (2, dict(hidden=192, dispatch_dtype="bf16", combine_dtype="fp8"), "hidden=192"),
    (2, dict(top_k=9), "topk=9"),
    (1, dict(max_tokens_per_rank=0), "max_tokens_per_rank=0"),
])
def test_bad_configuration_names_the_field_on_every_rank(world_size, kwargs, fragment,
                                                         run_ranks_outcomes):
    world = moe_ep.CpuWorld(world_size, timeout_s=TIMEOUT_S)
    args = dict(num_experts=E, top_k=K, hidden=H, max_tokens_per_rank=MAX_T,
                dispatch_dtype="fp8", combine_dtype="bf16")
    args.update(kwargs)

    def rank_fn(rank):
        with pytest.raises(moe_ep.InvalidArgument) as info:
            moe_ep.get_op(world.communicator(rank), **args)
        return info.value

    for rank, err in enumerate(run_ranks_outcomes(world_size, rank_fn)):
        assert isinstance(err, ValueError) and fragment in str(err), (rank, err)
    if world_size == 1:  # a failed creation changes nothing: the world can still create an op
        op = moe_ep.get_op(world.communicator(0), E, K, H, MAX_T, dispatch_dtype="bf16",
                           combine_dtype="bf16")
        assert op.world_size == 1


# Every rank rejecting the same creation: each rejection is of the same round, so none of them
# counts against the next creation (src/backends/cpu/world.cc).
def test_creation_after_every_rank_rejected_works(run_ranks_outcomes):
    world = moe_ep.CpuWorld(2, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        with pytest.raises(moe_ep.InvalidArgument, match="num_experts=15"):
            moe_ep.get_op(world.communicator(rank), 15, K, H, MAX_T, dispatch_dtype="bf16",
                          combine_dtype="bf16")
        # A failed creation changes nothing: the same world can still create an op.
        return moe_ep.get_op(world.communicator(rank), 2 * E, K, H, MAX_T,
                             dispatch_dtype="bf16", combine_dtype="bf16").world_size

    assert run_ranks_outcomes(2, rank_fn) == [2, 2]


def test_bad_dtype_name_for_get_op():
    comm = moe_ep.CpuWorld(1, timeout_s=TIMEOUT_S).communicator(0)
    with pytest.raises(ValueError, match="dispatch_dtype='fp16'"):
        moe_ep.get_op(comm, E, K, H, MAX_T, dispatch_dtype="fp16", combine_dtype="bf16")


def test_bad_world_arguments():
    with pytest.raises(ValueError, match="world_size=0"):
        moe_ep.CpuWorld(0)
    with pytest.raises(ValueError, match="rank=2"):
        moe_ep.CpuWorld(2).communicator(2)


def test_rank_that_never_calls_times_out(rng, run_ranks):
    world = moe_ep.CpuWorld(2, timeout_s=1)
    x, idx, w = valid_inputs(rng)
    gave_up = threading.Event()

    def rank_fn(rank):
        op = moe_ep.get_op(world.communicator(rank), E, K, H, MAX_T, dispatch_dtype="fp8",
                           combine_dtype="bf16")
        if rank == 1:  # joins only after rank 0 gave up: the group is broken by then
            assert gave_up.wait(60)
            with pytest.raises(moe_ep.RemoteError) as late:
                op.dispatch(x, idx, w)
            return str(late.value)
        start = time.monotonic()
        with pytest.raises(moe_ep.Timeout) as first:
            op.dispatch(x, idx, w)
        seconds = time.monotonic() - start
        gave_up.set()
        with pytest.raises(moe_ep.InvalidUsage) as second:
            op.dispatch(x, idx, w)
        return first.value, seconds, str(second.value)

    (timeout, seconds, poisoned), late = run_ranks(2, rank_fn)
    assert isinstance(timeout, TimeoutError) and isinstance(timeout, moe_ep.Error)
    assert "dispatch/publish" in str(timeout) and "rank 0 timed out" in str(timeout)
    assert "waiting for ranks [1]" in str(timeout)
    assert 0.5 < seconds < 5.0, seconds
    assert "op unusable after: dispatch/publish" in poisoned
    assert "rank 1 cannot proceed" in late


def test_rank_that_never_creates_times_out(run_ranks):
    world = moe_ep.CpuWorld(2, timeout_s=0.5)

    def rank_fn(rank):
        if rank == 0:
            with pytest.raises(TimeoutError) as info:
                moe_ep.get_op(world.communicator(0), E, K, H, MAX_T, dispatch_dtype="fp8",
                              combine_dtype="bf16")
            return str(info.value)

    msg, _ = run_ranks(2, rank_fn)
    assert msg.startswith("create_op: rank 0 timed out after 0.5 s waiting for ranks [1]"), msg
    assert "rank 1 is not creating an op" in msg
