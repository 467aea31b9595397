"""Decode mode's column-major scales from Python on the CPU backend
(get_op(..., column_major_scales=True), docs/decode-mode.md#scale-layout): recv_x_scales keeps
DeepEP's shape [E/W, S, scale_dim] as a view whose S axis is contiguous, strides
(S * scale_dim, 1, S) elements, over the op's memory; its values and every other output bit for
bit against np_reference.py at fp8 and mxfp4 dispatch with every combine dtype and world sizes 1
to 4; the raw memory column by column; and the argument rules (decode mode only, a bool only,
refused on every rank). Inputs are seeded (conftest.py); the seed is printed.
"""

import numpy as np
import pytest

import moe_ep
import np_reference as ref
from test_cpu_ops import dispatch_args
from test_decode_cpu import (TIMEOUT_S, check_ll_rounds, ll_config, ll_op, ll_y_pools,
                             run_ll_rounds, slab_rows)

H = 256


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("d,c", [("fp8", "bf16"), ("fp8", "int8_e3m4"), ("fp4", "fp8"),
                                 ("fp4", "fp8_direct_cast")])
def test_column_major_scales_match_reference(world_size, d, c, rng, run_ranks, make_inputs,
                                             random_bf16):
    e = 4 * world_size
    cfg = dict(ll_config(d, c, e=e, k=3, h=H, max_t=10), column_major=True)
    tokens = [10, 7, 0, 3][:world_size]
    rounds = [make_inputs(rng, world_size, e, 3, H, tokens) for _ in range(2)]
    ypools = ll_y_pools(rng, random_bf16, world_size, cfg, 2)
    got = run_ll_rounds(run_ranks, cfg, rounds, ypools)
    exp = check_ll_rounds(got, cfg, rounds)  # the scales' values by their logical index
    assert slab_rows(exp) > 0


@pytest.mark.parametrize("d", ["fp8", "fp4"])
def test_view_is_deepeps_layout_over_the_ops_memory(d, rng, run_ranks, make_inputs):
    w, e, max_t = 2, 8, 6
    world = moe_ep.CpuWorld(w, timeout_s=TIMEOUT_S)
    inputs = make_inputs(rng, w, e, 2, H, [6, 4])

    def rank_fn(rank):
        op = ll_op(world, rank, dict(ll_config(d, "bf16", e=e, k=2, h=H, max_t=max_t),
                                     column_major=True))
        recv, _ = op.low_latency_dispatch(*dispatch_args(inputs[rank])[0])
        s = recv.recv_x_scales
        # The op's memory, [E/W, scale_dim, S], read flat: scale j of expert x's row r at
        # (x * scale_dim + j) * S + r.
        stored = np.array(s.base if s.base is not None else s, copy=True).reshape(-1)
        return (s.shape, s.strides, s.dtype.itemsize, s.flags.owndata, np.ascontiguousarray(s),
                stored, np.array(recv.recv_count, copy=True), op.column_major_scales,
                op.config["column_major_scales"] and "column_major_scales" in repr(op))

    res = run_ranks(w, rank_fn)
    exp = ref.low_latency_dispatch(inputs, e, max_t, d)
    cols = H // 128 if d == "fp8" else H // 32
    epr, slab = e // w, w * max_t
    for rank in range(w):
        shape, strides, item, owns, logical, stored, counts, flag, config_flag = res[rank]
        assert shape == (epr, slab, cols), shape
        assert strides == (slab * cols * item, item, slab * item), strides
        assert not owns  # a view of the op's buffer
        assert flag and config_flag
        want = exp[rank]["recv_x_scales"]  # [E/W, S, scale_dim] rows
        assert want.dtype.itemsize == item
        moved = 0
        for x, count in enumerate(counts):
            assert np.array_equal(logical[x, :count].view(np.uint8),
                                  want[x, :count].view(np.uint8)), (rank, x)
            for r in range(count):
                for j in range(cols):
                    at = (x * cols + j) * slab + r
                    assert stored[at:at + 1].view(np.uint8).tobytes() == \
                        want[x, r, j:j + 1].view(np.uint8).tobytes(), (rank, x, r, j)
                    moved += 1
        assert moved > 0 or rank == 1


def test_column_major_scales_need_low_latency_and_a_bool(run_ranks_outcomes):
    world = moe_ep.CpuWorld(2, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        moe_ep.get_op(world.communicator(rank), 8, 2, H, 8, dispatch_dtype="fp8",
                      combine_dtype="bf16", column_major_scales=True)

    for outcome in run_ranks_outcomes(2, rank_fn):
        assert isinstance(outcome, ValueError), outcome
        assert "column_major_scales=true with low_latency=false" in str(outcome), outcome

    world = moe_ep.CpuWorld(2, timeout_s=TIMEOUT_S)

    def rank_fn_flag(rank):
        moe_ep.get_op(world.communicator(rank), 8, 2, H, 8, dispatch_dtype="fp8",
                      combine_dtype="bf16", low_latency=True,
                      column_major_scales="yes" if rank == 0 else True)

    outcomes = run_ranks_outcomes(2, rank_fn_flag)
    for outcome in outcomes:
        assert isinstance(outcome, ValueError), outcome
    assert "column_major_scales='yes' is not a bool" in str(outcomes[0]), outcomes[0]
    assert "rank 0" in str(outcomes[1]), outcomes[1]
