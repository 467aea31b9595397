"""A small Mixture-of-Experts layer on moe_ep, one process per GPU.

    router -> softmax top-k -> op.dispatch -> local SwiGLU experts -> op.combine

Each rank holds E/W experts. The layer runs once per (dispatch, combine) dtype pair, and every
rank compares its output with the same layer computed without quantization on that rank alone
(every expert's weights come from the seed, so any rank can compute any token). Rank 0 prints
the relative and the largest absolute error of each pair.

    python examples/moe_layer.py                   # all visible GPUs
    python examples/moe_layer.py --nprocs 2 --tokens 256 --hidden 1024
"""
import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import moe_ep

# Every (dispatch, combine) pair the library has, by short name (bf16, fp8, fp4 x bf16, fp8,
# fp8_direct_cast, int8_e3m4): the enums' member names.
PAIRS = [(d.name, c.name) for d in moe_ep.DispatchDtype for c in moe_ep.CombineDtype]

# e2m1 code -> value; bit 3 is the sign.
E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


class Experts:
    """The router and the SwiGLU experts, identical on every rank (drawn from the seed)."""

    def __init__(self, args, device):
        g = torch.Generator().manual_seed(args.seed)
        H, F_, E = args.hidden, args.ffn, args.experts

        def draw(*shape, fan_in):
            return (torch.randn(*shape, generator=g) / fan_in ** 0.5).to(torch.bfloat16).to(device)

        self.router = torch.nn.Linear(H, E, bias=False, dtype=torch.bfloat16, device=device)
        with torch.no_grad():
            self.router.weight.copy_(draw(E, H, fan_in=H))
        self.w1 = draw(E, H, F_, fan_in=H)  # gate projection
        self.w3 = draw(E, H, F_, fan_in=H)  # up projection
        self.w2 = draw(E, F_, H, fan_in=F_)  # down projection

    def route(self, x, top_k):
        """Softmax over the experts, the top k, renormalised: (int64 ids as torch's topk gives
        them, float32 weights). op.dispatch takes the int64 ids as they are (moe_ep converts
        them to int32 on the GPU, without a host copy)."""
        with torch.no_grad():
            probs = self.router(x).float().softmax(dim=-1)
        weights, idx = probs.topk(top_k, dim=-1)
        return idx, weights / weights.sum(dim=-1, keepdim=True)

    def expert(self, e, x):
        """SwiGLU expert e on bf16 rows x; float32 result."""
        h = F.silu(x @ self.w1[e]) * (x @ self.w3[e])
        return (h @ self.w2[e]).float()

    def weighted_sum(self, x, topk_idx, topk_weights, experts):
        """sum over slots k of w_k * expert(topk_idx[k], x) in float32, for the given expert ids
        (slot values are ids into `experts`; -1 and ids of other ranks are skipped)."""
        out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
        for i, e in enumerate(experts):
            rows, slots = (topk_idx == i).nonzero(as_tuple=True)
            if rows.numel() > 0:
                w = topk_weights[rows, slots].unsqueeze(-1)
                out.index_add_(0, rows, w * self.expert(e, x[rows]))
        return out


