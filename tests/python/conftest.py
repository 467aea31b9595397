"""Shared fixtures of the moe_ep pytest suite: seeded random inputs and rank threads.

The CPU backend runs one rank per Python thread, and every collective call (get_op, dispatch,
combine) must be made by all ranks. `run_ranks(W, fn)` runs fn(rank) on W threads, joins them
with a deadline so that a bug cannot hang the suite, and re-raises the exception of the first
rank that failed; `run_ranks_outcomes` returns each rank's result or exception instead, for the
error tests. `rng` is a numpy Generator whose seed is printed (`seed=...`); the base seed is
20250611 like the C++ tests, MOE_EP_TEST_SEED overrides it, and each test mixes in its own name so
tests stay independent. `make_inputs` and `random_bf16` build dispatch inputs (bf16 as uint16
bit patterns, int32 expert ids with masked slots, float32 weights) for any world and shape.
"""

import os
import threading
import time
import zlib

# Before anything initializes CUDA: the single-GPU world's ranks wait on each other's kernels
# across streams of one device, which needs a hardware queue per stream and eager module loading
# (a lazily loaded kernel's first launch can wait for another rank's waiting kernel).
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import np_reference as ref

DEFAULT_SEED = 20250611
JOIN_TIMEOUT_S = 120.0


def base_seed():
    text = os.environ.get("MOE_EP_TEST_SEED")
    return int(text, 0) if text else DEFAULT_SEED


@pytest.fixture
def seed(request):
    s = (base_seed() * 1000003 + zlib.crc32(request.node.name.encode())) % 2**63
    print(f"seed={s} base seed={base_seed()} (set MOE_EP_TEST_SEED={base_seed()} to replay)")
    return s


@pytest.fixture
def rng(seed):
    return np.random.default_rng(seed)


def _run(world_size, fn, timeout_s):
    results = [None] * world_size
    errors = [None] * world_size

    def body(rank):
        try:
            results[rank] = fn(rank)
        except BaseException as e:  # noqa: B036 - handed to the main thread
            errors[rank] = e

    threads = [threading.Thread(target=body, args=(r,), name=f"moe-ep-rank{r}", daemon=True)
               for r in range(world_size)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [r for r, t in enumerate(threads) if t.is_alive()]
    if stuck:
        pytest.fail(f"ranks {stuck} did not finish within {timeout_s} s (hang?); "
                    f"errors of the others: {[e for e in errors if e is not None]}")
    return results, errors


def run_ranks_impl(world_size, fn, timeout_s=JOIN_TIMEOUT_S):
    """fn(rank) on world_size threads; re-raises the first failing rank's exception."""
    results, errors = _run(world_size, fn, timeout_s)
    for rank, e in enumerate(errors):
        if e is not None:
            if hasattr(e, "add_note"):
                e.add_note(f"(raised on rank {rank} of {world_size})")
            raise e
    return results


def run_ranks_outcomes_impl(world_size, fn, timeout_s=JOIN_TIMEOUT_S):
    """fn(rank) on world_size threads; per rank, its result or the exception it raised."""
    results, errors = _run(world_size, fn, timeout_s)
    return [e if e is not None else r for r, e in zip(results, errors)]


@pytest.fixture
def run_ranks():
    return run_ranks_impl


@pytest.fixture
def run_ranks_outcomes():
    return run_ranks_outcomes_impl


def random_bf16_impl(rng, shape, zero_block=128, outliers=True):
    """Finite bf16 bits: |x| mostly in 0.02..10 with per-row scales, some zero blocks,
    negative zeros and a few outliers (up to ~3e4)."""
    shape = tuple(shape)
    if 0 in shape:
        return np.zeros(shape, dtype=np.uint16)
    rows, cols = shape
    mag = np.exp(rng.uniform(np.log(0.02), np.log(10.0), size=shape))
    row_scale = np.exp(rng.uniform(-2.0, 1.0, size=(rows, 1)))
    x = (mag * row_scale * rng.choice([-1.0, 1.0], size=shape)).astype(np.float32)
    if outliers:
        hit = rng.random(shape) < 0.002
        x[hit] *= np.float32(3000.0)
    for r in range(rows):  # some whole blocks of zeros (and -0)
        if cols >= zero_block and rng.random() < 0.2:
            b = rng.integers(0, cols // zero_block) * zero_block
            x[r, b:b + zero_block] = rng.choice([0.0, -0.0])
    bits = ref.f32_to_bf16(x)
    assert np.isfinite(ref.bf16_to_f32(bits)).all()
    return bits


@pytest.fixture
def random_bf16():
    return random_bf16_impl


def random_routing(rng, num_tokens, num_experts, topk, mask_frac=0.25):
    """[T, K] int32 distinct expert ids per token with ~mask_frac slots masked (-1); when T >= 3
    token 1 has every slot masked."""
    if num_tokens == 0:
        return np.zeros((0, topk), dtype=np.int32)
    idx = np.argsort(rng.random((num_tokens, num_experts)), axis=1)[:, :topk].astype(np.int32)
    idx[rng.random((num_tokens, topk)) < mask_frac] = -1
    if num_tokens >= 3:
        idx[1, :] = -1
    return np.ascontiguousarray(idx)


def make_inputs_impl(rng, world_size, num_experts, topk, hidden, tokens, mask_frac=0.25):
    """Per rank: dict(x=[T, H] uint16 bf16, topk_idx=[T, K] int32, topk_weights=[T, K] float32,
    x_scales=None)."""
    assert len(tokens) == world_size
    inputs = []
    for t in tokens:
        inputs.append({
            "x": random_bf16_impl(rng, (t, hidden)),
            "x_scales": None,
            "topk_idx": random_routing(rng, t, num_experts, topk, mask_frac),
            "topk_weights": rng.uniform(-1.0, 1.0, size=(t, topk)).astype(np.float32),
        })
    return inputs


@pytest.fixture
def make_inputs():
    return make_inputs_impl
