"""Decode mode from Python on the CPU backend: Op.low_latency_dispatch and
Op.low_latency_combine, bit for bit against np_reference.py's decode-mode reference.

Every (dispatch, combine) dtype pair (int8_e3m4 included) at four ranks with T < Tmax, T = Tmax
and T = 0 and masked slots; world sizes 1, 2 and 4; tokens with every slot masked (zeros, in no
slab); the fixed shapes, dtypes and zero copy of the outputs; pre-quantized fp8 and mxfp4 x;
duplicate expert ids (rejected in validation mode, both weights applied otherwise); several
rounds on one op; decode calls interleaved with normal-mode calls on one op, each mode's outputs
surviving the other's calls; int64 expert ids; the identity of docs/design.md#decode-mode (identical expert
outputs give bit-identical out in both modes, with the normal-mode y formed as the contract
says). Its errors are in test_decode_errors_cpu.py. Rows of y at or after recv_count are NaN in these tests:
the op must never read them. Inputs are seeded (conftest.py); the seed is printed.
"""

import os

import numpy as np
import pytest

import moe_ep
import np_reference as ref
from test_cpu_ops import assert_bits_equal, check_pipeline, dispatch_args, snapshot, y_pools

W, E, K, H = 4, 16, 4, 256
MAX_T = 24
TIMEOUT_S = 30
PAIRS = [(d, c) for d in ref.DISPATCH_DTYPES for c in ref.ALL_COMBINE_DTYPES]
LL_FIELDS = ("recv_x", "recv_x_scales", "recv_count", "recv_src_rank", "recv_src_token",
             "recv_src_slot")
BF16_NAN = np.uint16(0x7FC0)


def ll_config(d, c, e=E, k=K, h=H, max_t=MAX_T, ranks_per_node=0):
    return {"E": e, "K": k, "H": h, "max_t": max_t, "d": d, "c": c, "L": ranks_per_node}


def ll_op(world, rank, cfg, **kwargs):
    """The op of cfg (ll_config's, with "column_major": True for column-major scales)."""
    return moe_ep.get_op(world.communicator(rank), cfg["E"], cfg["K"], cfg["H"], cfg["max_t"],
                         dispatch_dtype=cfg["d"], combine_dtype=cfg["c"], low_latency=True,
                         ranks_per_node=cfg.get("L", 0),
                         column_major_scales=cfg.get("column_major", False), **kwargs)


def ll_snapshot(recv):
    """Copies of every decode-mode output (views valid until the next low_latency_dispatch)."""
    return {f: None if getattr(recv, f) is None else np.array(getattr(recv, f), copy=True)
            for f in LL_FIELDS}


def ll_y_pools(rng, random_bf16, world_size, cfg, rounds):
    """Per round and rank: y [E/W, W*Tmax, H] of random bf16 rows (the experts' raw outputs);
    run_ll_rounds makes the rows at or after each slab's count NaN."""
    epr, slab = cfg["E"] // world_size, world_size * cfg["max_t"]
    return [[random_bf16(rng, (epr * slab, cfg["H"])).reshape(epr, slab, cfg["H"])
             for _ in range(world_size)] for _ in range(rounds)]


def poison_unused_rows(y, counts):
    """y with every row at or after its slab's count NaN: rows the op must not read."""
    y = y.copy()
    for e, c in enumerate(counts):
        y[e, c:] = BF16_NAN
    return y


