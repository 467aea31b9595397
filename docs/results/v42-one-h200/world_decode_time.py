"""v42 probe (not part of the library): decode round trips of W ranks sharing ONE GPU
(moe_ep.single_gpu_world), timed inside CUDA graphs, to compare two trees' protocols at W >= 2
where `moe-ep bench` (one rank per GPU) cannot run on one GPU. The ranks share the GPU's SMs
and memory, so these are never multi-GPU figures: only the difference between two trees in the
same run means something.

Each rank (a Python thread on its own torch stream) captures two graphs: R low-latency
dispatches in a row (`disp`), and R round trips, dispatch then combine of a fixed y (`round`).
Then, for each replay, the ranks meet at a barrier and replay together; CUDA events before and
after each rank's replay give, per replay, the time from the latest rank's start to the latest
rank's end, divided by R. Printed: the median and the range over the replays, us per call.

    PYTHONPATH=build/gpu/python python3 world_decode_time.py --ranks 2 --tokens 128
"""
import argparse
import os
import statistics
import threading

# The one-GPU world's settings, before torch starts CUDA (include/moe_ep/cuda.h).
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")

import torch  # noqa: E402

import moe_ep  # noqa: E402


def rank_inputs(rank, args, dev):
    g = torch.Generator(device="cpu").manual_seed(args.seed * 1000 + rank)
    x = torch.randn(args.tokens, args.hidden, generator=g).to(torch.bfloat16)
    # top-k distinct experts per token: the k largest of a random score per expert
    idx = torch.rand(args.tokens, args.experts, generator=g).topk(args.top_k, dim=1).indices
    w = torch.rand(args.tokens, args.top_k, generator=g) * 0.95 + 0.05
    local = args.experts // args.ranks
    y = torch.randn(local, args.ranks * args.tokens, args.hidden, generator=g).to(torch.bfloat16)
    return x.to(dev), idx.to(dev), w.to(dev), y.to(dev)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--experts", type=int, default=256)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--dispatch-dtype", default="fp8")
    p.add_argument("--combine-dtype", default="bf16")
    p.add_argument("--per-graph", type=int, default=16, help="calls captured in one graph (R)")
    p.add_argument("--replays", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seed", type=int, default=20250611)
    args = p.parse_args()
    world = moe_ep.single_gpu_world(args.ranks, device=0, timeout_s=60)
    gate = threading.Barrier(args.ranks, timeout=300)
    capture_lock = threading.Lock()  # torch.cuda.graph syncs the device: one capture at a time
    events = {}  # (graph, rank) -> [(start, end)] per timed replay
    failures = []

    def rank_fn(rank):
        try:
            torch.cuda.set_device(0)
            dev = torch.device("cuda", 0)
            stream = torch.cuda.Stream(device=0)
            op = moe_ep.get_op(world[rank], args.experts, args.top_k, args.hidden, args.tokens,
                               dispatch_dtype=args.dispatch_dtype,
                               combine_dtype=args.combine_dtype, low_latency=True)
            x, idx, w, y = rank_inputs(rank, args, dev)
            out = torch.empty(args.tokens, args.hidden, dtype=torch.bfloat16, device=dev)
            torch.cuda.synchronize(dev)
            gate.wait()
            graphs = {}
            for name in ("disp", "round"):
                graph = torch.cuda.CUDAGraph()
                with capture_lock, torch.cuda.graph(graph, stream=stream,
                                                    capture_error_mode="thread_local"):
                    for _ in range(args.per_graph):
                        recv, handle = op.low_latency_dispatch(x, idx, w)
                        if name == "round":
                            op.low_latency_combine(y, handle, out=out)
                graphs[name] = graph
                gate.wait()  # every rank's capture has ended before any replay
            for name, graph in graphs.items():
                timed = []
                for i in range(args.warmup + args.replays):
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    gate.wait()
                    with torch.cuda.stream(stream):
                        start.record(stream)
                        graph.replay()
                        end.record(stream)
                    stream.synchronize()
                    if i >= args.warmup:
                        timed.append((start, end))
                events[(name, rank)] = timed
            op.synchronize()
        except BaseException as e:  # noqa: BLE001 -- reported below, with the rank
            failures.append((rank, e))
            gate.abort()

    threads = [threading.Thread(target=rank_fn, args=(r,), name=f"rank{r}")
               for r in range(args.ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        for rank, e in failures:
            print(f"rank {rank} failed: {e!r}")
        raise SystemExit(1)
    print(f"one-GPU world, {args.ranks} ranks sharing one GPU (not multi-GPU figures): "
          f"{args.tokens} tokens, hidden {args.hidden}, top-{args.top_k} of {args.experts}, "
          f"{args.dispatch_dtype} dispatch, {args.combine_dtype} combine, {args.per_graph} calls "
          f"a graph, {args.replays} replays")
    for name in ("disp", "round"):
        per_call = []
        for i in range(args.replays):
            pairs = [events[(name, r)][i] for r in range(args.ranks)]
            ref_start = pairs[0][0]
            # elapsed_time(a, b): ms from a to b (negative when b came first)
            latest_start = max(ref_start.elapsed_time(s) for s, _ in pairs)
            latest_end = max(ref_start.elapsed_time(e) for _, e in pairs)
            per_call.append((latest_end - latest_start) * 1000.0 / args.per_graph)
        print(f"{name:5s} us a call: median {statistics.median(per_call):.2f}, "
              f"range {min(per_call):.2f}-{max(per_call):.2f}")


if __name__ == "__main__":
    main()
