"""Decode mode's column-major scales on the CUDA backend from torch
(get_op(..., column_major_scales=True), docs/decode-mode.md#scale-layout): two ranks on ONE GPU
(moe_ep.single_gpu_world), each on its own thread and stream, dispatch eagerly with fp8 and
mxfp4; recv_x_scales must have DeepEP's shape [E/W, W*Tmax, scale_dim] and strides
(W*Tmax * scale_dim, 1, W*Tmax), dtype float32 or float8_e8m0fnu, and below each count the bits
of np_reference.py's scale rows, as must recv_x and recv_count. Skipped without torch, a CUDA GPU
or the CUDA backend. The call also adds its counts to a cumulative_local_expert_recv_stats
tensor on the stream. The seed is printed; MOE_EP_TEST_SEED replays.
"""

import threading

import numpy as np
import pytest

import np_reference as ref
import test_gpu_torch as gpu

torch = gpu.torch
WORLD_SIZE = 2
NUM_EXPERTS = 8
TOP_K = 3
HIDDEN = 1024
TOKENS = 16
THREAD_TIMEOUT_S = 300


def rank_inputs(rng):
    inputs = []
    for _ in range(WORLD_SIZE):
        x = ref.f32_to_bf16(rng.normal(0.0, 1.0, (TOKENS, HIDDEN)).astype(np.float32))
        idx = np.stack([rng.choice(NUM_EXPERTS, TOP_K, replace=False) for _ in range(TOKENS)])
        idx = idx.astype(np.int32)
        idx[rng.random(idx.shape) < 0.2] = -1
        weights = rng.uniform(0.05, 1.0, (TOKENS, TOP_K)).astype(np.float32)
        inputs.append({"x": x, "topk_idx": idx, "topk_weights": weights})
    return inputs


def as_bytes(t):
    """A host copy of a tensor's bits, in its logical (row-major) order, as uint8."""
    return t.contiguous().view(torch.uint8).cpu().numpy()


@pytest.mark.parametrize("dispatch_dtype", ["fp8", "fp4"])
def test_column_major_scales_from_torch(dispatch_dtype, run_ranks):
    moe_ep = gpu.one_gpu_moe_ep()

    seed = gpu.choose_seed()
    inputs = rank_inputs(np.random.default_rng(seed))
    exp = ref.low_latency_dispatch(inputs, NUM_EXPERTS, TOKENS, dispatch_dtype)
    world = moe_ep.single_gpu_world(WORLD_SIZE, device=0, timeout_s=120)
    slab = WORLD_SIZE * TOKENS
    cols = HIDDEN // 128 if dispatch_dtype == "fp8" else HIDDEN // 32
    gate = threading.Barrier(WORLD_SIZE, timeout=THREAD_TIMEOUT_S)

    def rank_fn(rank):
        try:
            return check_rank(rank)
        except BaseException:
            gate.abort()  # the other rank must not wait for this one at the gate
            raise

    def check_rank(rank):
        torch.cuda.set_device(0)
        rk = gpu.Rank(rank, WORLD_SIZE, seed)
        dev = torch.device("cuda", 0)
        stream = torch.cuda.Stream(device=0)  # ranks wait on each other: never one stream
        op = moe_ep.get_op(world[rank], NUM_EXPERTS, TOP_K, HIDDEN, TOKENS,
                           dispatch_dtype=dispatch_dtype, combine_dtype="bf16",
                           low_latency=True, column_major_scales=True)
        mine = inputs[rank]
        x = torch.from_numpy(mine["x"].view(np.int16)).view(torch.bfloat16).to(dev)
        idx = torch.from_numpy(mine["topk_idx"]).to(dev)
        w = torch.from_numpy(mine["topk_weights"]).to(dev)
        stats = torch.full((NUM_EXPERTS // WORLD_SIZE,), 3, dtype=torch.int32, device=dev)
        torch.cuda.synchronize(dev)  # this rank's uploads are done
        # No rank dispatches before every rank's device-wide wait above has returned: an
        # accepted dispatch's kernels wait on the device for the other rank's, which a rank
        # still inside torch.cuda.synchronize would never launch (until the timeout).
        gate.wait()
        with torch.cuda.stream(stream):
            recv, _ = op.low_latency_dispatch(x, idx, w, cumulative_local_expert_recv_stats=stats)
        stream.synchronize()
        if not torch.equal(stats, recv.recv_count + 3):
            rk.fail(f"cumulative_local_expert_recv_stats {stats.tolist()} != 3 + "
                    f"{recv.recv_count.tolist()}")
        s = recv.recv_x_scales
        if tuple(s.shape) != (NUM_EXPERTS // WORLD_SIZE, slab, cols):
            rk.fail(f"recv_x_scales shape {tuple(s.shape)}")
        if s.stride() != (slab * cols, 1, slab):
            rk.fail(f"recv_x_scales strides {s.stride()}, want {(slab * cols, 1, slab)}")
        want_dtype = torch.float32 if dispatch_dtype == "fp8" else rk.e8m0
        if s.dtype != want_dtype:
            rk.fail(f"recv_x_scales dtype {s.dtype}, want {want_dtype}")
        if not op.column_major_scales:
            rk.fail("op.column_major_scales is False")
        counts = recv.recv_count.cpu().numpy()
        if not np.array_equal(counts, exp[rank]["recv_count"]):
            rk.fail(f"recv_count {counts.tolist()} != {exp[rank]['recv_count'].tolist()}")
            return rk.errors
        got_scales = as_bytes(s)
        got_x = as_bytes(recv.recv_x)
        want_scales = exp[rank]["recv_x_scales"].view(np.uint8)
        want_x = exp[rank]["recv_x"].view(np.uint8)
        for e, n in enumerate(counts):
            if not np.array_equal(got_scales[e, :n], want_scales[e, :n]):
                rk.fail(f"slab {e}: scales below the count {n} differ from the reference")
            if not np.array_equal(got_x[e, :n], want_x[e, :n]):
                rk.fail(f"slab {e}: rows below the count {n} differ from the reference")
        if counts.sum() == 0:
            rk.fail("no row moved: the case checks nothing")
        op.synchronize()
        return rk.errors

    gpu.run_one_gpu_ranks(moe_ep, run_ranks, WORLD_SIZE, rank_fn, seed, THREAD_TIMEOUT_S)
