"""moe_ep.op_memory and Op.memory() on the CPU backend (docs/design.md#memory-per-op): the
figure before a creation equals the op's afterwards on every rank, in normal and decode mode; a
figure counted by hand from the receive buffers' shapes; and op_memory's argument errors, which
are this rank's only (nothing is created, no other rank waits)."""

import pytest

import moe_ep

H = 256


@pytest.mark.parametrize("low_latency", [False, True])
def test_figure_before_equals_the_ops_after(low_latency, run_ranks):
    world = moe_ep.CpuWorld(2, timeout_s=30)
    args = dict(dispatch_dtype="fp8", combine_dtype="bf16", low_latency=low_latency)

    def rank_fn(rank):
        comm = world.communicator(rank)
        before = moe_ep.op_memory(comm, 8, 2, H, 8, **args)
        op = moe_ep.get_op(comm, 8, 2, H, 8, **args)
        return before, op.memory()

    for before, after in run_ranks(2, rank_fn):
        assert before == after
        assert after["total"] == after["peer_bytes"] + after["private_bytes"]
        assert after["private_bytes"] == 0
    moe_ep.clear_op_cache()


def test_normal_mode_counted_by_hand():
    # W = 2, Tmax = 8: 16 receive rows of 256 fp8 bytes and 2 fp32 scales, 2 int32 ids and
    # 2 fp32 weights, source rank and token; 4 local expert counts; 16 bf16 combine rows.
    comm = moe_ep.CpuWorld(2, timeout_s=30).communicator(0)
    got = moe_ep.op_memory(comm, 8, 2, H, 8, dispatch_dtype="fp8", combine_dtype="bf16")
    assert got["total"] == 16 * (256 + 8 + 8 + 8 + 4 + 4) + 4 * 4 + 16 * 512 == 12816


def test_bad_arguments_raise_here():
    comm = moe_ep.CpuWorld(2, timeout_s=30).communicator(1)
    with pytest.raises(moe_ep.InvalidArgument, match="hidden=100 is not a multiple of 128"):
        moe_ep.op_memory(comm, 8, 2, 100, 8, dispatch_dtype="fp8", combine_dtype="bf16")
    with pytest.raises(moe_ep.InvalidArgument, match="low_latency='yes' is not a bool"):
        moe_ep.op_memory(comm, 8, 2, H, 8, low_latency="yes")
    with pytest.raises(moe_ep.InvalidArgument, match="column_major_scales=true with low_latency"):
        moe_ep.op_memory(comm, 8, 2, H, 8, dispatch_dtype="fp8", column_major_scales=True)
