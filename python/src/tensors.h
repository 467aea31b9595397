// Tensors across the Python boundary, zero copy through DLPack. Inputs: a torch tensor's or a
// numpy array's DLPack capsule becomes a moe_ep::TensorView for the length of one call
// (ImportScope releases the capsules when the call returns). Outputs: a view into op-owned
// memory becomes an ExportedBuffer, whose __dlpack__ hands a capsule to torch or numpy; the
// capsule keeps the op (and so its buffers) alive for as long as the consumer's tensor lives.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <vector>

#include "dlpack_abi.h"
#include "moe_ep/tensor.h"

namespace moe_ep::python {

namespace py = pybind11;

// Owns the DLPack tensors imported during one call and calls their deleters at scope exit.
class ImportScope {
 public:
  ImportScope() = default;
  ImportScope(const ImportScope&) = delete;
  ImportScope& operator=(const ImportScope&) = delete;
  ~ImportScope();

  // obj: a "dltensor" capsule or an object with __dlpack__ (numpy array, torch tensor); a
  // host array whose __dlpack__ refuses (read-only numpy < 2) via __array_interface__. dtype
  // mapping: bfloat16 -> bf16; uint16/int16 -> bf16 bit patterns (numpy has no bf16); float32;
  // int32; any 8-bit type -> `one_byte`, the wire type this argument expects. Rejects, naming
  // `name`: other dtypes, vector lanes, more than 2 dimensions, non-contiguous strides and
  // devices other than cpu / cuda / pinned host.
  TensorView import(py::handle obj, const char* name, ScalarType one_byte = ScalarType::kUInt8);

 private:
  std::vector<DlManagedTensor*> owned_;
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
