"""Decode mode inside torch.cuda.graph (docs/decode-mode.md#graph-capture): two ranks of the CUDA
backend on ONE GPU (moe_ep.single_gpu_world), each on its own Python thread and torch stream,
capture low_latency_dispatch -> an expert written in torch -> low_latency_combine in one
torch.cuda.CUDAGraph, then replay it with new inputs copied into the captured tensors each time:
new routing, masked slots, tokens with every slot masked, and a replay where every slot of every
token is masked. After each replay every output (counts, sources, slab rows below the counts, out)
is compared bit for bit with np_reference.py. Expert ids are int64, as torch.topk gives them (the
op converts them inside the graph). bf16 dispatch with every combine dtype. Skipped without torch,
a CUDA GPU or the CUDA backend. The seed is printed; MOE_EP_TEST_SEED replays.
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
HIDDEN = 512
TOKENS = 16  # T = max_tokens_per_rank: a captured graph has fixed shapes
REPLAYS = 10
MASK_PROB = 0.25
THREAD_TIMEOUT_S = 600


def replay_inputs(rng, replay):
    """Per rank {x, topk_idx, topk_weights} as the numpy reference takes them; replay 3 masks
    every slot of every token (nothing moves, out is all zeros)."""
    inputs = []
    for _ in range(WORLD_SIZE):
        x = ref.f32_to_bf16(rng.normal(0.0, 1.0, (TOKENS, HIDDEN)).astype(np.float32))
        idx = np.stack([rng.choice(NUM_EXPERTS, TOP_K, replace=False) for _ in range(TOKENS)])
        idx = idx.astype(np.int64)
        idx[rng.random(idx.shape) < MASK_PROB] = -1
        idx[rng.integers(0, TOKENS)] = -1  # one token with every slot masked
        if replay == 3:
            idx[:] = -1
        weights = rng.uniform(0.05, 1.0, (TOKENS, TOP_K)).astype(np.float32)
        inputs.append({"x": x, "topk_idx": idx, "topk_weights": weights})
    return inputs


def expert_factor(rank, e):
    """The test's expert: local expert e of `rank` scales its rows by (global id + 1) / 8,
    a power-of-two fraction, so torch's and numpy's fp32 products round alike."""
    return np.float32((rank * (NUM_EXPERTS // WORLD_SIZE) + e + 1) / 8.0)


def expected(inputs, combine_dtype):
    recv = ref.low_latency_dispatch(inputs, NUM_EXPERTS, TOKENS, "bf16")
    ys = []
    for r in range(WORLD_SIZE):
        slabs = ref.bf16_to_f32(recv[r]["recv_x"])  # [E/W, S, H]
        factors = np.array([expert_factor(r, e) for e in range(slabs.shape[0])], np.float32)
        ys.append(ref.f32_to_bf16((slabs * factors[:, None, None]).astype(np.float32)))
    outs = ref.low_latency_combine(ys, inputs, recv, NUM_EXPERTS, combine_dtype)
    return recv, outs


def to_bits(t):
    """uint16 numpy bits of a bf16 tensor (a host copy)."""
    return t.detach().view(torch.int16).cpu().numpy().view(np.uint16)


def check_replay(rk, where, recv, out, exp_recv, exp_out):
    counts = recv.recv_count.cpu().numpy()
    if not np.array_equal(counts, exp_recv["recv_count"]):
        rk.fail(f"{where}: recv_count {counts.tolist()} != {exp_recv['recv_count'].tolist()}")
        return
    for name in ("recv_src_rank", "recv_src_token", "recv_src_slot"):
        got = getattr(recv, name).cpu().numpy()
        if not np.array_equal(got, exp_recv[name]):
            rk.fail(f"{where}: {name} differs from the reference")
    slabs = to_bits(recv.recv_x)
    for e, n in enumerate(counts):
        if not np.array_equal(slabs[e, :n], exp_recv["recv_x"][e, :n]):
            rk.fail(f"{where}: slab {e} rows below its count {n} differ from the reference")
    got = to_bits(out)
    if not np.array_equal(got, exp_out):
        bad = np.argwhere(got != exp_out)
        t, h = bad[0]
        rk.fail(f"{where}: out differs in {len(bad)} elements; first [{t}, {h}] "
                f"{got[t, h]:#06x} != {exp_out[t, h]:#06x}")


@pytest.mark.parametrize("combine_dtype", ref.COMBINE_DTYPES)
def test_captured_round_replays_with_new_inputs(combine_dtype, run_ranks):
    moe_ep = gpu.one_gpu_moe_ep()

    seed = gpu.choose_seed()
    rng = np.random.default_rng(seed)
    rounds = [replay_inputs(rng, i) for i in range(REPLAYS + 1)]  # [0]: the captured inputs
    expect = [expected(inputs, combine_dtype) for inputs in rounds]
    world = moe_ep.single_gpu_world(WORLD_SIZE, device=0, timeout_s=120)
    gate = threading.Barrier(WORLD_SIZE, timeout=THREAD_TIMEOUT_S)
    # torch.cuda.graph synchronizes the whole device when it begins a capture, which CUDA
    # refuses while another thread's stream is capturing ("operation not permitted when stream
    # is capturing", seen once on an H200): the ranks capture one at a time, and upload nothing
    # while another rank captures. Capturing runs nothing, so no rank waits for another there.
    capture_lock = threading.Lock()

    def rank_fn(rank):
        torch.cuda.set_device(0)
        rk = gpu.Rank(rank, WORLD_SIZE, seed)
        dev = torch.device("cuda", 0)
        stream = torch.cuda.Stream(device=0)  # ranks wait on each other: never one stream
        try:
            op = moe_ep.get_op(world[rank], NUM_EXPERTS, TOP_K, HIDDEN, TOKENS,
                               dispatch_dtype="bf16", combine_dtype=combine_dtype,
                               low_latency=True)
            gate.wait()  # every rank's op exists before any graph
            factors = torch.tensor([float(expert_factor(rank, e))
                                    for e in range(NUM_EXPERTS // WORLD_SIZE)],
                                   dtype=torch.float32, device=dev)

            def load(inputs):
                mine = inputs[rank]
                return (torch.from_numpy(mine["x"].view(np.int16)).view(torch.bfloat16),
                        torch.from_numpy(mine["topk_idx"]),
                        torch.from_numpy(mine["topk_weights"]))

            x_s, idx_s, w_s = (t.to(dev) for t in load(rounds[0]))
            out_s = torch.empty(TOKENS, HIDDEN, dtype=torch.bfloat16, device=dev)
            graph = torch.cuda.CUDAGraph()
            stream.wait_stream(torch.cuda.current_stream(dev))
            torch.cuda.synchronize(dev)  # this rank's uploads are done
            gate.wait()  # every rank's uploads are done before any capture begins
            with capture_lock, torch.cuda.graph(graph, stream=stream,
                                                capture_error_mode="thread_local"):
                recv, handle = op.low_latency_dispatch(x_s, idx_s, w_s)
                y = (recv.recv_x.float() * factors[:, None, None]).to(torch.bfloat16)
                op.low_latency_combine(y, handle, out=out_s)
            gate.wait()  # every rank's capture has ended before any upload
            for i in range(1, REPLAYS + 1):
                with torch.cuda.stream(stream):
                    for static, new in zip((x_s, idx_s, w_s), load(rounds[i])):
                        static.copy_(new.to(dev))
                gate.wait()  # both ranks replay together, each on its own stream
                with torch.cuda.stream(stream):
                    graph.replay()
                stream.synchronize()
                exp_recv, exp_out = expect[i][0][rank], expect[i][1][rank]
                check_replay(rk, f"[{combine_dtype}] replay {i}", recv, out_s, exp_recv,
                             exp_out)
            op.synchronize()
        except BaseException:
            gate.abort()  # the other rank must not wait for this one at the gate
            raise
        return rk.errors

    gpu.run_one_gpu_ranks(moe_ep, run_ranks, WORLD_SIZE, rank_fn, seed, THREAD_TIMEOUT_S)
