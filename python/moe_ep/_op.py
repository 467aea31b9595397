"""Ops on torch tensors and numpy arrays: get_op (and op_memory, what it would allocate),
Op.dispatch, Op.combine, the decode-mode calls Op.low_latency_dispatch and
Op.low_latency_combine (with overlap hooks: return_recv_hook), single_gpu_world.

Arguments are handed to the C++ op zero copy (DLPack); outputs are views of the op's buffers,
valid until the next dispatch of the same mode on the same op. CUDA work is queued on torch's
current stream of the op's device. The only logic here is argument handling: which
communicator a group means, which cache an op lives in, which torch dtype a byte buffer is
viewed as, int64 expert ids made int32, and making every refusal of this layer collective: an
argument this rank cannot hand to the C++ op is still a call (Op.reject, reject_create), so
every rank fails with the reason at once instead of waiting for this one until the timeout
poisons the op. The helpers that check and export single arguments are in _args.py.
"""

import sys
import threading
import weakref
from typing import Any, List, NamedTuple

from . import _C
from . import DispatchDtype, Error, InternalError, InvalidArgument, resolve_dtypes
from ._args import (_bool_arg, _export, _from_buffer, _int_arg, _is_numpy, _is_torch, _reason,
                    _torch)


class DispatchOutput(NamedTuple):
    """What dispatch returns besides the handle (docs/design.md#dispatch); R = num_recv rows."""
    recv_x: Any                        # [R, H] bf16 / float8_e4m3fn, or [R, H/2] uint8 e2m1 pairs
    recv_x_scales: Any                 # [R, H/128] float32 / [R, H/32] e8m0; None for bf16
    recv_topk_idx: Any                 # [R, K] int32: local expert id or -1
    recv_topk_weights: Any             # [R, K] float32
    recv_src_rank: Any                 # [R] int32
    recv_src_token: Any                # [R] int32
    recv_count_per_local_expert: Any   # [E / W] int32
    num_recv: int


class LowLatencyDispatchOutput(NamedTuple):
    """What low_latency_dispatch returns besides the handle (C++ LowLatencyDispatchResult,
    docs/decode-mode.md): fixed shapes, one slab of S = W * max_tokens_per_rank rows per local
    expert, rows in canonical order (source rank, then source token) from row 0. Rows at or
    after recv_count[e] are unspecified in recv_x and recv_x_scales and -1 in recv_src_*."""
    recv_x: Any          # [E/W, S, H] bf16 / float8_e4m3fn, or [E/W, S, H/2] uint8 e2m1 pairs
    recv_x_scales: Any   # [E/W, S, H/128] float32 / [E/W, S, H/32] e8m0; None for bf16
    #                      (with column_major_scales: the same shape, S the contiguous axis)
    recv_count: Any      # [E/W] int32: rows in use in each slab
    recv_src_rank: Any   # [E/W, S] int32: the sending rank of each row
    recv_src_token: Any  # [E/W, S] int32: the token's index on that rank
    recv_src_slot: Any   # [E/W, S] int32: the first top-k slot of the token naming the expert


class RecvHook:
    """The receive part of a decode-mode call made with return_recv_hook=True
    (docs/decode-mode.md#overlap-hooks). Calling it completes the call: the low-latency
    dispatch's views are filled, or the combine's out is summed. It is collective like the call
    (every rank calls its hook) and runs on torch's current stream at the time of the call. An op
    holds one pending receive: until its hook has run, every other call on the op fails on every
    rank, and calling a hook twice (or one of an earlier call) raises InvalidUsage on the rank
    that does it, without waiting for the others."""
    __slots__ = ("_op", "_kind", "_handle", "_keep", "_after")

    def __init__(self, op, kind: str, handle, keep=None, after=None):
        self._op = op          # the Op wrapper
        self._kind = kind      # "low_latency_dispatch_recv" or "low_latency_combine_recv"
        self._handle = handle  # the LowLatencyHandle of the call's low-latency dispatch
        self._keep = keep      # combine: the out the receive part writes, alive until then
        self._after = after    # dispatch: what completes it once the views hold its rows

    def __call__(self) -> None:
        getattr(self._op._op, self._kind)(self._handle, stream=self._op._stream())
        if self._after is not None:
            self._after()

    def __repr__(self):
        return (f"<moe_ep.RecvHook {self._kind} of low-latency dispatch call "
                f"{self._handle.call_seq} of op {self._handle.op_uid}>")


