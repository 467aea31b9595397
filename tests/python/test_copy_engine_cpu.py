"""get_op(..., copy_engine=...) (OpConfig::copy_engine, docs/copy-engine.md)
on the CPU backend, which has no copy-engine path but agrees on the field like on every other:
the op reports it (op.copy_engine, op.config, repr), it is part of the cache key, it must be a
bool, and with low_latency=True or ranks_per_node below the world size it is refused on every
rank, naming the fields. The CUDA path itself is tested by tests/test_gpu_copy_engine.cc.
"""

import moe_ep
from test_cpu_ops import E, H, K, MAX_T, TIMEOUT_S, W


def get(world, rank, **kw):
    return moe_ep.get_op(world.communicator(rank), E, K, H, MAX_T, dispatch_dtype="bf16",
                         combine_dtype="bf16", **kw)


def test_copy_engine_in_config_and_cache_key(run_ranks):
    world = moe_ep.CpuWorld(W, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = get(world, rank, copy_engine=True)
        default = get(world, rank)
        return (op.copy_engine, op.config["copy_engine"], "copy_engine" in repr(op),
                default.copy_engine, op is default)

    assert run_ranks(W, rank_fn) == [(True, True, True, False, False)] * W


def test_copy_engine_refused_with_decode_mode_or_several_nodes(run_ranks_outcomes):
    world = moe_ep.CpuWorld(W, timeout_s=TIMEOUT_S)
    for kw, text in (({"low_latency": True}, "copy_engine=true with low_latency=true"),
                     ({"ranks_per_node": 2}, "copy_engine=true with ranks_per_node=2 < "
                                             f"world_size={W}")):
        def rank_fn(rank, kw=kw):
            get(world, rank, copy_engine=True, **kw)

        for outcome in run_ranks_outcomes(W, rank_fn):
            assert isinstance(outcome, ValueError), outcome
            assert text in str(outcome), str(outcome)


def test_copy_engine_must_be_a_bool(run_ranks_outcomes):
    world = moe_ep.CpuWorld(W, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        get(world, rank, copy_engine="yes" if rank == 0 else True)

    outcomes = run_ranks_outcomes(W, rank_fn)
    assert all(isinstance(o, ValueError) for o in outcomes), outcomes
    assert "copy_engine='yes' is not a bool" in str(outcomes[0])
