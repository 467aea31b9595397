"""moe-ep: Mixture-of-Experts expert-parallel dispatch and combine, from Python.

A thin layer over the C++ library (module ``moe_ep._C``): the dtype enums, block sizes,
``scale_dim``, dtype resolution with the same environment rules and warnings as C++, the error
family, and ops on torch tensors (CUDA backend, one process per GPU over a torch.distributed
process group, or several ranks on one GPU for protocol tests) or on torch CPU tensors and numpy
arrays (CPU backend, one thread per rank), in normal mode (dispatch / combine) and, for ops
created with low_latency=True, in decode mode (low_latency_dispatch / low_latency_combine).
See docs/python.md.
"""

import enum
import warnings
from typing import List, NamedTuple, Optional

from . import _C
from ._C import (  # noqa: F401  (re-exported)
    FP8_BLOCK_SIZE,
    MXFP4_BLOCK_SIZE,
    Communicator,
    CpuWorld,
    CudaError,
    Error,
    Handle,
    InternalError,
    InvalidArgument,
    InvalidUsage,
    LowLatencyHandle,
    NcclError,
    RemoteError,
    Timeout,
)

# Member names are the C++ enumerators, values the contract's string values (docs/design.md#wire-formats).
DispatchDtype = enum.Enum("DispatchDtype", _C.dispatch_dtype_members(), module=__name__)
CombineDtype = enum.Enum("CombineDtype", _C.combine_dtype_members(), module=__name__)
WeightDtype = enum.Enum("WeightDtype", _C.weight_dtype_members(), module=__name__)

_TORCH_FP8_WEIGHTS = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
_TORCH_FP4_WEIGHTS = ("float4_e2m1fn_x2",)


def _dtype_text(value, enum_cls, arg: str) -> str:
    """The string the C++ parser takes for an enum member or a name; anything else is an error."""
    if isinstance(value, enum_cls):
        return value.value
    if isinstance(value, str):
        return value
    raise InvalidArgument(
        f"{arg}={value!r}: expected a moe_ep.{enum_cls.__name__} or one of its names/values")


def _weight_text(value) -> str:
    if isinstance(value, WeightDtype):
        return value.value
    if isinstance(value, str):
        return value
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        name = str(value).split(".")[-1]
        if name in _TORCH_FP8_WEIGHTS:
            return WeightDtype.fp8.value
        if name in _TORCH_FP4_WEIGHTS:
            return WeightDtype.fp4.value
        return WeightDtype.bf16.value  # the auto rule: anything else -> bf16
    raise InvalidArgument(
        f"weight_dtype={value!r}: expected a moe_ep.WeightDtype, a name or a torch dtype")


def scale_dim(dtype, hidden: int) -> int:
    """Scales per row: 0 (bf16, fp8 direct cast), hidden // 128 (fp8) or hidden // 32 (mxfp4,
    int8/e3m4)."""
    if isinstance(dtype, (DispatchDtype, CombineDtype)):
        dtype = dtype.value
    elif not isinstance(dtype, str):
        raise InvalidArgument(f"dtype={dtype!r}: expected a DispatchDtype, CombineDtype or name")
    return _C.scale_dim(dtype, int(hidden))


class DtypeResolution(NamedTuple):
    """The two wire dtypes and where each came from ("caller", "env", "deprecated env", "auto")."""
    dispatch: DispatchDtype
    combine: CombineDtype
    dispatch_source: str
    combine_source: str
    dispatch_origin: str
    combine_origin: str
    warnings: List[str]


def resolve_dtypes(weight_dtype="bf16", dispatch_dtype="auto", combine_dtype="auto",
                   env: Optional[dict] = None, stacklevel: int = 2) -> DtypeResolution:
    """Resolves both dtypes as C++ resolve_dtypes does (docs/design.md#configuration).

    env=None reads the process environment once per process (as C++ Knobs::get()); a dict of
    MOE_EP_* variables is parsed instead. Every warning of the resolution is issued through
    ``warnings``: DeprecationWarning for the deprecated variables, UserWarning for the others.
    """
    r = _C.resolve_dtypes(_weight_text(weight_dtype),
                          _dtype_text(dispatch_dtype, DispatchDtype, "dispatch_dtype"),
                          _dtype_text(combine_dtype, CombineDtype, "combine_dtype"),
                          None if env is None else {str(k): str(v) for k, v in env.items()})
    for message in r["warnings"]:
        category = DeprecationWarning if "deprecated" in message else UserWarning
        warnings.warn(message, category, stacklevel=stacklevel)
    return DtypeResolution(DispatchDtype[r["dispatch"]], CombineDtype[r["combine"]],
                           r["dispatch_source"], r["combine_source"], r["dispatch_origin"],
                           r["combine_origin"], list(r["warnings"]))


def cuda_backend_built() -> bool:
    """True when this moe-ep was built with the CUDA backend."""
    return _C.cuda_backend_built()


from ._op import (  # noqa: E402,F401
    DispatchOutput,
    LowLatencyDispatchOutput,
    Op,
    RecvHook,
    clear_op_cache,
    get_op,
    op_cache_info,
    op_memory,
    single_gpu_world,
)

__all__ = [
    "FP8_BLOCK_SIZE", "MXFP4_BLOCK_SIZE", "DispatchDtype", "CombineDtype", "WeightDtype",
    "scale_dim", "resolve_dtypes", "DtypeResolution", "Error", "InvalidArgument",
    "InvalidUsage", "Timeout", "RemoteError", "CudaError", "NcclError", "InternalError",
    "CpuWorld", "Communicator", "Handle", "LowLatencyHandle", "Op", "DispatchOutput",
    "LowLatencyDispatchOutput", "RecvHook", "get_op", "op_memory", "clear_op_cache",
    "op_cache_info", "cuda_backend_built", "single_gpu_world",
]