# ---- the op ---------------------------------------------------------------------------------

class Op:
    """One rank's op (C++ moe_ep::Op). Get it from get_op(); every rank makes the same calls."""

    def __init__(self, raw, device=None):
        self._op = raw
        self._device = device  # CUDA device index of the op; None for the CPU backend
        config = raw.config
        self._num_experts = config["num_experts"]
        self._hidden = config["hidden"]
        self._dispatch_dtype = config["dispatch_dtype"]
        self._column_major_scales = config["column_major_scales"]

    config = property(lambda self: self._op.config, doc="The op's configuration (dict).")
    rank = property(lambda self: self._op.rank)
    world_size = property(lambda self: self._op.world_size)
    backend = property(lambda self: self._op.backend, doc='"cpu" or "cuda".')
    uid = property(lambda self: self._op.uid)
    low_latency = property(lambda self: self._op.low_latency,
                           doc="OpConfig::low_latency: whether the op takes decode-mode calls.")
    copy_engine = property(lambda self: self._op.copy_engine,
                           doc="OpConfig::copy_engine as resolved at creation: whether normal "
                               "mode moves rows with the GPU's copy engines (CUDA backend).")
    captured = property(lambda self: self._op.captured,
                        doc="Op::captured(): whether a CUDA graph captured a call of this op "
                            "(then get_op's cache keeps it past its eviction, until "
                            "clear_op_cache).")
    def memory(self) -> dict:
        """What this op allocated on this rank: {"peer_bytes", "private_bytes", "total"}, as
        op_memory said before its creation (docs/design.md#memory-per-op)."""
        return self._op.memory()

    column_major_scales = property(
        lambda self: self._column_major_scales,
        doc="OpConfig::column_major_scales: whether low_latency_dispatch's recv_x_scales is "
            "stored column by column (DeepEP's layout; the view's shape is the same).")

    def __repr__(self):
        c = self.config
        return (f"<moe_ep.Op {self.backend} rank {self.rank}/{self.world_size} "
                f"E={c['num_experts']} H={c['hidden']} K={c['top_k']} "
                f"T<={c['max_tokens_per_rank']} {c['dispatch_dtype']}/{c['combine_dtype']}"
                f"{' low_latency' if self.low_latency else ''}"
                f"{' copy_engine' if self.copy_engine else ''}"
                f"{' column_major_scales' if self.column_major_scales else ''}>")

    def _stream(self) -> int:
        """torch's current stream on the op's device (0 for the CPU backend)."""
        torch = _torch()
        if self._device is None or torch is None:
            return 0
        return torch.cuda.current_stream(self._device).cuda_stream

    def _reject(self, kind: str, error: Exception, stream: int):
        """This rank refuses its call of `kind`: every rank's call fails with the reason."""
        try:
            self._op.reject(kind, _reason(error), stream)
        except Error as collective:
            raise collective from error
        raise InternalError(f"{kind}: the op accepted a call this rank rejected")

    def _expert_ids(self, topk_idx):
        """int64 expert ids (torch's topk, numpy's default) as int32, on their own device.

        Values outside [-1, num_experts) stay outside: they are clamped to -2 or num_experts,
        which the op's range check rejects (so an id of 2**40 is reported as num_experts).
        """
        if _is_torch(topk_idx):
            torch = _torch()
            if topk_idx.dtype == torch.int64:
                return topk_idx.clamp(-2, self._num_experts).to(torch.int32)
        elif _is_numpy(topk_idx):
            np = sys.modules["numpy"]
            if topk_idx.dtype == np.int64:
                return np.clip(topk_idx, -2, self._num_experts).astype(np.int32)
        return topk_idx

    def _dispatch_args(self, kind: str, x, topk_idx, topk_weights, x_scales):
        """(exported arguments, stream) of dispatch or low_latency_dispatch; any refusal of
        this rank is its call's rejection on every rank."""
        stream = 0
        try:
            stream = self._stream()
            args = (_export(x, "x"), _export(self._expert_ids(topk_idx), "topk_idx"),
                    _export(topk_weights, "topk_weights"), _export(x_scales, "x_scales"))
        except Exception as e:  # noqa: BLE001 -- any refusal of this rank is the call's
            self._reject(kind, e, stream)
        return args, stream

    def _wire_views(self, as_torch: bool):
        """The torch dtypes recv_x and recv_x_scales are viewed as (None: as exported)."""
        x_view = scale_view = None
        if as_torch:
            torch = _torch()
            if self._dispatch_dtype == DispatchDtype.fp8.name:
                x_view = torch.float8_e4m3fn
            elif self._dispatch_dtype == DispatchDtype.fp4.name:
                scale_view = getattr(torch, "float8_e8m0fnu", None)
        return x_view, scale_view

    def dispatch(self, x, topk_idx, topk_weights, x_scales=None):
        """Sends each token to the ranks of its experts; returns (DispatchOutput, Handle).

        x: [T, H] bf16, or pre-quantized ([T, H] float8_e4m3fn with x_scales [T, H/128]
        float32; [T, H/2] uint8 e2m1 pairs with x_scales [T, H/32] e8m0). topk_idx: [T, K]
        int32 or int64 (-1 masks a slot). topk_weights: [T, K] float32. A bad argument on any
        rank fails every rank's call with ValueError and changes nothing.
        """
        as_torch = _is_torch(x)
        args, stream = self._dispatch_args("dispatch", x, topk_idx, topk_weights, x_scales)
        recv, handle = self._op.dispatch(*args, stream=stream, raw_bits=not as_torch)
        x_view, scale_view = self._wire_views(as_torch)
        out = DispatchOutput(
            _from_buffer(recv["recv_x"], as_torch, x_view),
            _from_buffer(recv["recv_x_scales"], as_torch, scale_view),
            *(_from_buffer(recv[k], as_torch) for k in (
                "recv_topk_idx", "recv_topk_weights", "recv_src_rank", "recv_src_token",
                "recv_count_per_local_expert")),
            recv["num_recv"])
        return out, handle

    def _new_out(self, y, handle, handle_type=None, what="a dispatch"):
        """combine's out when the caller gives none: [T, H] bf16 where the op works."""
        handle_type = handle_type or _C.Handle
        if not isinstance(handle, handle_type):
            raise InvalidArgument(f"handle: expected the moe_ep.{handle_type.__name__} of "
                                  f"{what}, got {type(handle).__name__}")
        shape = (handle.num_tokens, self._hidden)
        torch = _torch()
        if torch is not None and self._device is not None:
            return torch.empty(shape, dtype=torch.bfloat16, device=torch.device("cuda",
                                                                               self._device))
        if _is_torch(y):
            return torch.empty(shape, dtype=torch.bfloat16, device=y.device)
        import numpy as np
        return np.empty(shape, dtype=np.uint16)  # bf16 bit patterns

    def combine(self, y, handle, out=None):
        """Sends each received row's partial result y ([R, H] bf16) back and sums them.

        Returns out: [T, H] bf16 on the rank that dispatched the tokens (allocated when None).
        A bad argument on any rank fails every rank's call with ValueError and changes nothing
        (out is not written, the handle stays good).
        """
        stream = 0
        try:
            stream = self._stream()
            if out is None:
                out = self._new_out(y, handle)
            y_arg, out_arg = _export(y, "y"), _export(out, "out")
        except Exception as e:  # noqa: BLE001 -- any refusal of this rank is the call's
            self._reject("combine", e, stream)
        self._op.combine(handle, y_arg, out_arg, stream=stream)
        return out

    def _recv_stats(self, stats, x):
        """cumulative_local_expert_recv_stats checked: None, or an int32 [E/W] tensor of the
        kind of x (a torch tensor on x's device, or a writable numpy array)."""
        if stats is None:
            return None
        local = self._num_experts // self.world_size
        name = "cumulative_local_expert_recv_stats"
        if _is_torch(x):
            torch = _torch()
            ok = (_is_torch(stats) and stats.dtype == torch.int32
                  and tuple(stats.shape) == (local,) and stats.device == x.device)
            want = f"a torch.int32 tensor of shape ({local},) on {x.device}"
        else:
            np = sys.modules.get("numpy")
            ok = (_is_numpy(stats) and stats.dtype == np.int32 and stats.shape == (local,)
                  and stats.flags.writeable)
            want = f"a writable numpy int32 array of shape ({local},)"
        if not ok:
            got = (f"{type(stats).__name__} {getattr(stats, 'dtype', '')} "
                   f"{tuple(getattr(stats, 'shape', ()))} {getattr(stats, 'device', '')}")
            raise InvalidArgument(f"{name}: {got.strip()} is not {want} (E/W local experts, "
                                  "as x's kind)")
        return stats

    def low_latency_dispatch(self, x, topk_idx, topk_weights, x_scales=None,
                             return_recv_hook=False, cumulative_local_expert_recv_stats=None):
        """Decode mode's dispatch; returns (LowLatencyDispatchOutput, LowLatencyHandle), and
        with return_recv_hook=True (recv, handle, hook).

        Only for ops created with get_op(..., low_latency=True). The arguments are those of
        dispatch, with T <= max_tokens_per_rank; the outputs have shapes fixed by the
        configuration (one slab of W * max_tokens_per_rank rows per local expert, see
        LowLatencyDispatchOutput) and stay valid until the next low_latency_dispatch on the op,
        whatever normal-mode calls come in between. A bad argument on any rank (or a call on an
        op without low_latency) fails every rank's call with ValueError and changes nothing.

        return_recv_hook=True (True or False only) splits the call for overlap
        (docs/decode-mode.md#overlap-hooks): this call agrees on the step and sends, and returns
        at once; the outputs are views of their fixed memory but hold nothing of this call until
        hook() (a RecvHook) has run. Every rank calls its hook; until then the op takes no
        other call.

        cumulative_local_expert_recv_stats (as DeepEP's: expert load statistics): an int32 [E/W]
        tensor of x's kind that each call adds its recv_count to, on torch's current stream
        (capturable), once its receive is complete (in hook() with return_recv_hook). Untouched
        when the call fails.
        """
        as_torch = _is_torch(x)
        stream = 0
        try:
            stream = self._stream()
            hook = _bool_arg("return_recv_hook", return_recv_hook)
            stats = self._recv_stats(cumulative_local_expert_recv_stats, x)
        except Exception as e:  # noqa: BLE001 -- any refusal of this rank is the call's
            self._reject("low_latency_dispatch", e, stream)
        args, stream = self._dispatch_args("low_latency_dispatch", x, topk_idx, topk_weights,
                                           x_scales)
        recv, handle = self._op.low_latency_dispatch(*args, stream=stream,
                                                     raw_bits=not as_torch, return_recv_hook=hook)
        x_view, scale_view = self._wire_views(as_torch)
        scales = _from_buffer(recv["recv_x_scales"], as_torch, scale_view)
        if scales is not None and self._column_major_scales:
            # The op returns the storage, [E/W, scale_dim, S]; callers get DeepEP's view of it,
            # [E/W, S, scale_dim] with the S axis contiguous (a view, not a copy).
            scales = scales.swapaxes(1, 2)
        out = LowLatencyDispatchOutput(
            _from_buffer(recv["recv_x"], as_torch, x_view),
            scales,
            *(_from_buffer(recv[k], as_torch) for k in (
                "recv_count", "recv_src_rank", "recv_src_token", "recv_src_slot")))
        add_counts = None
        if stats is not None:
            def add_counts():
                if as_torch:
                    stats.add_(out.recv_count)
                else:
                    sys.modules["numpy"].add(stats, out.recv_count, out=stats)
        if hook:
            return out, handle, RecvHook(self, "low_latency_dispatch_recv", handle,
                                         after=add_counts)
        if add_counts is not None:
            add_counts()
        return out, handle

    def low_latency_combine(self, y, handle, out=None, return_recv_hook=False):
        """Decode mode's combine of the latest low_latency_dispatch (its handle).

        y: [E/W, W * max_tokens_per_rank, H] bf16, row i of slab e the raw output of local
        expert e for the slab's row i (rows at or after recv_count[e] are never read); the op
        applies the routing weights. Returns out: [T, H] bf16 for this rank's T of that
        dispatch (allocated when None). A bad argument on any rank fails every rank's call with
        ValueError and changes nothing (out is not written, the handle stays good).

        return_recv_hook=True (True or False only): this call sends the expert side's partial
        sums and returns (out, hook) at once; out holds the result once hook() (a RecvHook,
        which keeps out alive) has run on every rank. Until then the op takes no other call.
        """
        stream = 0
        try:
            stream = self._stream()
            hook = _bool_arg("return_recv_hook", return_recv_hook)
            if out is None:
                out = self._new_out(y, handle, _C.LowLatencyHandle, "a low_latency_dispatch")
            y_arg, out_arg = _export(y, "y"), _export(out, "out")
        except Exception as e:  # noqa: BLE001 -- any refusal of this rank is the call's
            self._reject("low_latency_combine", e, stream)
        self._op.low_latency_combine(handle, y_arg, out_arg, stream=stream,
                                     return_recv_hook=hook)
        if hook:
            return out, RecvHook(self, "low_latency_combine_recv", handle, keep=out)
        return out

    def synchronize(self):
        """Waits for this op's queued work and raises any error its kernels reported."""
        self._op.synchronize(self._stream())


