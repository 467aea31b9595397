"""A decode loop on moe_ep's decode mode, on the CPU backend (numpy arrays, one thread per rank).

Each step every rank has a few tokens (at most max_tokens_per_rank, a different number each
step), routes them to its top-k experts, and then:

    op.low_latency_dispatch -> one matrix product per local expert over its slab -> op.low_latency_combine

The slabs are what a grouped GEMM reads: local expert e's rows are recv_x[e, :recv_count[e]],
and its output goes to the same rows of y[e]; the op applies the routing weights. Each rank
checks every step against the same layer computed without quantization on that rank alone (the
expert weights come from the seed) and rank 0 prints the relative error per step. With bf16 on
both legs the only roundings are the bf16 products of the experts and of the sums, so the error
stays near bf16's precision.

    python examples/decode_loop.py
    python examples/decode_loop.py --ranks 4 --steps 8 --max-tokens 16 --hidden 512

On GPUs the same calls take torch CUDA tensors (a torch process group or moe_ep.single_gpu_world
instead of CpuWorld), and an op created with low_latency=True has fixed shapes and no host wait
in either call.
"""
import argparse
import threading

import numpy as np

import moe_ep


def bf16_bits(x):
    """float32 -> bf16 bit patterns (uint16), rounding to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


class Layer:
    """Router and expert weights, identical on every rank (drawn from the seed)."""

    def __init__(self, args):
        g = np.random.default_rng(args.seed)
        self.router = g.standard_normal((args.hidden, args.experts)).astype(np.float32)
        scale = 1.0 / np.sqrt(args.hidden)
        self.w = (g.standard_normal((args.experts, args.hidden, args.hidden)) * scale).astype(
            np.float32)

    def route(self, x, top_k):
        logits = x @ self.router
        idx = np.argsort(-logits, axis=1, kind="stable")[:, :top_k].astype(np.int32)
        top = np.take_along_axis(logits, idx, axis=1)
        w = np.exp(top - top.max(axis=1, keepdims=True))
        return idx, (w / w.sum(axis=1, keepdims=True)).astype(np.float32)

    def unquantized(self, x, idx, weights):
        """The layer in float64 without any wire format: sum_k w_k * (x @ W_e_k)."""
        out = np.zeros(x.shape, dtype=np.float64)
        for k in range(idx.shape[1]):
            out += weights[:, k:k + 1] * np.einsum("th,thj->tj", x.astype(np.float64),
                                                   self.w[idx[:, k]].astype(np.float64))
        return out


def run_rank(rank, world, layer, args, errors):
    config = dict(dispatch_dtype="bf16", combine_dtype="bf16", low_latency=True)
    shape = (args.experts, args.top_k, args.hidden, args.max_tokens)
    # What the op will hold on this rank, known before it is made (an engine budgets with it).
    planned = moe_ep.op_memory(world.communicator(rank), *shape, **config)
    op = moe_ep.get_op(world.communicator(rank), *shape, **config)
    if op.memory() != planned:
        raise RuntimeError(f"rank {rank}: op.memory() {op.memory()} != op_memory {planned}")
    if rank == 0:
        print(f"op memory per rank: {planned['total']} bytes ({planned['peer_bytes']} peer, "
              f"{planned['private_bytes']} private)")
    local = args.experts // args.ranks
    rng = np.random.default_rng([args.seed, rank])
    for step in range(args.steps):
        t = int(rng.integers(0, args.max_tokens + 1))  # this step's tokens (0 is allowed)
        x = bf16_value(bf16_bits(rng.standard_normal((t, args.hidden)).astype(np.float32)))
        idx, weights = layer.route(x, args.top_k)
        recv, handle = op.low_latency_dispatch(bf16_bits(x), idx, weights)
        # The grouped GEMM: local expert e reads the first recv_count[e] rows of its slab.
        y = np.zeros(recv.recv_x.shape, dtype=np.uint16)  # [E/W, W*Tmax, H] bf16
        for e in range(local):
            n = int(recv.recv_count[e])
            rows = bf16_value(recv.recv_x[e, :n])
            y[e, :n] = bf16_bits(rows @ layer.w[rank * local + e])
        out = bf16_value(op.low_latency_combine(y, handle))
        want = layer.unquantized(x, idx, weights)
        denom = np.linalg.norm(want)
        errors[rank][step] = (np.linalg.norm(out - want) / denom) if denom > 0 else 0.0
        if t > 0 and not np.all(np.isfinite(out)):
            raise RuntimeError(f"rank {rank} step {step}: non-finite output")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--experts", type=int, default=16)
    p.add_argument("--top-k", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=20250611)
    args = p.parse_args()
    print(f"decode loop: {args.ranks} ranks, {args.experts} experts, top-{args.top_k}, "
          f"hidden {args.hidden}, max {args.max_tokens} tokens per rank, seed {args.seed}")
    layer = Layer(args)
    world = moe_ep.CpuWorld(args.ranks, timeout_s=60)
    errors = [[None] * args.steps for _ in range(args.ranks)]
    failures = []

    def target(rank):
        try:
            run_rank(rank, world, layer, args, errors)
        except Exception as e:  # noqa: BLE001 -- reported below, with the rank
            failures.append((rank, e))

    threads = [threading.Thread(target=target, args=(r,)) for r in range(args.ranks)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if failures:
        for rank, e in failures:
            print(f"rank {rank} failed: {e}")
        raise SystemExit(1)
    # Three bf16 roundings after the (bf16) input: the expert output, the expert-side weighted
    # sum and the token-side sum, each at most half an ulp, 2^-9 relative: under 3 * 2^-9 per
    # element, less in the L2 norm. 2^-6 leaves room for cancellation in the sums.
    bound = 2.0 ** -6
    worst = max(max(r) for r in errors)
    for step in range(args.steps):
        print(f"step {step}: relative error vs float64 "
              f"{max(errors[r][step] for r in range(args.ranks)):.2e} (worst rank)")
    print(f"worst {worst:.2e}, bound {bound:.2e}: {'OK' if worst <= bound else 'TOO LARGE'}")
    raise SystemExit(0 if worst <= bound else 1)


if __name__ == "__main__":
    main()
