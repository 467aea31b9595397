// DLPack import and export for the Python module (see tensors.h).
#include "tensors.h"

#include <array>
#include <cstdlib>
#include <sstream>
#include <string>

#include "moe_ep/errors.h"

namespace moe_ep::python {

namespace {

std::string describe_dl_dtype(const DlDataType& t) {
  std::ostringstream os;
  switch (t.code) {
    case kDlInt: os << "int" << int(t.bits); break;
    case kDlUInt: os << "uint" << int(t.bits); break;
    case kDlFloat: os << "float" << int(t.bits); break;
    case kDlBfloat: os << "bfloat" << int(t.bits); break;
    case kDlBool: os << "bool"; break;
    default: os << "DLPack type code " << int(t.code) << " with " << int(t.bits) << " bits";
  }
  if (t.lanes != 1) os << "x" << t.lanes;
  return os.str();
}

ScalarType map_dtype(const DlDataType& t, const char* name, ScalarType one_byte) {
  if (t.lanes == 1) {
    if (t.code == kDlBfloat && t.bits == 16) return ScalarType::kBFloat16;
    if ((t.code == kDlUInt || t.code == kDlInt) && t.bits == 16) return ScalarType::kBFloat16;
    if (t.code == kDlFloat && t.bits == 32) return ScalarType::kFloat32;
    if (t.code == kDlInt && t.bits == 32) return ScalarType::kInt32;
    if (t.code != kDlBool && t.bits == 8) return one_byte;
  }
  std::string hint;
  if (t.code == kDlInt && t.bits == 64) hint = " (for int64 expert ids pass topk_idx.int())";
  throw InvalidArgument(std::string(name) + ": dtype " + describe_dl_dtype(t) +
                        " is not supported; moe-ep takes bfloat16 (or its uint16 bits), float32, "
                        "int32 and one-byte wire types" +
                        hint);
}

void check_compact(const DlTensor& t, const char* name) {
  if (t.strides == nullptr) return;
  int64_t expected = 1;  // row-major compact strides, in elements; size-1 dims may have any
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] > 1 && t.strides[d] != expected) {
      std::ostringstream os;
      os << name << ": not contiguous (shape [";
      for (int i = 0; i < t.ndim; ++i) os << (i ? ", " : "") << t.shape[i];
      os << "], strides [";
      for (int i = 0; i < t.ndim; ++i) os << (i ? ", " : "") << t.strides[i];
      os << "] elements); moe-ep takes row-major contiguous tensors, e.g. " << name
         << ".contiguous()";
      throw InvalidArgument(os.str());
    }
    expected *= t.shape[d];
  }
}

// CPU outputs with no rows may have no memory behind them; consumers want a non-null pointer.
alignas(64) unsigned char g_empty_host_bytes[64];

struct ExportContext {
  DlManagedTensor managed{};
  std::array<int64_t, 2> shape{0, 0};
  std::shared_ptr<const void> keepalive;
};

void delete_export_context(DlManagedTensor* self) {
  delete static_cast<ExportContext*>(self->manager_ctx);
}

// Capsule destructor: a consumer that took the tensor renamed the capsule and owns it now.
void destroy_unconsumed_capsule(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kDlCapsuleName)) {
    auto* managed = static_cast<DlManagedTensor*>(PyCapsule_GetPointer(capsule, kDlCapsuleName));
    if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  } else {
    PyErr_Clear();  // PyCapsule_IsValid sets no error, but stay clean for the interpreter
  }
}