# ---- communicators and the op cache ---------------------------------------------------------

_lock = threading.Lock()
_caches = {}          # cache key -> (_C.OpCache, lock serialising its get and clear)
_torch_comms = {}     # (id(group), device) -> (group, communicator)
_comm_devices = {}    # group_id of a single_gpu_world -> its device
_wrappers = weakref.WeakValueDictionary()  # op uid -> Op


def _communicator(group):
    """(communicator, cache key, CUDA device or None) for a moe_ep communicator or a
    torch.distributed group. The cache key is (backend, group id, rank): one cache per rank of
    each group, so two CpuWorlds (or two single-GPU worlds) never share one."""
    if isinstance(group, _C.Communicator):
        device = None
        if group.backend == "cuda":
            with _lock:
                device = _comm_devices.get(group.group_id)
            torch = _torch()
            if device is None and torch is not None:
                device = torch.cuda.current_device()
        return group, (group.backend, group.group_id, group.rank), device
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
    comm = entry[1]
    return comm, ("cuda", comm.group_id, comm.rank), device


def get_op(group, num_experts: int, top_k: int, hidden: int, max_tokens_per_rank: int,
           dispatch_dtype="auto", combine_dtype="auto", weight_dtype="bf16",
           instance_id: int = 0, num_sms: int = 0, low_latency: bool = False,
           ranks_per_node: int = 0, copy_engine: bool = False,
           column_major_scales: bool = False) -> Op:
    """The op for this configuration, from the LRU cache (capacity 4) or created collectively.

    group: a torch.distributed ProcessGroup (CUDA backend, device torch.cuda.current_device())
    or a moe_ep communicator (CpuWorld(n).communicator(rank): CPU backend; single_gpu_world(n)[
    rank]: CUDA backend on one GPU). The dtypes are resolved as resolve_dtypes does, with the
    process environment. num_sms: the op's SM budget on CUDA (0: MOE_EP_NUM_SMS or the
    default; ignored on CPU). low_latency: OpConfig::low_latency, the op also holds decode
    mode's per-expert slabs (E * max_tokens_per_rank rows) and takes the low_latency_* calls;
    True or False only. ranks_per_node: OpConfig::ranks_per_node, ranks per node L (ranks
    [n*L, (n+1)*L) form node n; L divides the world size; 0, the default, is one node); with
    L < world size combine sums each other node's rows on that node first
    (docs/design.md#several-nodes); on both backends in both modes (on CUDA each node must lie
    inside one NVLink domain of the communicator, checked on every rank).
    copy_engine: OpConfig::copy_engine, normal mode's rows move by the GPU's copy engines
    instead of SM stores (CUDA backend, one node, not with low_latency=True: those combinations
    are refused on every rank; ignored on CPU); False takes MOE_EP_COPY_ENGINE for the ops that
    can use it; True or False only. column_major_scales: OpConfig::column_major_scales, decode
    mode's recv_x_scales stored column by column as DeepEP's low-latency dispatch returns them
    (the view keeps the shape [E/W, S, scale_dim], with strides (S * scale_dim, 1, S)); only
    with low_latency=True (else refused on every rank); True or False only. The integers must
    be ints in int32 range. A configuration this rank cannot even build (a bad dtype name,
    hidden=128.7) is told to the other ranks, whose creation fails at once with the reason; the
    next creation works. What the op will allocate: op_memory, with the same arguments.
    """
    comm, key, device = _communicator(group)
    try:
        args = _config_args(num_experts, top_k, hidden, max_tokens_per_rank, dispatch_dtype,
                            combine_dtype, weight_dtype, instance_id, num_sms, low_latency,
                            ranks_per_node, copy_engine, column_major_scales)
    except Exception as e:  # noqa: BLE001 -- any refusal of this rank is the creation's
        _reject_create(comm, e)
        raise
    with _lock:
        entry = _caches.get(key)
        if entry is None:
            entry = _caches[key] = (_C.OpCache(4), threading.Lock())
    cache, cache_lock = entry
    with cache_lock:  # the C++ cache is one rank's and not thread-safe; see clear_op_cache
        raw = cache.get(comm, *args)
    with _lock:
        op = _wrappers.get(raw.uid)
        if op is None:
            op = Op(raw, device)
            _wrappers[raw.uid] = op
    return op