def run_ll_rounds(run_ranks, cfg, rounds, ypools, world=None, give_out=False):
    """On every rank: get_op(low_latency=True), then per round low_latency_dispatch ->
    low_latency_combine(y). Returns [rank][round] = (snapshot, y given, out copy); nothing is
    asserted inside the threads."""
    w = len(rounds[0])
    world = world or moe_ep.CpuWorld(w, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = ll_op(world, rank, cfg)
        got = []
        for i, inputs in enumerate(rounds):
            args, kwargs = dispatch_args(inputs[rank])
            recv, handle = op.low_latency_dispatch(*args, **kwargs)
            snap = ll_snapshot(recv)
            y = poison_unused_rows(ypools[i][rank], snap["recv_count"])
            out = None
            if give_out:
                out = np.full((len(inputs[rank]["topk_idx"]), cfg["H"]), 0xA5A5, dtype=np.uint16)
            res = op.low_latency_combine(y, handle, out=out)
            got.append((snap, y, np.array(res, copy=True), out is None or res is out))
        return got

    return run_ranks(w, rank_fn)


def check_ll_dispatch(got, exp, cfg, world_size, where):
    """Shapes and dtypes of the full views; recv_x and its scales below the counts; counts and
    sources everywhere (-1 past the counts)."""
    epr, slab = cfg["E"] // world_size, world_size * cfg["max_t"]
    assert got["recv_x"].shape[:2] == (epr, slab), (where, got["recv_x"].shape)
    assert got["recv_x"].shape == exp["recv_x"].shape, where
    assert got["recv_x"].dtype == exp["recv_x"].dtype, where
    if exp["recv_x_scales"] is None:
        assert got["recv_x_scales"] is None, where
    else:
        assert got["recv_x_scales"].shape == exp["recv_x_scales"].shape, where
        assert got["recv_x_scales"].dtype == exp["recv_x_scales"].dtype, where
    for f in ("recv_count", "recv_src_rank", "recv_src_token", "recv_src_slot"):
        assert_bits_equal(f"{where} {f}", got[f], exp[f])
    for e, c in enumerate(exp["recv_count"]):
        assert_bits_equal(f"{where} recv_x[{e}, :{c}]", got["recv_x"][e, :c], exp["recv_x"][e, :c])
        if exp["recv_x_scales"] is not None:
            assert_bits_equal(f"{where} recv_x_scales[{e}, :{c}]", got["recv_x_scales"][e, :c],
                              exp["recv_x_scales"][e, :c])


def check_ll_rounds(got, cfg, rounds):
    """Every output of every rank and round against the reference; returns the last round's
    reference dispatch."""
    exp = None
    for i, inputs in enumerate(rounds):
        w = len(inputs)
        exp = ref.low_latency_dispatch(inputs, cfg["E"], cfg["max_t"], cfg["d"])
        ys = [got[r][i][1] for r in range(w)]
        outs = ref.low_latency_combine(ys, inputs, exp, cfg["E"], cfg["c"], cfg.get("L", 0))
        for r in range(w):
            where = f"round {i} rank {r} ({cfg['d']}/{cfg['c']})"
            snap, _, out, returned_given = got[r][i]
            check_ll_dispatch(snap, exp[r], cfg, w, where)
            assert_bits_equal(f"{where} out", out, outs[r])
            assert returned_given, f"{where}: low_latency_combine did not return the given out"
    return exp


def slab_rows(exp):
    return sum(int(e["recv_count"].sum()) for e in exp)


# ---------------------------------------------------------------------------------------------
# Every dtype pair, world sizes, masked slots, rounds

@pytest.mark.parametrize("d,c", PAIRS)
def test_dtype_pair_matches_reference(d, c, rng, run_ranks, make_inputs, random_bf16):
    cfg = ll_config(d, c)
    rounds = [make_inputs(rng, W, E, K, H, [24, 0, 17, 5])]  # T = Tmax, T = 0, T < Tmax
    ypools = ll_y_pools(rng, random_bf16, W, cfg, 1)
    got = run_ll_rounds(run_ranks, cfg, rounds, ypools)
    exp = check_ll_rounds(got, cfg, rounds)
    assert slab_rows(exp) > 60  # the case moved data
    assert (rounds[0][0]["topk_idx"][1] == -1).all()  # a token sent nowhere: zeros
    assert not got[0][0][2][1].any()


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("d,c", [("bf16", "int8_e3m4"), ("fp8", "fp8"), ("fp4", "bf16"),
                                 ("fp8", "fp8_direct_cast")])
def test_world_sizes(world_size, d, c, rng, run_ranks, make_inputs, random_bf16):
    e = 4 * world_size
    cfg = ll_config(d, c, e=e, k=3, max_t=10)
    tokens = [10, 7, 0, 3][:world_size]
    rounds = [make_inputs(rng, world_size, e, 3, H, tokens)]
    ypools = ll_y_pools(rng, random_bf16, world_size, cfg, 1)
    got = run_ll_rounds(run_ranks, cfg, rounds, ypools, give_out=True)
    exp = check_ll_rounds(got, cfg, rounds)
    assert slab_rows(exp) > 0


def test_int64_expert_ids_as_topk_gives_them(rng, run_ranks, make_inputs, random_bf16):
    # numpy's default integers and torch.topk's indices are int64 (as DeepEP takes them): the same
    # outputs as int32 ids, -1 masking a slot either way.
    cfg = ll_config("fp8", "bf16")
    rounds = [make_inputs(rng, W, E, K, H, [24, 3, 0, 11])]
    for inp in rounds[0]:
        inp["topk_idx"] = inp["topk_idx"].astype(np.int64)
    assert (rounds[0][0]["topk_idx"] == -1).any()  # a masked slot among the int64 ids
    ypools = ll_y_pools(rng, random_bf16, W, cfg, 1)
    got = run_ll_rounds(run_ranks, cfg, rounds, ypools)
    exp = check_ll_rounds(got, cfg, rounds)
    assert slab_rows(exp) > 20


def test_masked_slots_and_fully_masked_tokens(rng, run_ranks, make_inputs, random_bf16):
    cfg = ll_config("fp8", "int8_e3m4", e=8, k=3, max_t=8)
    rounds = [make_inputs(rng, 2, 8, 3, H, [8, 6], mask_frac=0.0)]
    idx0, idx1 = rounds[0][0]["topk_idx"], rounds[0][1]["topk_idx"]
    idx0[0] = -1                # every slot masked: in no slab, out zeros
    idx0[5] = -1
    idx0[2, 1] = -1             # one slot masked
    idx1[3, [0, 2]] = -1        # two slots masked
    idx1[4] = [-1, -1, 7]       # only the last slot
    ypools = ll_y_pools(rng, random_bf16, 2, cfg, 1)
    got = run_ll_rounds(run_ranks, cfg, rounds, ypools)
    exp = check_ll_rounds(got, cfg, rounds)
    for r in range(2):
        for t in (0, 5):
            assert not ((exp[r]["recv_src_rank"] == 0) & (exp[r]["recv_src_token"] == t)).any()
        assert ((exp[r]["recv_src_slot"] >= 0) == (exp[r]["recv_src_rank"] >= 0)).all()
    assert not got[0][0][2][[0, 5]].any()  # zeros (+0) for the tokens sent nowhere
    slots = exp[1]["recv_src_slot"][(exp[1]["recv_src_rank"] == 1) &
                                    (exp[1]["recv_src_token"] == 4)]
    assert slots.tolist() == [2]  # expert 7 (rank 1's) from slot 2


def test_every_rank_without_tokens(rng, run_ranks, make_inputs, random_bf16):
    cfg = ll_config("fp4", "fp8", e=8, k=2, max_t=4)
    rounds = [make_inputs(rng, 2, 8, 2, H, [0, 0])]
    ypools = ll_y_pools(rng, random_bf16, 2, cfg, 1)
    got = run_ll_rounds(run_ranks, cfg, rounds, ypools)
    exp = check_ll_rounds(got, cfg, rounds)
    assert slab_rows(exp) == 0 and got[0][0][2].shape == (0, H)


def test_rounds_on_one_op(rng, run_ranks, make_inputs, random_bf16):
    # Later rounds with fewer rows leave stale rows of earlier rounds past the counts.
    cfg = ll_config("fp8", "int8_e3m4")
    rounds = [make_inputs(rng, W, E, K, H, t)
              for t in ([24, 24, 24, 24], [1, 0, 9, 24], [0, 0, 0, 0], [3, 17, 0, 8])]
    ypools = ll_y_pools(rng, random_bf16, W, cfg, len(rounds))
    got = run_ll_rounds(run_ranks, cfg, rounds, ypools, give_out=True)
    check_ll_rounds(got, cfg, rounds)


def test_prequantized_fp8_and_mxfp4_input(rng, run_ranks, make_inputs, random_bf16):
    for d, c in (("fp8", "bf16"), ("fp4", "int8_e3m4")):
        cfg = ll_config(d, c, e=8, k=3, max_t=12)
        rounds = [make_inputs(rng, 2, 8, 3, H, [12, 5])]
        inp = rounds[0][1]  # rank 0 keeps bf16 x: both forms in one call
        t = len(inp["topk_idx"])
        if d == "fp8":
            payload, scales = ref.encode("fp8", inp["x"])
            inp["x"] = payload
            inp["x_scales"] = (scales * rng.uniform(0.5, 2.0, scales.shape)).astype(np.float32)
        else:
            inp["x"] = rng.integers(0, 256, size=(t, H // 2), dtype=np.uint8)
            inp["x_scales"] = rng.integers(100, 150, size=(t, H // 32), dtype=np.uint8)
        ypools = ll_y_pools(rng, random_bf16, 2, cfg, 1)
        got = run_ll_rounds(run_ranks, cfg, rounds, ypools)
        check_ll_rounds(got, cfg, rounds)


def _validation_mode():
    return os.environ.get("MOE_EP_VALIDATE", "0").lower() in ("1", "true", "yes", "on")


def test_duplicate_expert_ids(rng, run_ranks, run_ranks_outcomes, make_inputs, random_bf16):
    cfg = ll_config("bf16", "fp8", e=8, k=4, max_t=8)
    rounds = [make_inputs(rng, 2, 8, 4, H, [6, 5], mask_frac=0.0)]
    rounds[0][0]["topk_idx"][0] = [3, 3, -1, 3]  # expert 3 three times: one row, three weights
    rounds[0][1]["topk_idx"][2] = [6, 1, 6, 7]
    ypools = ll_y_pools(rng, random_bf16, 2, cfg, 1)
    if _validation_mode():  # MOE_EP_VALIDATE=1 (as under ctest): rejected on every rank
        world = moe_ep.CpuWorld(2, timeout_s=TIMEOUT_S)

        def rank_fn(rank):
            ll_op(world, rank, cfg).low_latency_dispatch(*dispatch_args(rounds[0][rank])[0])

        for e in run_ranks_outcomes(2, rank_fn):
            assert isinstance(e, moe_ep.InvalidArgument) and "twice" in str(e), e
    else:
        got = run_ll_rounds(run_ranks, cfg, rounds, ypools)
        exp = check_ll_rounds(got, cfg, rounds)
        first = (exp[0]["recv_src_rank"] == 0) & (exp[0]["recv_src_token"] == 0)
        assert exp[0]["recv_src_slot"][first].tolist() == [0]


def test_expert_side_rounds_each_product_and_adds_slots_in_ascending_order(run_ranks):
    # One rank, bf16 combine: out = p exactly. Values where a fused multiply-add or another slot
    # order changes the fp32 sum across a bf16 rounding tie (hand-computed, see the comments).
    op = moe_ep.get_op(moe_ep.CpuWorld(1, timeout_s=TIMEOUT_S).communicator(0), 4, 3, H, 2,
                       dispatch_dtype="bf16", combine_dtype="bf16", low_latency=True)
    w1 = np.array([0x3B7E04F7], dtype=np.uint32).view(np.float32)[0]
    # Token 0, slots 0 and 1: 1.0 * 1.0 + w1 * 1.0078125. The exact product w1 * 1.0078125 is
    # 2^-8 + 2^-24 + 2.2e-10, rounded to fp32 2^-8 + 2^-24; 1 + that is an fp32 tie, which
    # rounds to the even 1 + 2^-8, a bf16 tie that rounds to 1.0 (0x3f80). Fused, the sum
    # would round up to 1 + 2^-8 + 2^-23 and then to bf16 0x3f81.
    # Token 1, slots 0, 1, 2: (1 + 2^-8) * 1.0 + 2^-24 + 2^-24. In ascending order each 2^-24
    # is half an fp32 ulp of 1 + 2^-8 and is lost (ties to even), giving the bf16 tie 1 + 2^-8
    # -> 0x3f80; in descending order 2^-24 + 2^-24 = 2^-23 survives and the sum rounds up to
    # 0x3f81.
    x = ref.f32_to_bf16(np.ones((2, H), dtype=np.float32))
    idx = np.array([[0, 1, -1], [0, 1, 2]], dtype=np.int32)
    wts = np.array([[1.0, w1, 0.0], [1.0 + 2.0 ** -8, 1.0, 1.0]], dtype=np.float32)
    recv, handle = op.low_latency_dispatch(x, idx, wts)
    snap = ll_snapshot(recv)
    assert snap["recv_count"].tolist() == [2, 2, 1, 0]
    y = np.zeros((4, 2, H), dtype=np.uint16)
    y[0, :] = ref.f32_to_bf16(np.float32(1.0))          # rows of tokens 0 and 1
    y[1, 0] = ref.f32_to_bf16(np.float32(1.0078125))    # token 0
    y[1, 1] = ref.f32_to_bf16(np.float32(2.0 ** -24))   # token 1
    y[2, 0] = ref.f32_to_bf16(np.float32(2.0 ** -24))   # token 1
    out = np.array(op.low_latency_combine(y, handle))
    assert (out == 0x3F80).all(), sorted(set(out.ravel().tolist()))
    inputs = [{"x": x, "x_scales": None, "topk_idx": idx, "topk_weights": wts}]
    exp_recv = ref.low_latency_dispatch(inputs, 4, 2, "bf16")
    assert_bits_equal("reference", out, ref.low_latency_combine([y], inputs, exp_recv, 4,
                                                                "bf16")[0])


# ---------------------------------------------------------------------------------------------
# The outputs

def test_outputs_are_fixed_shape_views(rng, run_ranks, make_inputs, random_bf16):
    w, e, max_t = 2, 8, 6
    world = moe_ep.CpuWorld(w, timeout_s=TIMEOUT_S)
    rounds = [make_inputs(rng, w, e, 2, H, [6, 2])]

    def rank_fn(rank):
        found = {}
        for d in ref.DISPATCH_DTYPES:
            op = ll_op(world, rank, ll_config(d, "bf16", e=e, k=2, max_t=max_t))
            recv, handle = op.low_latency_dispatch(*dispatch_args(rounds[0][rank])[0])
            owns = [f for f in LL_FIELDS
                    if getattr(recv, f) is not None and getattr(recv, f).flags.owndata]
            found[d] = ({f: None if getattr(recv, f) is None else
                         (getattr(recv, f).shape, str(getattr(recv, f).dtype)) for f in LL_FIELDS},
                        owns, type(handle).__name__, handle.call_seq, handle.num_tokens,
                        op.low_latency, "low_latency" in repr(op))
            y = np.zeros((e // w, w * max_t, H), dtype=np.uint16)
            op.low_latency_combine(y, handle)
        return found

    res = run_ranks(w, rank_fn)
    s = w * max_t
    want = {"bf16": ((4, s, H), "uint16", None),
            "fp8": ((4, s, H), "uint8", ((4, s, H // 128), "float32")),
            "fp4": ((4, s, H // 2), "uint8", ((4, s, H // 32), "uint8"))}
    for rank in range(w):
        for d, (fields, owns, handle_type, call_seq, num_tokens, flag, shown) in res[rank].items():
            x_shape, x_dtype, scales = want[d]
            assert fields["recv_x"] == (x_shape, x_dtype), (d, fields)
            assert fields["recv_x_scales"] == scales, (d, fields)
            assert fields["recv_count"] == ((4,), "int32")
            for f in ("recv_src_rank", "recv_src_token", "recv_src_slot"):
                assert fields[f] == ((4, s), "int32"), (d, f, fields)
            assert owns == [], (d, owns)  # views of the op's buffers
            assert (handle_type, call_seq, num_tokens) == ("LowLatencyHandle", 1,
                                                           [6, 2][rank])
            assert flag and shown


def test_get_op_low_latency_is_part_of_the_configuration(run_ranks):
    world = moe_ep.CpuWorld(2, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        comm = world.communicator(rank)
        plain = moe_ep.get_op(comm, 8, 2, H, 8, dispatch_dtype="fp8", combine_dtype="bf16")
        ll = moe_ep.get_op(comm, 8, 2, H, 8, dispatch_dtype="fp8", combine_dtype="bf16",
                           low_latency=True)
        again = moe_ep.get_op(comm, 8, 2, H, 8, dispatch_dtype="fp8", combine_dtype="bf16",
                              low_latency=np.bool_(True))
        return plain is not ll, again is ll, plain.low_latency, ll.low_latency

    assert run_ranks(2, rank_fn) == [(True, True, False, True)] * 2


def test_outputs_survive_normal_mode_calls_and_interleave(rng, run_ranks, make_inputs,
                                                          random_bf16):
    # On one op: ll dispatch 1, normal dispatch+combine 1, ll combine 1, normal dispatch 2,
    # ll dispatch 2, normal combine 2, ll combine 2. Each mode's outputs and handle survive the
    # other mode's calls; every result equals its reference.
    w = 3
    cfg = ll_config("fp8", "int8_e3m4", e=12, k=3, max_t=10)
    ll_rounds = [make_inputs(rng, w, 12, 3, H, t) for t in ([10, 4, 0], [2, 10, 7])]
    nm_rounds = [make_inputs(rng, w, 12, 3, H, t) for t in ([5, 0, 10], [9, 9, 1])]
    ll_ys = ll_y_pools(rng, random_bf16, w, cfg, 2)
    nm_ys = y_pools(rng, random_bf16, w, cfg["max_t"], H, 2)
    world = moe_ep.CpuWorld(w, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = ll_op(world, rank, cfg)
        ll_got, nm_got = [], []
        ll_recv, ll_handle = op.low_latency_dispatch(*dispatch_args(ll_rounds[0][rank])[0])
        nm_recv, nm_handle = op.dispatch(*dispatch_args(nm_rounds[0][rank])[0])
        nm_snap = snapshot(nm_recv)
        nm_out = op.combine(nm_ys[0][rank][:nm_recv.num_recv], nm_handle)
        nm_got.append((nm_snap, np.array(nm_out, copy=True)))
        ll_snap = ll_snapshot(ll_recv)  # after the normal-mode calls
        y = poison_unused_rows(ll_ys[0][rank], ll_snap["recv_count"])
        ll_got.append((ll_snap, y, np.array(op.low_latency_combine(y, ll_handle)), True))

        nm_recv, nm_handle = op.dispatch(*dispatch_args(nm_rounds[1][rank])[0])
        ll_recv, ll_handle = op.low_latency_dispatch(*dispatch_args(ll_rounds[1][rank])[0])
        nm_snap = snapshot(nm_recv)  # after the decode-mode dispatch
        nm_out = op.combine(nm_ys[1][rank][:nm_recv.num_recv], nm_handle)
        nm_got.append((nm_snap, np.array(nm_out, copy=True)))
        ll_snap = ll_snapshot(ll_recv)
        y = poison_unused_rows(ll_ys[1][rank], ll_snap["recv_count"])
        ll_got.append((ll_snap, y, np.array(op.low_latency_combine(y, ll_handle)), True))
        return ll_got, nm_got

    res = run_ranks(w, rank_fn)
    check_ll_rounds([r[0] for r in res], cfg, ll_rounds)
    nm_cfg = {"E": 12, "K": 3, "H": H, "max_t": 10, "d": "fp8", "c": "int8_e3m4"}
    check_pipeline([r[1] for r in res], nm_cfg, nm_rounds, nm_ys)


# ---------------------------------------------------------------------------------------------
# Both modes give the same out (docs/design.md#decode-mode)

def expert_outputs(rng, random_bf16, tokens, num_experts):
    """o[s][t, e]: expert e's bf16 output for token t of rank s (the same in both modes)."""
    return [random_bf16(rng, (t * num_experts, H)).reshape(t, num_experts, H) for t in tokens]


def decode_mode_y(o, snap, rank, epr, slab):
    """y[e][i] = o[src rank][src token, global expert], NaN past the counts."""
    y = np.full((epr, slab, H), BF16_NAN, dtype=np.uint16)
    for e in range(epr):
        for i in range(int(snap["recv_count"][e])):
            s, t = int(snap["recv_src_rank"][e, i]), int(snap["recv_src_token"][e, i])
            y[e, i] = o[s][t, rank * epr + e]
    return y


def normal_mode_y(o, snap, rank, epr):
    """y[row] = bf16(sum over the row's local slots k ascending of w_k * float(o_k)), each
    product rounded, then the addition, in fp32 from 0.0."""
    n = snap["num_recv"]
    acc = np.zeros((n, H), dtype=np.float32)
    idx, wts = snap["recv_topk_idx"], snap["recv_topk_weights"]
    for i in range(n):
        s, t = int(snap["recv_src_rank"][i]), int(snap["recv_src_token"][i])
        for k in range(idx.shape[1]):
            if idx[i, k] >= 0:
                term = (wts[i, k] * ref.bf16_to_f32(o[s][t, rank * epr + idx[i, k]]))
                acc[i] = (acc[i] + term.astype(np.float32)).astype(np.float32)
    return ref.f32_to_bf16(acc)


@pytest.mark.parametrize("d,c", PAIRS)
def test_decode_mode_equals_normal_mode(d, c, rng, run_ranks, make_inputs, random_bf16):
    w, e, k, max_t = 4, 8, 3, 12
    cfg = ll_config(d, c, e=e, k=k, max_t=max_t)
    tokens = [12, 0, 7, 5]
    inputs = make_inputs(rng, w, e, k, H, tokens)
    o = expert_outputs(rng, random_bf16, tokens, e)
    world = moe_ep.CpuWorld(w, timeout_s=TIMEOUT_S)
    epr = e // w

    def rank_fn(rank):
        op = ll_op(world, rank, cfg)
        args = dispatch_args(inputs[rank])[0]
        recv, handle = op.dispatch(*args)
        snap = snapshot(recv)
        normal = np.array(op.combine(normal_mode_y(o, snap, rank, epr), handle))
        recv, handle = op.low_latency_dispatch(*args)
        ll_snap = ll_snapshot(recv)
        y = decode_mode_y(o, ll_snap, rank, epr, w * max_t)
        decode = np.array(op.low_latency_combine(y, handle))
        return normal, decode, y

    res = run_ranks(w, rank_fn)
    exp_recv = ref.low_latency_dispatch(inputs, e, max_t, d)
    exp = ref.low_latency_combine([r[2] for r in res], inputs, exp_recv, e, c)
    moved = 0
    for rank, (normal, decode, _) in enumerate(res):
        assert_bits_equal(f"rank {rank}: decode-mode out against normal-mode out", decode, normal)
        assert_bits_equal(f"rank {rank}: out against the reference", decode, exp[rank])
        moved += int(np.count_nonzero(decode))
    assert moved > 0
