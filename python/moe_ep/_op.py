"""Ops on torch tensors and numpy arrays: get_op, Op.dispatch, Op.combine.

Arguments are handed to the C++ op zero copy (DLPack); outputs are views of the op's buffers,
valid until the next dispatch on the same op. CUDA work is queued on torch's current stream of
the tensor's device. The only logic here is argument handling: which communicator a group
means, which cache an op lives in, and which torch dtype a byte buffer is viewed as.
"""

import sys
import threading
import weakref
from typing import Any, NamedTuple, Optional

from . import _C
from . import CombineDtype, DispatchDtype, InvalidArgument, resolve_dtypes


class DispatchOutput(NamedTuple):
    """What dispatch returns besides the handle (DESIGN 2); R = num_recv rows."""
    recv_x: Any                        # [R, H] bf16 / float8_e4m3fn, or [R, H/2] uint8 e2m1 pairs
    recv_x_scales: Any                 # [R, H/128] float32 / [R, H/32] e8m0; None for bf16
    recv_topk_idx: Any                 # [R, K] int32: local expert id or -1
    recv_topk_weights: Any             # [R, K] float32
    recv_src_rank: Any                 # [R] int32
    recv_src_token: Any                # [R] int32
    recv_count_per_local_expert: Any   # [E / W] int32
    num_recv: int


# ---- tensors --------------------------------------------------------------------------------

def _torch():
    return sys.modules.get("torch")


def _is_torch(t) -> bool:
    torch = _torch()
    return torch is not None and isinstance(t, torch.Tensor)


# torch dtypes whose bytes are exactly a moe-ep wire type; they cross DLPack as uint8.
_TORCH_WIRE_BYTES = ("float8_e4m3fn", "float8_e8m0fnu", "float4_e2m1fn_x2")


def _to_capsule(t, name: str):
    """A DLPack capsule (or the object itself, for numpy) for one argument."""
    if t is None or not _is_torch(t):
        return t  # numpy arrays and capsules: the C++ side calls __dlpack__
    torch = _torch()
    name_of_dtype = str(t.dtype).split(".")[-1]
    if t.dtype.is_floating_point and t.element_size() == 1 or name_of_dtype.startswith("float4"):
        if name_of_dtype not in _TORCH_WIRE_BYTES:
            raise InvalidArgument(
                f"{name}: dtype {t.dtype} is not a moe-ep wire type; pre-quantized input is "
                "torch.float8_e4m3fn (fp8) or uint8 e2m1 pairs with float8_e8m0fnu scales")
        t = t.view(torch.uint8)
    return torch.utils.dlpack.to_dlpack(t.detach())


def _stream_of(t) -> int:
    if _is_torch(t) and t.is_cuda:
        return _torch().cuda.current_stream(t.device).cuda_stream
    return 0


def _from_buffer(buf, as_torch: bool, torch_view=None):
    if buf is None:
        return None
    if as_torch:
        torch = _torch()
        t = torch.utils.dlpack.from_dlpack(buf.__dlpack__())
        return t.view(torch_view) if torch_view is not None else t
    import numpy as np
    # Through __array_interface__: a writable view that keeps `buf` (and the op) alive as its
    # base; np.from_dlpack would make it read-only before numpy 2.
    return np.asarray(buf)


# ---- the op ---------------------------------------------------------------------------------

class Op:
    """One rank's op (C++ moe_ep::Op). Get it from get_op(); every rank makes the same calls."""

    def __init__(self, raw):
        self._op = raw

    config = property(lambda self: self._op.config, doc="The op's configuration (dict).")
    rank = property(lambda self: self._op.rank)
    world_size = property(lambda self: self._op.world_size)
    backend = property(lambda self: self._op.backend, doc='"cpu" or "cuda".')
    uid = property(lambda self: self._op.uid)

    def __repr__(self):
        c = self.config
        return (f"<moe_ep.Op {self.backend} rank {self.rank}/{self.world_size} "
                f"E={c['num_experts']} H={c['hidden']} K={c['top_k']} "
                f"T<={c['max_tokens_per_rank']} {c['dispatch_dtype']}/{c['combine_dtype']}>")

    def dispatch(self, x, topk_idx, topk_weights, x_scales=None):
        """Sends each token to the ranks of its experts; returns (DispatchOutput, Handle).

        x: [T, H] bf16, or pre-quantized ([T, H] float8_e4m3fn with x_scales [T, H/128]
        float32; [T, H/2] uint8 e2m1 pairs with x_scales [T, H/32] e8m0). topk_idx: [T, K]
        int32 (-1 masks a slot). topk_weights: [T, K] float32.
        """
        as_torch = _is_torch(x)
        recv, handle = self._op.dispatch(
            _to_capsule(x, "x"), _to_capsule(topk_idx, "topk_idx"),
            _to_capsule(topk_weights, "topk_weights"), _to_capsule(x_scales, "x_scales"),
            stream=_stream_of(x), raw_bits=not as_torch)
        x_view = scale_view = None
        if as_torch:
            torch = _torch()
            dispatch_dtype = self._op.config["dispatch_dtype"]
            if dispatch_dtype == DispatchDtype.fp8.name:
                x_view = torch.float8_e4m3fn
            elif dispatch_dtype == DispatchDtype.fp4.name:
                scale_view = getattr(torch, "float8_e8m0fnu", None)
        out = DispatchOutput(
            _from_buffer(recv["recv_x"], as_torch, x_view),
            _from_buffer(recv["recv_x_scales"], as_torch, scale_view),
            *(_from_buffer(recv[k], as_torch) for k in (
                "recv_topk_idx", "recv_topk_weights", "recv_src_rank", "recv_src_token",
                "recv_count_per_local_expert")),
            recv["num_recv"])
        return out, handle

    def combine(self, y, handle, out=None):
        """Sends each received row's partial result y ([R, H] bf16) back and sums them.

        Returns out: [T, H] bf16 on the rank that dispatched the tokens (allocated when None).
        """
        if not isinstance(handle, _C.Handle):
            raise InvalidArgument(f"handle: expected the moe_ep.Handle of a dispatch, got "
                                  f"{type(handle).__name__}")
        if out is None:
            shape = (handle.num_tokens, self._op.config["hidden"])
            if _is_torch(y):
                out = _torch().empty(shape, dtype=_torch().bfloat16, device=y.device)
            else:
                import numpy as np
                out = np.empty(shape, dtype=np.uint16)  # bf16 bit patterns
        self._op.combine(handle, _to_capsule(y, "y"), _to_capsule(out, "out"),
                         stream=_stream_of(y))
        return out

    def synchronize(self):
        """Waits for this op's queued work and raises any error its kernels reported."""
        stream = 0
        if self.backend == "cuda" and _torch() is not None:
            stream = _torch().cuda.current_stream().cuda_stream
        self._op.synchronize(stream)