def dequantize(recv, dispatch_dtype, hidden):
    """recv_x in its wire format -> float32 [R, H]."""
    R = recv.num_recv
    if dispatch_dtype == "bf16":
        return recv.recv_x.float()
    if dispatch_dtype == "fp8":  # e4m3 codes times one float32 scale per 128 elements
        blocks = recv.recv_x.float().view(R, hidden // 128, 128)
        return (blocks * recv.recv_x_scales.unsqueeze(-1)).view(R, hidden)
    # mxfp4: two e2m1 codes per byte (element 2i in the low nibble), one e8m0 scale per 32
    # elements, the scale byte b meaning 2^(b - 127).
    packed = recv.recv_x  # uint8 [R, H/2]
    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1).view(R, hidden)
    values = torch.tensor(E2M1_VALUES, device=packed.device)[codes.long()]
    scales = torch.exp2(recv.recv_x_scales.view(torch.uint8).float() - 127.0)
    return (values.view(R, hidden // 32, 32) * scales.unsqueeze(-1)).view(R, hidden)


def moe_forward(op, layer, x, topk_idx, topk_weights, dispatch_dtype, local_experts):
    """The distributed layer: dispatch, the local experts on the received rows, combine."""
    recv, handle = op.dispatch(x, topk_idx, topk_weights)
    # recv_topk_idx holds local expert ids (-1 for slots of other ranks). recv is only valid
    # until the next dispatch on this op, so y is computed now.
    xr = dequantize(recv, dispatch_dtype, x.shape[1]).to(torch.bfloat16)
    y = layer.weighted_sum(xr, recv.recv_topk_idx, recv.recv_topk_weights, local_experts)
    return op.combine(y.to(torch.bfloat16), handle)


def worker(rank, world_size, port, args):
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size,
                            init_method=f"tcp://127.0.0.1:{port}", device_id=device)
    E, H = args.experts, args.hidden
    per_rank = E // world_size
    local_experts = range(rank * per_rank, (rank + 1) * per_rank)

    layer = Experts(args, device)
    g = torch.Generator().manual_seed(args.seed * 1000 + rank + 1)  # this rank's tokens
    x = torch.randn(args.tokens, H, generator=g).to(torch.bfloat16).to(device)
    topk_idx, topk_weights = layer.route(x, args.topk)

    # Reference: every expert on this rank, from the unquantized x, summed in float32.
    with torch.no_grad():
        ref = layer.weighted_sum(x, topk_idx, topk_weights, range(E))

    rows = []
    for dispatch_dtype, combine_dtype in PAIRS:
        op = moe_ep.get_op(dist.group.WORLD, E, args.topk, H, args.tokens,
                           dispatch_dtype=dispatch_dtype, combine_dtype=combine_dtype)
        with torch.no_grad():
            out = moe_forward(op, layer, x, topk_idx, topk_weights, dispatch_dtype,
                              local_experts)
        diff = out.float() - ref
        # Sums of squares and the largest error over all ranks.
        stats = torch.stack([diff.square().sum(), ref.square().sum()])
        dist.all_reduce(stats)
        max_abs = diff.abs().max() if diff.numel() else torch.zeros((), device=device)
        dist.all_reduce(max_abs, op=dist.ReduceOp.MAX)
        rel = (stats[0] / stats[1]).sqrt().item()
        rows.append((dispatch_dtype, combine_dtype, rel, max_abs.item()))

    if rank == 0:
        print(f"MoE layer: {world_size} rank(s), {args.tokens} tokens/rank, hidden {H}, "
              f"ffn {args.ffn}, {E} experts, top-{args.topk}, seed {args.seed}")
        print(f"{'dispatch':<10}{'combine':<18}{'rel error':>12}{'max abs err':>14}")
        for d, c, rel, mx in rows:
            print(f"{d:<10}{c:<18}{rel:>12.3e}{mx:>14.3e}")
    moe_ep.clear_op_cache()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nprocs", type=int, default=torch.cuda.device_count(),
                   help="ranks, one GPU each (default: all visible GPUs)")
    p.add_argument("--tokens", type=int, default=512, help="tokens per rank")
    p.add_argument("--hidden", type=int, default=2048, help="a multiple of 128")
    p.add_argument("--ffn", type=int, default=1024, help="expert intermediate size")
    p.add_argument("--experts", type=int, default=32, help="a multiple of --nprocs")
    p.add_argument("--topk", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if not 1 <= args.nprocs <= torch.cuda.device_count():
        p.error(f"--nprocs {args.nprocs}: between 1 and the {torch.cuda.device_count()} "
                "visible GPU(s)")
    if args.experts % args.nprocs or args.hidden % 128 or not 1 <= args.topk <= args.experts:
        p.error("--experts must be a multiple of --nprocs, --hidden of 128, "
                "and 1 <= --topk <= --experts")

    os.environ["NCCL_NVLS_ENABLE"] = "0"
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args.nprocs, port, args), nprocs=args.nprocs)


if __name__ == "__main__":
    main()