// The checks and the view shared by both import paths: device, rank, dtype, contiguity.
TensorView view_of(const DlTensor& t, const char* name, ScalarType one_byte) {
  DeviceType device = DeviceType::kCpu;
  int device_index = 0;
  if (t.device.device_type == kDlCuda) {
    device = DeviceType::kCuda;
    device_index = t.device.device_id;
  } else if (t.device.device_type != kDlCpu && t.device.device_type != kDlCudaHost) {
    throw InvalidArgument(std::string(name) + ": DLPack device type " +
                          std::to_string(t.device.device_type) +
                          " is not supported; moe-ep takes cpu and cuda tensors");
  }
  if (t.ndim < 1 || t.ndim > 2) {
    throw InvalidArgument(std::string(name) + ": " + std::to_string(t.ndim) +
                          " dimensions; moe-ep takes 1-D and 2-D tensors");
  }
  const ScalarType dtype = map_dtype(t.dtype, name, one_byte);
  check_compact(t, name);
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  if (t.ndim == 1) return TensorView::vector(data, dtype, t.shape[0], device, device_index);
  return TensorView::matrix(data, dtype, t.shape[0], t.shape[1], device, device_index);
}

// A host array described by the numpy array interface (version 3): typestr, shape, strides in
// bytes (None when compact) and data = (address, read-only flag).
TensorView import_array_interface(py::handle obj, const char* name, ScalarType one_byte) {
  const py::dict ai = obj.attr("__array_interface__");
  const std::string typestr = py::str(ai["typestr"]);
  const py::tuple shape = ai["shape"];
  if (typestr.size() < 3 || typestr[0] == '>') {
    throw InvalidArgument(std::string(name) + ": array type " + typestr +
                          " is not supported (big-endian or unknown)");
  }
  const char kind = typestr[1];
  const int bytes = std::atoi(typestr.c_str() + 2);
  if (bytes <= 0) {
    throw InvalidArgument(std::string(name) + ": array type " + typestr + " is not supported");
  }
  DlTensor t{};
  t.data = reinterpret_cast<void*>(py::tuple(ai["data"])[0].cast<uintptr_t>());
  t.device = {kDlCpu, 0};
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype = {kind == 'f'   ? uint8_t(kDlFloat)
             : kind == 'i' ? uint8_t(kDlInt)
             : kind == 'u' ? uint8_t(kDlUInt)
             : kind == 'b' ? uint8_t(kDlBool)
                           : uint8_t(255),
             static_cast<uint8_t>(8 * bytes), 1};
  std::array<int64_t, 2> dims{1, 1};
  std::array<int64_t, 2> strides{1, 1};
  const int known = t.ndim < 2 ? t.ndim : 2;  // view_of rejects other ranks
  for (int d = 0; d < known; ++d) dims[d] = shape[d].cast<int64_t>();
  t.shape = dims.data();
  if (ai.contains("strides") && !ai["strides"].is_none()) {
    const py::tuple st = ai["strides"];
    for (int d = 0; d < known; ++d) strides[d] = st[d].cast<int64_t>() / bytes;
    t.strides = strides.data();
  }
  return view_of(t, name, one_byte);
}

}  // namespace

ImportScope::~ImportScope() {
  for (DlManagedTensor* managed : owned_) {
    if (managed->deleter != nullptr) managed->deleter(managed);
  }
}

TensorView ImportScope::import(py::handle obj, const char* name, ScalarType one_byte) {
  if (obj.is_none()) throw InvalidArgument(std::string(name) + " is None; a tensor is required");
  py::object capsule;
  if (PyCapsule_CheckExact(obj.ptr())) {
    capsule = py::reinterpret_borrow<py::object>(obj);
  } else if (py::hasattr(obj, "__dlpack__")) {
    try {
      capsule = obj.attr("__dlpack__")();
    } catch (py::error_already_set& e) {
      // numpy before 2.0 refuses to export read-only arrays (DLPack had no read-only flag);
      // their __array_interface__ describes the same memory, still without a copy.
      if (!e.matches(PyExc_BufferError) || !py::hasattr(obj, "__array_interface__")) throw;
      return import_array_interface(obj, name, one_byte);
    }
  } else if (py::hasattr(obj, "__array_interface__")) {
    return import_array_interface(obj, name, one_byte);
  } else {
    throw InvalidArgument(std::string(name) +
                          ": expected a tensor (torch.Tensor, numpy array or "
                          "DLPack capsule), got " +
                          std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  if (!PyCapsule_IsValid(capsule.ptr(), kDlCapsuleName)) {
    throw InvalidArgument(std::string(name) +
                          ": the DLPack capsule was already consumed or is "
                          "not an unversioned \"dltensor\" capsule");
  }
  auto* managed =
      static_cast<DlManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kDlCapsuleName));
  if (managed == nullptr) throw py::error_already_set();
  PyCapsule_SetName(capsule.ptr(), kDlUsedCapsuleName);
  owned_.push_back(managed);  // from here on the deleter runs when the call ends

  return view_of(managed->dl_tensor, name, one_byte);
}