def _config_args(num_experts, top_k, hidden, max_tokens_per_rank, dispatch_dtype, combine_dtype,
                 weight_dtype, instance_id, num_sms, low_latency, ranks_per_node, copy_engine,
                 column_major_scales):
    """get_op's arguments checked and resolved, in the order the C++ layer takes them after the
    communicator (OpCache.get, op_memory); InvalidArgument names a bad one. Called from get_op
    and op_memory only (the dtype warnings point at their caller)."""
    e_, h_, k_, t_, instance_, sms_, nodes_ = [_int_arg(name, value) for name, value in (
        ("num_experts", num_experts), ("hidden", hidden), ("top_k", top_k),
        ("max_tokens_per_rank", max_tokens_per_rank), ("instance_id", instance_id),
        ("num_sms", num_sms), ("ranks_per_node", ranks_per_node))]
    low_latency_ = _bool_arg("low_latency", low_latency)
    copy_engine_ = _bool_arg("copy_engine", copy_engine)
    column_major_ = _bool_arg("column_major_scales", column_major_scales)
    res = resolve_dtypes(weight_dtype, dispatch_dtype, combine_dtype, stacklevel=4)
    return (e_, h_, k_, t_, res.dispatch.value, res.combine.value, instance_, sms_, low_latency_,
            nodes_, copy_engine_, column_major_)


