"""Argument handling of the Python layer (_op.py): torch and numpy recognised without importing
either, ints and bools checked strictly (InvalidArgument naming the argument and the value),
torch tensors exported through DLPack (one-byte wire dtypes as uint8), and the C++ layer's
output buffers viewed as torch tensors or numpy arrays."""

import operator
import sys

from . import Error, InvalidArgument

INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1


def _torch():
    return sys.modules.get("torch")


def _is_torch(t) -> bool:
    torch = _torch()
    return torch is not None and isinstance(t, torch.Tensor)


def _is_numpy(t) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(t, np.ndarray)


def _int_arg(name: str, value) -> int:
    """value as an int32, or InvalidArgument naming the argument and the value.

    Python ints and integer scalars (anything with __index__, e.g. numpy.int64) are taken; bool
    and float (even 128.0) are not, so that nothing is truncated or reinterpreted silently.
    """
    number = None
    if not (isinstance(value, bool) or type(value).__name__ in ("bool", "bool_")):
        try:
            number = operator.index(value)
        except TypeError:
            pass
    if number is None:
        raise InvalidArgument(f"{name}={value!r} is not an int ({type(value).__name__}); "
                              "pass a Python int")
    if not INT32_MIN <= number <= INT32_MAX:
        raise InvalidArgument(f"{name}={number} does not fit in int32 "
                              f"[{INT32_MIN}, {INT32_MAX}]")
    return number


def _bool_arg(name: str, value) -> bool:
    """value as a bool, or InvalidArgument naming the argument and the value: True and False
    (numpy.bool_ too); no int, str or None is read as a flag."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise InvalidArgument(f"{name}={value!r} is not a bool ({type(value).__name__}); "
                          "pass True or False")


def _reason(error: BaseException) -> str:
    """The text another rank sees for this rank's refusal."""
    if isinstance(error, Error):
        return str(error)
    return f"{type(error).__name__}: {error}"


# torch dtypes whose bytes are exactly a moe-ep wire type; they cross DLPack as uint8.
_TORCH_WIRE_BYTES = ("float8_e4m3fn", "float8_e8m0fnu", "float4_e2m1fn_x2")


class _TorchArg:
    """A torch tensor on its way to the C++ layer: its DLPack capsule, and its dtype and device
    as torch names them (the C++ layer's messages use these names)."""
    __slots__ = ("_capsule", "dtype", "device")

    def __init__(self, capsule, dtype: str, device: str):
        self._capsule = capsule
        self.dtype = dtype
        self.device = device

    def __dlpack__(self, stream=None):
        return self._capsule


def _export(t, name: str):
    """What the C++ layer imports for one argument: numpy arrays, capsules and anything else
    as they are (the C++ layer checks them), torch tensors as a _TorchArg."""
    if not _is_torch(t):
        return t
    torch = _torch()
    dtype = t.dtype
    dtype_name = str(dtype).split(".")[-1]
    if dtype.is_floating_point and t.element_size() == 1 or dtype_name.startswith("float4"):
        if dtype_name not in _TORCH_WIRE_BYTES:
            raise InvalidArgument(
                f"{name}: dtype {dtype} is not a moe-ep wire type; pre-quantized input is "
                "torch.float8_e4m3fn (fp8) or uint8 e2m1 pairs with float8_e8m0fnu scales")
        t = t.view(torch.uint8)
    return _TorchArg(torch.utils.dlpack.to_dlpack(t.detach()), str(dtype), str(t.device))


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
