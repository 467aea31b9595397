"""GPU test of moe_ep.single_gpu_world from Python threads: two ranks of the CUDA backend on ONE
GPU, each driven from its own Python thread and torch stream, with CUDA torch tensors. All 12
(dispatch, combine) dtype pairs run through get_op (one op cache per rank, LRU of 4, so ops are
evicted on the way), and every output is compared bit for bit with np_reference.py using the
inputs and checks of test_gpu_torch.py; then a rank whose Python layer rejects a tensor fails
both ranks' call with its reason and the op works for the next call, a normal-mode dispatch
inside torch.cuda.graph raises InvalidUsage naming the capture on both ranks and the op works
after it, and int64 expert ids give the outputs of int32 ones. Skipped without torch, a CUDA GPU or the CUDA backend. The seed is
printed; MOE_EP_TEST_SEED replays.
"""

import threading

import pytest
import test_gpu_torch as gpu

torch = gpu.torch
WORLD_SIZE = 2
THREAD_TIMEOUT_S = 600


def check_rejection(rk, op, seed, gate):
    """Rank 1 passes float16 x: both ranks' dispatch fails with its reason, then works."""
    x, idx, weights = gpu.reference_case(seed, 0, WORLD_SIZE)["inputs"][rk.rank]
    dev = rk.device
    x_d = x.to(dev).half() if rk.rank == 1 else x.to(dev)
    idx_d, weights_d = idx.to(dev), weights.to(dev)
    # Every rank's inputs are on the GPU before any rank's kernels wait for the others. Without
    # this, the test stalled in 2 of 3 runs on an H200, both after test_gpu_torch.py in the same
    # process; the one with stacks stalled here (rank 1 in idx.to(dev), rank 0 in dispatch, still
    # so after 50 s). Whether this gate cures it is not yet measured.
    torch.cuda.current_stream().synchronize()
    gate.wait()
    try:
        op.dispatch(x_d, idx_d, weights_d)
    except ValueError as e:
        want = ("dispatch: x: dtype torch.float16 is not supported" if rk.rank == 1 else
                "dispatch aborted: rank 1 rejected its input: x: dtype torch.float16")
        if want not in str(e):
            rk.fail(f"rejection: expected {want!r} in the error, got {e}")
    except Exception as e:  # noqa: BLE001 -- reported, not swallowed
        rk.fail(f"rejection: expected ValueError, got {type(e).__name__}: {e}")
    else:
        rk.fail("rejection: rank 1's float16 x raised nothing")
    gpu.run_case(rk, op, "fp8", "bf16", 2)  # the op works for the next call


def check_capture(rk, op, moe_ep, seed, gate):
    """Both ranks capture a normal-mode dispatch with torch.cuda.graph: each raises InvalidUsage
    naming the capture at once (normal mode is not capturable, docs/design.md#streams-and-the-sm-
    budget), nothing waits for the other rank, and the op works for the next call."""
    x, idx, weights = gpu.reference_case(seed, 0, WORLD_SIZE)["inputs"][rk.rank]
    dev = rk.device
    x_d, idx_d, weights_d = x.to(dev), idx.to(dev), weights.to(dev)
    torch.cuda.current_stream().synchronize()
    gate.wait()  # no kernel of either rank in flight while both capture
    graph = torch.cuda.CUDAGraph()
    try:
        # thread_local: the other rank thread's CUDA calls must not break this thread's capture.
        with torch.cuda.graph(graph, stream=torch.cuda.current_stream(),
                              capture_error_mode="thread_local"):
            op.dispatch(x_d, idx_d, weights_d)
    except moe_ep.InvalidUsage as e:
        if "dispatch: stream=" not in str(e) or "is capturing a CUDA graph" not in str(e):
            rk.fail(f"capture: expected the capture named in the error, got {e}")
    except Exception as e:  # noqa: BLE001 -- reported, not swallowed
        rk.fail(f"capture: expected InvalidUsage, got {type(e).__name__}: {e}")
    else:
        rk.fail("capture: a normal-mode dispatch inside torch.cuda.graph raised nothing")
    gate.wait()
    gpu.run_case(rk, op, "fp8", "bf16", 3)  # the op works for the next call


# check_capture's graph is empty by design (the dispatch inside it is refused before any kernel
# is captured), which torch reports as a UserWarning at the capture's end.
@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty")
def test_single_gpu_world_two_threads_every_dtype_pair(run_ranks):
    moe_ep = gpu.one_gpu_moe_ep()

    seed = gpu.choose_seed()
    world = moe_ep.single_gpu_world(WORLD_SIZE, device=0, timeout_s=120)
    # After each get_op: an evicted op is freed inside get_op, and freeing device memory waits
    # for the device, so no rank may have kernels waiting on the other rank's kernels then.
    gate = threading.Barrier(WORLD_SIZE, timeout=THREAD_TIMEOUT_S)

    def rank_fn(rank):
        torch.cuda.set_device(0)
        rk = gpu.Rank(rank, WORLD_SIZE, seed)
        rk.device = torch.device("cuda", 0)  # every rank on the one GPU
        stream = torch.cuda.Stream(device=0)  # ranks wait on each other: never one stream

        def get_op(d, c):
            op = moe_ep.get_op(world[rank], gpu.NUM_EXPERTS, gpu.TOP_K, gpu.HIDDEN,
                               gpu.MAX_TOKENS, dispatch_dtype=d, combine_dtype=c)
            gate.wait()
            return op

        try:
            with torch.cuda.stream(stream):
                for d in gpu.DISPATCH_DTYPES:
                    for c in gpu.COMBINE_DTYPES:
                        op = get_op(d, c)
                        if (op.backend, op.rank, op.world_size) != ("cuda", rank, WORLD_SIZE):
                            rk.fail(f"[{d}/{c}] op.backend/rank/world_size = {op.backend}/"
                                    f"{op.rank}/{op.world_size}")
                        for case in (0, 1):
                            gpu.run_case(rk, op, d, c, case)
                op = get_op("fp8", "bf16")
                check_rejection(rk, op, seed, gate)
                check_capture(rk, op, moe_ep, seed, gate)
                gpu.check_int64_ids(rk, op)
                gpu.run_case(rk, op, "fp8", "bf16", 4, give_out=True)
            stream.synchronize()
        except BaseException:
            gate.abort()  # the other rank must not wait for this one at the gate
            raise
        return rk.errors

    gpu.run_one_gpu_ranks(moe_ep, run_ranks, WORLD_SIZE, rank_fn, seed, THREAD_TIMEOUT_S)
