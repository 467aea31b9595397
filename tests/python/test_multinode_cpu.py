"""Several nodes (get_op(..., ranks_per_node=L), docs/design.md#several-nodes) on the CPU backend.

Four ranks on two nodes of two, fp8 dispatch and fp8 blockwise combine: every dispatch output
equals the numpy reference's one-node dispatch bit for bit, combine equals its node-by-node sum
(each other node's partial rounded to bf16 and re-encoded), which differs from the flat
rank-ascending sum here, so a backend that ignored the nodes would fail. op.config reports
ranks_per_node, and a value that does not divide the world size is rejected on every rank.
Decode mode over the same two nodes (fp8 dispatch, fp8 combine): the slabs, counts and sources
equal the one-node decode reference and out its node-by-node sum, which differs from the flat
one here.
Inputs are seeded (see conftest.py); the seed is printed for replay.
"""

import numpy as np
import pytest

import moe_ep
import np_reference as ref
from test_cpu_ops import E, H, K, MAX_T, TIMEOUT_S, W, check_pipeline, config, run_pipeline, y_pools
from test_decode_cpu import check_ll_rounds, ll_config, ll_y_pools, run_ll_rounds


def test_two_nodes_fp8_matches_reference(rng, run_ranks, make_inputs, random_bf16):
    cfg = config("fp8", "fp8", ranks_per_node=2)
    rounds = [make_inputs(rng, W, E, K, H, [24, 0, 17, 9]) for _ in range(2)]
    ypools = y_pools(rng, random_bf16, W, MAX_T, H, 2)
    got = run_pipeline(run_ranks, cfg, rounds, ypools)
    exp_recv = check_pipeline(got, cfg, rounds, ypools)
    # The node order matters: the flat sum differs from what every rank got in the last round.
    ys = [ypools[1][r][:exp_recv[r]["num_recv"]] for r in range(W)]
    flat = ref.combine(ys, exp_recv, [len(inp["topk_idx"]) for inp in rounds[1]], "fp8")
    assert any(np.any(flat[r] != got[r][1][1]) for r in range(W))


def test_ranks_per_node_in_config(run_ranks):
    world = moe_ep.CpuWorld(W, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        op = moe_ep.get_op(world.communicator(rank), E, K, H, MAX_T, dispatch_dtype="bf16",
                           combine_dtype="bf16", ranks_per_node=2)
        default = moe_ep.get_op(world.communicator(rank), E, K, H, MAX_T,
                                dispatch_dtype="bf16", combine_dtype="bf16")
        return op.config["ranks_per_node"], default.config["ranks_per_node"], op is default

    assert run_ranks(W, rank_fn) == [(2, 0, False)] * W


def test_ranks_per_node_not_dividing_world_rejected_on_every_rank(run_ranks_outcomes):
    world = moe_ep.CpuWorld(W, timeout_s=TIMEOUT_S)

    def rank_fn(rank):
        moe_ep.get_op(world.communicator(rank), E, K, H, MAX_T, dispatch_dtype="bf16",
                      combine_dtype="bf16", ranks_per_node=3)

    for outcome in run_ranks_outcomes(W, rank_fn):
        assert isinstance(outcome, ValueError), outcome
        assert "ranks_per_node=3 does not divide world_size=4" in str(outcome)


def test_decode_mode_two_nodes_fp8_matches_reference(rng, run_ranks, make_inputs, random_bf16):
    cfg = ll_config("fp8", "fp8", ranks_per_node=2)
    rounds = [make_inputs(rng, W, E, K, H, t) for t in ([24, 0, 17, 9], [3, 24, 0, 11])]
    ypools = ll_y_pools(rng, random_bf16, W, cfg, 2)
    got = run_ll_rounds(run_ranks, cfg, rounds, ypools)
    exp = check_ll_rounds(got, cfg, rounds)  # the one-node slabs, the node-by-node out
    # The node grouping matters: the flat decode sum differs from what some rank got.
    ys = [got[r][1][1] for r in range(W)]
    flat = ref.low_latency_combine(ys, rounds[1], exp, E, "fp8")
    assert any(np.any(flat[r] != got[r][1][2]) for r in range(W))
