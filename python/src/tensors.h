// Tensors across the Python boundary, zero copy through DLPack. Inputs: a torch tensor's or a
// numpy array's DLPack capsule becomes a moe_ep::TensorView for the length of one call
// (ImportScope holds the capsules during the call and consumes them only when the call took
// effect, so a rejected call consumes nothing). Outputs: a view into op-owned
// memory becomes an ExportedBuffer, whose __dlpack__ hands a capsule to torch or numpy; the
// capsule keeps the op (and so its buffers) alive for as long as the consumer's tensor lives.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <vector>

#include "dlpack_abi.h"
#include "moe_ep/tensor.h"

namespace moe_ep::python {

namespace py = pybind11;

// What one argument of a call may be, for the import's own checks (the op checks the rest).
struct ArgSpec {
  const char* name;   // the argument's name in messages: "x", "topk_idx", ...
  const char* takes;  // what it takes, for messages: "int32", "float32", ...
  // 16-bit integers are bf16 bit patterns (numpy has no bf16); elsewhere they are rejected.
  bool bf16_bits = false;
  // 8-bit types are this wire type; without one they are rejected.
  std::optional<ScalarType> one_byte;
  // The call writes the tensor (combine's out): read-only arrays are rejected.
  bool writable = false;
  // The most dimensions the argument may have: 2, or 3 for decode mode's slabs (the y of
  // low_latency_combine). The op checks the exact shape.
  int max_ndim = 2;
};

// The DLPack tensors imported for one call. Nothing is consumed until the call took effect:
// commit() marks every imported capsule used ("used_dltensor") and its deleter runs when the
// scope ends; without commit() (a rejected or failed call) the capsules are only let go, so a
// capsule the caller passed stays unconsumed and temporary ones free themselves.
class ImportScope {
 public:
  ImportScope() = default;
  ImportScope(const ImportScope&) = delete;
  ImportScope& operator=(const ImportScope&) = delete;
  ~ImportScope();

  // obj: a "dltensor" capsule or an object with __dlpack__ (numpy array, torch tensor); a
  // host array whose __dlpack__ refuses (read-only numpy) via __array_interface__. dtype
  // mapping: bfloat16 -> bf16; float32; int32; uint16/int16 -> bf16 bit patterns and any 8-bit
  // type -> spec.one_byte, where spec allows them. Every failure is an InvalidArgument naming
  // spec.name (a Python exception raised by the producer too, with its type): other dtypes
  // (named by the object's own dtype, e.g. "torch.float16", when it has one), vector lanes,
  // more than spec.max_ndim dimensions, non-contiguous strides, devices other than cpu / cuda /
  // pinned host, a read-only array where the call writes, and objects that are not tensors.
  TensorView import(py::handle obj, const ArgSpec& spec);
  // The call took effect: consume the imported capsules.
  void commit() { committed_ = true; }

 private:
  TensorView import_unchecked(py::handle obj, const ArgSpec& spec);

  std::vector<py::object> capsules_;  // every capsule imported, in order
  bool committed_ = false;
};

// One output view plus whatever must stay alive while a consumer uses its memory.
class ExportedBuffer {
 public:
  // raw_bits: export bf16 as uint16 (numpy consumers, which have no bf16). 8-bit wire types
  // are always exported as uint8; the Python layer views them as torch's float8 dtypes.
  ExportedBuffer(TensorView view, std::shared_ptr<const void> keepalive, bool raw_bits);

  // __dlpack__(stream=None, max_version=None, dl_device=None, copy=None): a new capsule each
  // call. The memory is written on the stream the producing call was given, which the Python
  // layer takes from torch's current stream, so no extra stream ordering is needed.
  py::capsule dlpack() const;
  py::tuple dlpack_device() const;  // (device type, device id) as DLPack numbers
  // numpy's __array_interface__ (host buffers only): np.asarray(buffer) is a writable view,
  // where np.from_dlpack would give a read-only one before numpy 2.
  py::dict array_interface() const;
  const TensorView& view() const { return view_; }

 private:
  TensorView view_;
  std::shared_ptr<const void> keepalive_;
  bool raw_bits_;
};

}  // namespace moe_ep::python