ExportedBuffer::ExportedBuffer(TensorView view, std::shared_ptr<const void> keepalive,
                               bool raw_bits)
    : view_(view), keepalive_(std::move(keepalive)), raw_bits_(raw_bits) {}

py::tuple ExportedBuffer::dlpack_device() const {
  const bool cuda = view_.device == DeviceType::kCuda;
  return py::make_tuple(cuda ? int(kDlCuda) : int(kDlCpu), cuda ? view_.device_index : 0);
}

py::capsule ExportedBuffer::dlpack() const {
  auto ctx = std::make_unique<ExportContext>();
  ctx->keepalive = keepalive_;
  ctx->shape = {view_.shape[0], view_.ndim == 2 ? view_.shape[1] : 1};
  DlTensor& t = ctx->managed.dl_tensor;
  t.data = view_.data;
  if (t.data == nullptr && view_.device == DeviceType::kCpu) t.data = g_empty_host_bytes;
  t.device = view_.device == DeviceType::kCuda ? DlDevice{kDlCuda, view_.device_index}
                                               : DlDevice{kDlCpu, 0};
  t.ndim = view_.ndim;
  switch (view_.dtype) {
    case ScalarType::kBFloat16:
      t.dtype = raw_bits_ ? DlDataType{kDlUInt, 16, 1} : DlDataType{kDlBfloat, 16, 1};
      break;
    case ScalarType::kFloat32: t.dtype = {kDlFloat, 32, 1}; break;
    case ScalarType::kInt32: t.dtype = {kDlInt, 32, 1}; break;
    default: t.dtype = {kDlUInt, 8, 1}; break;  // e4m3, e2m1 pairs, e8m0, raw bytes
  }
  t.shape = ctx->shape.data();
  t.strides = nullptr;  // compact row-major
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = delete_export_context;
  DlManagedTensor* managed = &ctx->managed;
  PyObject* capsule = PyCapsule_New(managed, kDlCapsuleName, destroy_unconsumed_capsule);
  if (capsule == nullptr) throw py::error_already_set();
  ctx.release();  // owned by the capsule (or by the consumer that renames it)
  return py::reinterpret_steal<py::capsule>(capsule);
}

py::dict ExportedBuffer::array_interface() const {
  if (view_.device != DeviceType::kCpu) {
    throw py::attribute_error("__array_interface__ is only defined for host memory");
  }
  const char* typestr = "|u1";
  switch (view_.dtype) {
    case ScalarType::kBFloat16: typestr = "<u2"; break;  // bf16 bit patterns
    case ScalarType::kFloat32: typestr = "<f4"; break;
    case ScalarType::kInt32: typestr = "<i4"; break;
    default: break;
  }
  void* data = view_.data != nullptr ? view_.data : g_empty_host_bytes;
  py::dict ai;
  ai["version"] = 3;
  ai["typestr"] = typestr;
  py::tuple shape = view_.ndim == 2 ? py::tuple(py::make_tuple(view_.shape[0], view_.shape[1]))
                                    : py::tuple(py::make_tuple(view_.shape[0]));
  ai["shape"] = shape;
  ai["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(data), false);
  ai["strides"] = py::none();
  return ai;
}

}  // namespace moe_ep::python