def op_memory(group, num_experts: int, top_k: int, hidden: int, max_tokens_per_rank: int,
              dispatch_dtype="auto", combine_dtype="auto", weight_dtype="bf16",
              instance_id: int = 0, num_sms: int = 0, low_latency: bool = False,
              ranks_per_node: int = 0, copy_engine: bool = False,
              column_major_scales: bool = False) -> dict:
    """What get_op with the same arguments would allocate on this rank, without creating an op
    or waiting for the other ranks (C++ moe_ep::op_memory, docs/design.md#memory-per-op):
    {"peer_bytes": the buffer the ranks read and write in each other, "private_bytes": this
    rank's own arrays, "total": their sum}. Op.memory() of the op made says the same. A bad
    argument raises InvalidArgument here only. With a torch group seen for the first time, its
    communicator is made first, which is collective, as in get_op."""
    comm, _, _ = _communicator(group)
    args = _config_args(num_experts, top_k, hidden, max_tokens_per_rank, dispatch_dtype,
                        combine_dtype, weight_dtype, instance_id, num_sms, low_latency,
                        ranks_per_node, copy_engine, column_major_scales)
    return _C.op_memory(comm, *args)


def _reject_create(comm, error: Exception) -> None:
    """Tells the ranks creating an op over comm that this rank refused its creation."""
    try:
        _C.reject_create(comm, _reason(error))
    except Error as told:  # this rank's own error is the one to raise
        if hasattr(error, "add_note"):
            error.add_note(f"(telling the other ranks failed too: {told})")


