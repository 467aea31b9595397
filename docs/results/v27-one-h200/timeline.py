"""Where a leg's time goes on the device, kernel by kernel, with the kernels overlapping as they
do in a real call (ncu serialises them). One H200, world size 1 (moe_ep.single_gpu_world(1)), the
DeepSeek-V3 shape (E = 256, top-8, hidden 7168), 32 SMs. torch.profiler (CUPTI) records every
kernel's start and end and the host's launch calls; for each leg this prints, per kernel in call
order, the median over the profiled calls of: when the host launched it, when it started and when
it ended on the device, in us from the host's entry into the leg, and the leg's end to end time.

  PYTHONPATH=<build>/python python3 timeline.py [--seed N]

Written for v27 (docs/perf-notes.md); inputs from a seeded generator (the seed is printed).
"""
import argparse
import json
import os
import statistics
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import moe_ep

E, K, H = 256, 8, 7168


def inputs(tokens, seed):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    x = torch.randn(tokens, H, generator=g, device="cuda").to(torch.bfloat16)
    idx = torch.rand(tokens, E, generator=g, device="cuda").topk(K).indices.to(torch.int32)
    w = torch.rand(tokens, K, generator=g, device="cuda")
    return x, idx, w


def short(name):
    name = name.split("(")[0]
    return name.split("<")[0].split("::")[-1]


def legs(trace_path, prefix):
    """{leg name: [per call: (host start, [(kernel, launch, start, end)], end)]} from a trace."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    ranges = [e for e in events if e.get("cat") == "user_annotation"
              and e.get("name", "").startswith(prefix)]
    launches = {}
    for e in events:
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = e
    kernels = [e for e in events if e.get("cat") == "kernel"]
    out = {}
    for r in ranges:
        t0, t1 = r["ts"], r["ts"] + r["dur"]
        rows = []
        for k in kernels:
            launch = launches.get(k["args"].get("correlation"))
            if launch is None or not (t0 <= launch["ts"] <= t1):
                continue
            rows.append((short(k["name"]), launch["ts"] - t0, k["ts"] - t0,
                         k["ts"] + k["dur"] - t0))
        rows.sort(key=lambda row: row[2])
        out.setdefault(r["name"], []).append(rows)
    return out


def report(out):
    for name, calls in out.items():
        calls = calls[2:]  # the first calls warm up
        n = min(len(c) for c in calls)
        if not calls or any(len(c) != n for c in calls):
            print(f"{name}: calls launched different kernel counts {[len(c) for c in calls]}")
            n = min(len(c) for c in calls)
        print(f"{name}: median of {len(calls)} calls, us from the host's entry into the call")
        print(f"  {'kernel':28s} {'launched':>9s} {'start':>8s} {'end':>8s} {'dur':>7s}")
        for i in range(n):
            med = [statistics.median(c[i][j] for c in calls) for j in (1, 2, 3)]
            durs = statistics.median(c[i][3] - c[i][2] for c in calls)
            print(f"  {calls[0][i][0]:28s} {med[0]:9.1f} {med[1]:8.1f} {med[2]:8.1f} {durs:7.1f}")
        ends = [max(k[3] for k in c[:n]) for c in calls]
        print(f"  device end of the last kernel: median {statistics.median(ends):.1f} us")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "little"))
    ap.add_argument("--calls", type=int, default=12)
    a = ap.parse_args()
    print(f"seed {a.seed}")
    world = moe_ep.single_gpu_world(1, device=0)
    trace = os.path.join(tempfile.mkdtemp(), "trace.json")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for d, c in (("fp8", "fp8"), ("bf16", "bf16")):
            op = moe_ep.get_op(world[0], E, K, H, 4096, dispatch_dtype=d, combine_dtype=c,
                               num_sms=32)
            for tokens in (128, 4096):
                x, idx, w = inputs(tokens, a.seed)
                for _ in range(a.calls):
                    torch.cuda.synchronize()
                    with record_function(f"normal {d}/{c} {tokens} dispatch"):
                        recv, handle = op.dispatch(x, idx, w)
                        torch.cuda.synchronize()
                    y = torch.zeros(recv.num_recv, H, dtype=torch.bfloat16, device="cuda")
                    torch.cuda.synchronize()
                    with record_function(f"normal {d}/{c} {tokens} combine"):
                        op.combine(y, handle)
                        torch.cuda.synchronize()
        op = moe_ep.get_op(world[0], E, K, H, 128, dispatch_dtype="fp8", combine_dtype="bf16",
                           num_sms=32, low_latency=True)
        y = torch.zeros(E, 128, H, dtype=torch.bfloat16, device="cuda")
        for tokens in (1, 128):
            x, idx, w = inputs(tokens, a.seed)
            for _ in range(a.calls):
                torch.cuda.synchronize()
                with record_function(f"decode fp8/bf16 {tokens} dispatch"):
                    recv, handle = op.low_latency_dispatch(x, idx, w)
                    torch.cuda.synchronize()
                with record_function(f"decode fp8/bf16 {tokens} combine"):
                    op.low_latency_combine(y, handle)
                    torch.cuda.synchronize()
    prof.export_chrome_trace(trace)
    report(legs(trace, "normal"))
    report(legs(trace, "decode"))


if __name__ == "__main__":
    main()
