"""Rejections made by the Python layer are collective, on the CPU backend.

A rank whose own arguments cannot even reach the C++ op (a dtype the import does not take, a
non-contiguous or 3-D array, a list, None, a read-only out, a handle that is not one, a
configuration that does not parse or an integer that is not an int32) still joins the call:
its call raises ValueError with the reason, every other rank's call fails at once with
InvalidArgument naming that rank and the reason, nothing moves, and the next call works (its
outputs compared exactly with np_reference.py). Also: int64 expert ids (torch's and numpy's
default) are taken and converted without changing the results, ids outside int32 stay out of
range, the op cache is one per rank of each world, calls out of step raise on both ranks, and
a rejected call consumes nothing (not even a DLPack capsule it was given). Inputs are seeded
(conftest.py); the seed is printed.
"""

import threading
import time

import numpy as np
import pytest

import moe_ep
import np_reference as ref
from test_cpu_ops import check_pipeline, config, dispatch_args, run_pipeline, snapshot, y_pools

W, E, K, H, MAX_T = 3, 12, 3, 256, 16
TOKENS = [7, 5, 0]
BAD = 1          # the rank whose arguments are bad
TIMEOUT_S = 10   # the worlds' wait bound: a rank left waiting would take this long
FAST_S = 4.0     # every rank must have its error well before that


def round_trip(op, inp, ypool_rank):
    """A valid dispatch and combine; (snapshot, out copy) for check_pipeline."""
    args, kwargs = dispatch_args(inp)
    recv, handle = op.dispatch(*args, **kwargs)
    snap = snapshot(recv)
    out = op.combine(ypool_rank[:recv.num_recv], handle)
    return snap, np.array(out, copy=True)


def timed(fn):
    """(the exception fn raised or None, seconds)."""
    start = time.monotonic()
    try:
        fn()
    except moe_ep.Error as e:
        return e, time.monotonic() - start
    return None, time.monotonic() - start


def check_collective_rejection(errors, kind, arg, fragment, bad=BAD):
    """Rank `bad` raised "<kind>: <arg>...<fragment>"; every other rank the same reason, named."""
    for rank, (err, seconds) in enumerate(errors):
        assert isinstance(err, moe_ep.InvalidArgument), (rank, err)
        assert isinstance(err, ValueError)
        msg = str(err)
        if rank == bad:
            assert msg.startswith(f"{kind}: {arg}"), (rank, msg)
        else:
            assert msg.startswith(f"{kind} aborted: rank {bad} rejected its input: {arg}"), (
                rank, msg)
        assert fragment in msg, (rank, fragment, msg)
        assert seconds < FAST_S, (rank, seconds, msg)  # told at once, not timed out


# ---------------------------------------------------------------------------------------------
# dispatch and combine