def single_gpu_world(world_size: int, device: int = 0, timeout_s: float = 0,
                     domain_size: int = 0) -> List[Any]:
    """world_size communicators of the CUDA backend on ONE GPU, for protocol tests.

    Rank r is element r, driven from its own Python thread, on its own torch stream of
    `device` (e.g. ``with torch.cuda.stream(torch.cuda.Stream(device)):``): the ranks' kernels
    wait for each other, so they must not share a stream. get_op(world[r], ...) gives rank r's
    op (one op cache per rank); dispatch and combine take CUDA torch tensors of `device`.
    timeout_s bounds the world's host-side exchanges (0: MOE_EP_TIMEOUT_S). Each rank's op may
    use at most the largest b SMs with (world_size - 1) * 2 * (4b + 1) <= SMs - 1 (on an H200: 16
    at 2 ranks, 5 at 4, 2 at 8), so that a late rank still finds room beside what the others hold
    while they wait. Its times are never multi-GPU figures.
    domain_size D (0: every rank) makes the world act like machines of D ranks: a rank sees only
    its domain's buffers, and what crosses domains goes through the world's loopback transport
    (ops need ranks_per_node dividing D); D must divide world_size.
    """
    comms = _C.make_single_gpu_world(_int_arg("world_size", world_size),
                                     _int_arg("device", device), float(timeout_s),
                                     _int_arg("domain_size", domain_size))
    with _lock:
        for comm in comms:
            _comm_devices[comm.group_id] = device
    return list(comms)