# ---- communicators and the op cache ---------------------------------------------------------

_lock = threading.Lock()
_caches = {}          # cache key -> (_C.OpCache, lock serialising its get and clear)
_torch_comms = {}     # (id(group), device) -> (group, communicator)
_wrappers = weakref.WeakValueDictionary()  # op uid -> Op


def _communicator(group):
    """(communicator, cache key) for a moe_ep communicator or a torch.distributed group."""
    if isinstance(group, _C.Communicator):
        # CPU ranks are threads of this process: one cache per rank, as in C++.
        key = ("cpu", group.rank) if group.backend == "cpu" else ("cuda",)
        return group, key
    torch = _torch()
    if torch is None or not torch.distributed.is_available():
        raise InvalidArgument(f"group={group!r}: expected a moe_ep communicator "
                              "(CpuWorld(n).communicator(rank)) or a torch.distributed group")
    dist = torch.distributed
    if group is None:
        group = dist.group.WORLD
    if not isinstance(group, dist.ProcessGroup):
        raise InvalidArgument(f"group={group!r}: expected a torch.distributed.ProcessGroup")
    device = torch.cuda.current_device()
    key = (id(group), device)
    with _lock:
        entry = _torch_comms.get(key)
    if entry is None:
        # Collective over the group: rank 0's NCCL unique id reaches every rank through it.
        rank = dist.get_rank(group)
        ids = [_C.nccl_unique_id() if rank == 0 else None]
        dist.broadcast_object_list(ids, src=dist.get_process_group_ranks(group)[0], group=group)
        comm = _C.make_nccl_communicator(ids[0], rank, dist.get_world_size(group), device)
        entry = (group, comm)
        with _lock:
            _torch_comms[key] = entry
    return entry[1], ("cuda", device)


def get_op(group, num_experts: int, top_k: int, hidden: int, max_tokens_per_rank: int,
           dispatch_dtype="auto", combine_dtype="auto", weight_dtype="bf16",
           instance_id: int = 0) -> Op:
    """The op for this configuration, from the LRU cache (capacity 4) or created collectively.

    group: a torch.distributed ProcessGroup (CUDA backend, device torch.cuda.current_device())
    or a moe_ep communicator (e.g. CpuWorld(n).communicator(rank), CPU backend). The dtypes are
    resolved as resolve_dtypes does, with the process environment.
    """
    comm, key = _communicator(group)
    res = resolve_dtypes(weight_dtype, dispatch_dtype, combine_dtype, stacklevel=3)
    with _lock:
        entry = _caches.get(key)
        if entry is None:
            entry = _caches[key] = (_C.OpCache(4), threading.Lock())
    cache, cache_lock = entry
    with cache_lock:  # the C++ cache is one rank's and not thread-safe; see clear_op_cache
        raw = cache.get(comm, int(num_experts), int(hidden), int(top_k),
                        int(max_tokens_per_rank), res.dispatch.value, res.combine.value,
                        int(instance_id))
    with _lock:
        op = _wrappers.get(raw.uid)
        if op is None:
            op = Op(raw)
            _wrappers[raw.uid] = op
    return op


def clear_op_cache() -> None:
    """Drops every cached op of this process (each is released when the last reference goes).

    With CPU ranks as threads this clears every rank's cache: call it from one rank or from all,
    but while no rank is inside get_op (e.g. between barriers), since a clear waits for a get
    of the same cache and a get may be waiting for the other ranks to join its collective.
    """
    with _lock:
        entries = list(_caches.values())
    for cache, cache_lock in entries:
        with cache_lock:
            cache.clear()


def op_cache_info() -> dict:
    """{cache key: (size, capacity, eviction log)} for each cache of this process."""
    with _lock:
        entries = dict(_caches)
    info = {}
    for key, (cache, cache_lock) in entries.items():
        with cache_lock:
            info[key] = (cache.size, cache.capacity, list(cache.eviction_log))
    return info


__all__ = ["DispatchOutput", "Op", "get_op", "clear_op_cache", "op_cache_info",
           "CombineDtype"]