DISPATCH_CASES = {
    "int16 topk_idx": ("topk_idx", "dtype int16 is not supported",
                       lambda x, i, w: dict(topk_idx=i.astype(np.int16))),
    "float16 x": ("x", "dtype float16 is not supported",
                  lambda x, i, w: dict(x=ref.bf16_to_f32(x).astype(np.float16))),
    "non-contiguous x": ("x", "not contiguous",
                         lambda x, i, w: dict(x=np.repeat(x, 2, axis=1)[:, ::2])),
    "3-D x": ("x", "3 dimensions", lambda x, i, w: dict(x=x.reshape(len(x), 2, H // 2))),
    "list topk_weights": ("topk_weights", "expected a tensor", lambda x, i, w: dict(
        topk_weights=w.tolist())),
    "None x": ("x", "x is None", lambda x, i, w: dict(x=None)),
    "None topk_idx": ("topk_idx", "topk_idx is None", lambda x, i, w: dict(topk_idx=None)),
    "complex x_scales": ("x_scales", "dtype complex64 is not supported", lambda x, i, w: dict(
        x=np.zeros((len(x), H), dtype=np.uint8),
        x_scales=np.ones((len(x), H // 128), dtype=np.complex64))),
}


@pytest.mark.parametrize("case", list(DISPATCH_CASES))
def test_python_rejection_of_dispatch_fails_every_rank(case, rng, run_ranks, make_inputs,
                                                       random_bf16):
    arg, fragment, change = DISPATCH_CASES[case]
    cfg = config("fp8", "bf16", e=E, k=K, max_t=MAX_T)
    inputs = make_inputs(rng, W, E, K, H, TOKENS)
    ypool = y_pools(rng, random_bf16, W, MAX_T, H, 1)[0]
    world = moe_ep.CpuWorld(W, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = moe_ep.get_op(world.communicator(rank), E, K, H, MAX_T, dispatch_dtype="fp8",
                           combine_dtype="bf16")
        inp = inputs[rank]
        kwargs = dict(x=inp["x"], topk_idx=inp["topk_idx"], topk_weights=inp["topk_weights"])
        if rank == BAD:
            kwargs.update(change(inp["x"], inp["topk_idx"], inp["topk_weights"]))
        error = timed(lambda: op.dispatch(**kwargs))
        return error, [round_trip(op, inp, ypool[rank])]  # the op works for the next call

    res = run_ranks(W, rank_fn)
    check_collective_rejection([r[0] for r in res], "dispatch", arg, fragment)
    check_pipeline([r[1] for r in res], cfg, [inputs], [ypool])


COMBINE_CASES = {
    "list y": ("y", "expected a tensor", lambda y, out: dict(y=y.tolist())),
    "None y": ("y", "y is None", lambda y, out: dict(y=None)),
    "int8 y": ("y", "dtype int8 is not supported", lambda y, out: dict(y=y.astype(np.int8))),
    "3-D y": ("y", "3 dimensions", lambda y, out: dict(y=y.reshape(len(y), 2, H // 2))),
    "read-only out": ("out", "read-only", lambda y, out: dict(out=out)),
    "str handle": ("handle", "got str", lambda y, out: dict(handle="handle")),
    "None handle": ("handle", "got NoneType", lambda y, out: dict(handle=None)),
}


@pytest.mark.parametrize("case", list(COMBINE_CASES))
def test_python_rejection_of_combine_fails_every_rank(case, rng, run_ranks, make_inputs,
                                                      random_bf16):
    arg, fragment, change = COMBINE_CASES[case]
    cfg = config("fp4", "fp8", e=E, k=K, max_t=MAX_T)
    inputs = make_inputs(rng, W, E, K, H, TOKENS)
    ypool = y_pools(rng, random_bf16, W, MAX_T, H, 1)[0]
    world = moe_ep.CpuWorld(W, timeout_s=TIMEOUT_S)
    sentinel = 0x1234

    def rank_fn(rank):
        op = moe_ep.get_op(world.communicator(rank), E, K, H, MAX_T, dispatch_dtype="fp4",
                           combine_dtype="fp8")
        args, kwargs = dispatch_args(inputs[rank])
        recv, handle = op.dispatch(*args, **kwargs)
        snap = snapshot(recv)
        y = ypool[rank][:recv.num_recv]
        out = np.full((TOKENS[rank], H), sentinel, dtype=np.uint16)
        if rank == BAD:
            out.setflags(write=False)
        call = dict(y=y, handle=handle, out=out)
        if rank == BAD:
            call.update(change(y, out))
        error = timed(lambda: op.combine(**call))
        untouched = bool((out == sentinel).all())  # nothing moved, on any rank
        good = op.combine(y, handle)  # the handle is still the latest: combine works
        return error, untouched, [(snap, np.array(good, copy=True))]

    res = run_ranks(W, rank_fn)
    check_collective_rejection([r[0] for r in res], "combine", arg, fragment)
    assert [r[1] for r in res] == [True] * W
    check_pipeline([r[2] for r in res], cfg, [inputs], [ypool])


def test_read_only_out_is_rejected_and_never_written(rng):
    op = moe_ep.get_op(moe_ep.CpuWorld(1, timeout_s=TIMEOUT_S).communicator(0), 8, 2, H, 8,
                       dispatch_dtype="bf16", combine_dtype="bf16")
    x = ref.f32_to_bf16(rng.normal(size=(5, H)).astype(np.float32))
    idx = np.array([[0, 1], [2, -1], [3, 4], [-1, -1], [7, 6]], dtype=np.int32)
    recv, handle = op.dispatch(x, idx, np.ones((5, 2), dtype=np.float32))
    y = np.array(recv.recv_x)
    out = np.full((5, H), 0xBEEF, dtype=np.uint16)
    out.setflags(write=False)
    with pytest.raises(ValueError, match="out: the array is read-only") as info:
        op.combine(y, handle, out=out)
    assert isinstance(info.value, moe_ep.InvalidArgument)
    assert (out == 0xBEEF).all()
    # Read-only memory that no flag can make writable: rejected the same way, no crash.
    frozen = np.frombuffer(bytes(5 * H * 2), dtype=np.uint16).reshape(5, H)
    with pytest.raises(moe_ep.InvalidArgument, match="out: the array is read-only"):
        op.combine(y, handle, out=frozen)
    writable = np.full((5, H), 0xBEEF, dtype=np.uint16)
    assert op.combine(y, handle, out=writable) is writable
    # One rank, identity partials: out is x for routed tokens, zeros for the masked token 3.
    routed = (idx >= 0).any(axis=1)[:, None]
    assert (writable == np.where(routed, x, np.uint16(0))).all()


def test_rejected_call_consumes_no_capsule(rng):
    op = moe_ep.get_op(moe_ep.CpuWorld(1, timeout_s=TIMEOUT_S).communicator(0), 8, 2, H, 8,
                       dispatch_dtype="bf16", combine_dtype="bf16")
    x = ref.f32_to_bf16(rng.normal(size=(3, H)).astype(np.float32))
    idx = np.array([[0, 1], [2, 3], [4, 5]], dtype=np.int32)
    w = np.ones((3, 2), dtype=np.float32)
    capsule = x.__dlpack__()
    with pytest.raises(moe_ep.InvalidArgument, match="topk_idx"):
        op.dispatch(capsule, idx.astype(np.int16), w)
    recv, _ = op.dispatch(capsule, idx, w)  # the capsule was not consumed by the rejected call
    assert (np.array(recv.recv_x) == x).all()
    with pytest.raises(moe_ep.InvalidArgument, match="already consumed"):
        op.dispatch(capsule, idx, w)  # the successful call consumed it


# ---------------------------------------------------------------------------------------------
# get_op

CREATE_CASES = {
    "fp16 dispatch dtype": (dict(dispatch_dtype="fp16"), "dispatch_dtype='fp16' is not a valid"),
    "int8 weights": (dict(weight_dtype="int8"), "weight_dtype='int8'"),
    "hidden 128.7": (dict(hidden=128.7), "hidden=128.7 is not an int (float)"),
    "hidden 2**40": (dict(hidden=2 ** 40), "hidden=1099511627776 does not fit in int32"),
    "top_k True": (dict(top_k=True), "top_k=True is not an int (bool)"),
    "num_sms str": (dict(num_sms="8"), "num_sms='8' is not an int (str)"),
}


@pytest.mark.parametrize("case", list(CREATE_CASES))
def test_one_rank_refusing_its_configuration_fails_every_creation(case, rng, run_ranks,
                                                                  make_inputs, random_bf16):
    bad, fragment = CREATE_CASES[case]
    inputs = make_inputs(rng, W, E, K, H, TOKENS)
    ypool = y_pools(rng, random_bf16, W, MAX_T, H, 1)[0]
    world = moe_ep.CpuWorld(W, timeout_s=TIMEOUT_S)
    args = dict(num_experts=E, top_k=K, hidden=H, max_tokens_per_rank=MAX_T,
                dispatch_dtype="bf16", combine_dtype="fp8_direct_cast")

    def rank_fn(rank):
        mine = dict(args, **bad) if rank == BAD else args
        error = timed(lambda: moe_ep.get_op(world.communicator(rank), **mine))
        # The next creation works. It is another configuration (instance_id): creations are
        # matched by configuration, so had rank BAD retried the one the others were creating,
        # its retry could have paired with a slower rank's first attempt, which then succeeds.
        op = moe_ep.get_op(world.communicator(rank), **args, instance_id=1)
        return error, [round_trip(op, inputs[rank], ypool[rank])]

    res = run_ranks(W, rank_fn)
    for rank, ((err, seconds), _) in enumerate(res):
        assert isinstance(err, moe_ep.InvalidArgument), (rank, err)
        if rank == BAD:
            assert fragment in str(err), str(err)
        else:
            assert str(err).startswith(f"create_op aborted: rank {BAD} rejected its "
                                       "configuration: "), str(err)
            assert fragment in str(err), str(err)
        assert seconds < FAST_S, (rank, seconds)
    check_pipeline([r[1] for r in res], config("bf16", "fp8_direct_cast", e=E, k=K, max_t=MAX_T),
                   [inputs], [ypool])


@pytest.mark.parametrize("name", ["num_experts", "top_k", "hidden", "max_tokens_per_rank",
                                  "instance_id", "num_sms"])
@pytest.mark.parametrize("value,fragment", [
    (128.7, "=128.7 is not an int (float)"), (128.0, "=128.0 is not an int (float)"),
    (True, "=True is not an int (bool)"), (np.bool_(True), "is not an int (bool"),
    ("128", "='128' is not an int (str)"), (None, "=None is not an int (NoneType)"),
    (2 ** 40, "=1099511627776 does not fit in int32 [-2147483648, 2147483647]"),
    (-2 ** 31 - 1, "=-2147483649 does not fit in int32"),
    (np.int64(2 ** 31), "=2147483648 does not fit in int32")])
def test_get_op_integers_must_be_int32_ints(name, value, fragment):
    args = dict(num_experts=8, top_k=2, hidden=H, max_tokens_per_rank=8)
    args[name] = value
    comm = moe_ep.CpuWorld(1, timeout_s=TIMEOUT_S).communicator(0)
    with pytest.raises(ValueError) as info:
        moe_ep.get_op(comm, **args)
    assert isinstance(info.value, moe_ep.InvalidArgument)
    assert str(info.value).startswith(name + "="), str(info.value)
    assert fragment in str(info.value), str(info.value)


def test_get_op_takes_integer_scalars_and_num_sms():
    comm = moe_ep.CpuWorld(1, timeout_s=TIMEOUT_S).communicator(0)
    op = moe_ep.get_op(comm, np.int64(8), np.int32(2), np.int16(H), 8, num_sms=np.uint8(24))
    assert op.config == dict(num_experts=8, hidden=H, top_k=2, max_tokens_per_rank=8,
                             dispatch_dtype="bf16", combine_dtype="bf16", instance_id=0,
                             num_sms=24, low_latency=False, ranks_per_node=0,
                             copy_engine=False, column_major_scales=False)
    # num_sms is part of the configuration (ignored by the CPU backend): another op.
    assert moe_ep.get_op(comm, 8, 2, H, 8, num_sms=24) is op
    assert moe_ep.get_op(comm, 8, 2, H, 8) is not op
    with pytest.raises(moe_ep.InvalidArgument, match="num_sms=-1 must be in"):
        moe_ep.get_op(comm, 8, 2, H, 8, num_sms=-1)


# ---------------------------------------------------------------------------------------------
# int64 expert ids

@pytest.mark.parametrize("d,c", [("fp8", "fp8"), ("fp4", "bf16"), ("bf16", "fp8_direct_cast")])
def test_int64_expert_ids_give_the_same_outputs_as_int32(d, c, rng, run_ranks, make_inputs,
                                                         random_bf16):
    cfg = config(d, c, e=E, k=K, max_t=MAX_T)
    rounds = [make_inputs(rng, W, E, K, H, t) for t in (TOKENS, [16, 0, 9])]
    ypools = y_pools(rng, random_bf16, W, MAX_T, H, 2)
    wide = [[dict(inp, topk_idx=inp["topk_idx"].astype(np.int64)) for inp in rnd]
            for rnd in rounds]
    got = run_pipeline(run_ranks, cfg, wide, ypools)
    check_pipeline(got, cfg, rounds, ypools)  # the reference of the int32 ids
    assert all(inp["topk_idx"].dtype == np.int64 for rnd in wide for inp in rnd)  # unchanged


@pytest.mark.parametrize("value,shown", [(2 ** 40, E), (2 ** 31, E), (E, E), (-2 ** 40, -2),
                                         (-2 ** 31 - 1, -2), (-2, -2)])
def test_int64_ids_out_of_range_are_rejected_on_every_rank(value, shown, rng, run_ranks,
                                                           make_inputs, random_bf16):
    inputs = make_inputs(rng, W, E, K, H, TOKENS, mask_frac=0.0)
    ypool = y_pools(rng, random_bf16, W, MAX_T, H, 1)[0]
    world = moe_ep.CpuWorld(W, timeout_s=TIMEOUT_S)
    bad_idx = inputs[BAD]["topk_idx"].astype(np.int64)
    bad_idx[0, 1] = value  # values beyond int32 must not wrap into range

    def rank_fn(rank):
        op = moe_ep.get_op(world.communicator(rank), E, K, H, MAX_T, dispatch_dtype="fp8",
                           combine_dtype="fp8")
        inp = inputs[rank]
        idx = bad_idx if rank == BAD else inp["topk_idx"].astype(np.int64)
        error = timed(lambda: op.dispatch(inp["x"], idx, inp["topk_weights"]))
        return error, [round_trip(op, inp, ypool[rank])]

    res = run_ranks(W, rank_fn)
    check_collective_rejection([r[0] for r in res], "dispatch", "topk_idx",
                               f"topk_idx[0][1]={shown} is out of range")
    check_pipeline([r[1] for r in res], config("fp8", "fp8", e=E, k=K, max_t=MAX_T), [inputs],
                   [ypool])


# ---------------------------------------------------------------------------------------------
# The op cache: one per rank of each world

def test_two_worlds_interleaving_get_op_have_their_own_caches(rng, make_inputs, random_bf16,
                                                              run_ranks):
    worlds = [moe_ep.CpuWorld(2, timeout_s=TIMEOUT_S) for _ in range(2)]
    inputs = [make_inputs(rng, 2, E, K, H, [9, 4]) for _ in worlds]
    ypools = [y_pools(rng, random_bf16, 2, MAX_T, H, 1)[0] for _ in worlds]
    late = threading.Event()
    # Threads 0..3 are (world, rank) = (0, 0), (0, 1), (1, 0), (1, 1). (0, 0) and (1, 1) enter
    # get_op first and wait there for their peers; (0, 1) and (1, 0) enter while they wait.
    # With one cache per rank index shared by the worlds, (0, 1) would wait for (1, 1)'s
    # creation and (1, 0) for (0, 0)'s: neither world could complete.
    early = {(0, 0), (1, 1)}

    def thread_fn(i):
        w, rank = divmod(i, 2)
        if (w, rank) not in early:
            late.wait(10)
            time.sleep(0.2)  # the early ones are inside get_op by now
        else:
            late.set()
        comm = worlds[w].communicator(rank)
        op = moe_ep.get_op(comm, E, K, H, MAX_T, dispatch_dtype="fp8", combine_dtype="bf16")
        again = moe_ep.get_op(comm, E, K, H, MAX_T, dispatch_dtype="fp8", combine_dtype="bf16")
        assert op.captured is False  # no CUDA graph on the CPU backend
        return op.uid, again is op, [round_trip(op, inputs[w][rank], ypools[w][rank])]

    res = run_ranks(4, thread_fn, timeout_s=60)
    assert len({r[0] for r in res}) == 4 and all(r[1] for r in res)
    cfg = config("fp8", "bf16", e=E, k=K, max_t=MAX_T)
    for w in range(2):
        check_pipeline([res[2 * w][2], res[2 * w + 1][2]], cfg, [inputs[w]], [ypools[w]])
    info = moe_ep.op_cache_info()
    for w, world in enumerate(worlds):
        for rank in range(2):
            key = ("cpu", world.communicator(rank).group_id, rank)
            assert key in info and info[key][0] == 1, (key, info.get(key))
            # Nothing retained: CPU ops are never captured in a CUDA graph.
            assert info[key][3] == 0, (key, info[key])
    assert worlds[0].communicator(0).group_id != worlds[1].communicator(0).group_id


def test_clear_op_cache_of_one_communicator(run_ranks):
    worlds = [moe_ep.CpuWorld(2, timeout_s=TIMEOUT_S) for _ in range(2)]

    def thread_fn(i):
        w, rank = divmod(i, 2)
        return moe_ep.get_op(worlds[w].communicator(rank), E, K, H, MAX_T)

    first = run_ranks(4, thread_fn)
    moe_ep.clear_op_cache(worlds[0].communicator(1))  # that rank of that world only
    keys = moe_ep.op_cache_info()
    assert ("cpu", worlds[0].communicator(1).group_id, 1) not in keys
    assert ("cpu", worlds[0].communicator(0).group_id, 0) in keys
    assert ("cpu", worlds[1].communicator(1).group_id, 1) in keys
    del first


def test_single_gpu_world_arguments():
    with pytest.raises(ValueError, match="world_size=2.5 is not an int"):
        moe_ep.single_gpu_world(2.5)
    with pytest.raises(ValueError, match="device=True is not an int"):
        moe_ep.single_gpu_world(2, device=True)
    if moe_ep._C.cuda_device_count() > 0:
        return  # the world itself is test_gpu_single_gpu_world.py's
    with pytest.raises(ValueError, match="not a visible CUDA device|without the CUDA backend"):
        moe_ep.single_gpu_world(2)


# ---------------------------------------------------------------------------------------------
# Calls out of step

def test_calls_out_of_step_raise_on_both_ranks_and_the_next_round_works(rng, run_ranks,
                                                                        make_inputs,
                                                                        random_bf16):
    cfg = config("fp8", "fp8", e=8, k=2, max_t=MAX_T)
    rounds = [make_inputs(rng, 2, 8, 2, H, t) for t in ([6, 3], [0, 11])]
    ypools = y_pools(rng, random_bf16, 2, MAX_T, H, 2)
    world = moe_ep.CpuWorld(2, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = moe_ep.get_op(world.communicator(rank), 8, 2, H, MAX_T, dispatch_dtype="fp8",
                           combine_dtype="fp8")
        args, kwargs = dispatch_args(rounds[0][rank])
        recv, handle = op.dispatch(*args, **kwargs)
        snap = snapshot(recv)
        y = ypools[0][rank][:recv.num_recv]
        errors = []
        # Rank 0 combines while rank 1 dispatches again: both fail, nothing moves.
        if rank == 0:
            errors.append(timed(lambda: op.combine(y, handle)))
        else:
            errors.append(timed(lambda: op.dispatch(*args, **kwargs)))
        # The same with rank 0's combine refused by the Python layer: out of step first.
        if rank == 0:
            errors.append(timed(lambda: op.combine(y.tolist(), handle)))
        else:
            errors.append(timed(lambda: op.dispatch(*args, **kwargs)))
        out = np.array(op.combine(y, handle), copy=True)  # in step again: combine #1
        got = [(snap, out), round_trip(op, rounds[1][rank], ypools[1][rank])]
        return errors, got

    res = run_ranks(2, rank_fn)
    for rank, (errors, _) in enumerate(res):
        other = 1 - rank
        mine, theirs = ("combine #1", "dispatch #2") if rank == 0 else ("dispatch #2",
                                                                        "combine #1")
        for err, seconds in errors:
            assert isinstance(err, moe_ep.InvalidUsage), (rank, err)
            assert (f"calls out of step: rank {rank} is in {mine}, rank {other} in {theirs}"
                    in str(err)), (rank, str(err))
            assert seconds < FAST_S
    check_pipeline([r[1] for r in res], cfg, rounds, ypools)