def clear_op_cache(group=None) -> None:
    """Drops cached ops (each is released when the last reference to it goes), the evicted ops
    kept because a CUDA graph captured their calls included: call it once no such graph will be
    replayed.

    group=None drops every cache of this process: with CPU ranks as threads that is every
    rank's cache, so call it from one rank or from all, but while no rank is inside get_op (e.g.
    between barriers), since a clear waits for a get of the same cache and a get may be waiting
    for the other ranks to join its collective. A moe_ep communicator (or a torch.distributed
    group) drops only the cache of that rank of that group.
    """
    with _lock:
        if group is None:
            entries = list(_caches.items())
        else:
            key = _cache_key_of(group)
            entries = [(key, _caches[key])] if key in _caches else []
    for key, entry in entries:
        cache, cache_lock = entry
        with cache_lock:
            cache.clear()
        with _lock:
            if _caches.get(key) is entry:
                del _caches[key]


def _cache_key_of(group):
    """The cache key of a communicator or of a torch group that has one (with _lock held)."""
    if isinstance(group, _C.Communicator):
        return (group.backend, group.group_id, group.rank)
    torch = _torch()
    if torch is None or not torch.distributed.is_available():
        raise InvalidArgument(f"group={group!r}: expected a moe_ep communicator or a "
                              "torch.distributed group")
    entry = _torch_comms.get((id(group), torch.cuda.current_device()))
    return None if entry is None else ("cuda", entry[1].group_id, entry[1].rank)


def op_cache_info() -> dict:
    """{(backend, group id, rank): (size, capacity, eviction log, retained)} for each cache;
    retained: evicted ops the cache keeps because a CUDA graph captured their calls."""
    with _lock:
        entries = dict(_caches)
    info = {}
    for key, (cache, cache_lock) in entries.items():
        with cache_lock:
            info[key] = (cache.size, cache.capacity, list(cache.eviction_log), cache.retained)
    return info


__all__ = ["DispatchOutput", "LowLatencyDispatchOutput", "Op", "RecvHook", "get_op",
           "clear_op_cache", "op_cache_info", "single_gpu_world"]
