// DLPack import and export for the Python module (see tensors.h).
#include "tensors.h"

#include <array>
#include <cstdlib>
#include <sstream>
#include <string>

#include "moe_ep/errors.h"

namespace moe_ep::python {

namespace {

// A DLPack type by name ("int64", "complex64", "float8_e5m2"), for messages.
std::string describe_dl_dtype(const DlDataType& t) {
  // DLPack 1.1's narrow float codes 7..17, by the names of their formats.
  static const char* const kNarrowFloats[] = {
      "float8_e3m4",     "float8_e4m3",   "float8_e4m3b11fnuz", "float8_e4m3fn",
      "float8_e4m3fnuz", "float8_e5m2",   "float8_e5m2fnuz",    "float8_e8m0fnu",
      "float6_e2m3fn",   "float6_e3m2fn", "float4_e2m1fn"};
  std::ostringstream os;
  switch (t.code) {
    case kDlInt: os << "int" << int(t.bits); break;
    case kDlUInt: os << "uint" << int(t.bits); break;
    case kDlFloat: os << "float" << int(t.bits); break;
    case kDlBfloat: os << "bfloat" << int(t.bits); break;
    case kDlComplex: os << "complex" << int(t.bits); break;
    case kDlBool: os << "bool"; break;
    default:
      if (t.code >= 7 && t.code <= 17) {
        os << kNarrowFloats[t.code - 7];
      } else {
        os << "an unknown DLPack type (code " << int(t.code) << ", " << int(t.bits) << " bits)";
      }
  }
  if (t.lanes != 1) os << "x" << t.lanes;
  return os.str();
}

// A DLPack device type by name, for messages.
std::string describe_dl_device(int32_t type) {
  switch (type) {
    case 4: return "opencl";
    case 7: return "vulkan";
    case 8: return "metal";
    case 9: return "vpi";
    case 10: return "rocm";
    case 11: return "rocm_host";
    case 12: return "ext_dev";
    case 13: return "cuda_managed";
    case 14: return "oneapi";
    case 15: return "webgpu";
    case 16: return "hexagon";
    case 17: return "maia";
    default: return "an unknown DLPack device (type " + std::to_string(type) + ")";
  }
}

// `attr` of obj as text (torch and numpy name their dtype and device), or `fallback`.
std::string attr_text(py::handle obj, const char* attr, const std::string& fallback) {
  if (obj && py::hasattr(obj, attr)) {
    try {
      return py::str(obj.attr(attr));
    } catch (py::error_already_set&) {
    }
  }
  return fallback;
}

ScalarType map_dtype(const DlDataType& t, const ArgSpec& spec, py::handle obj) {
  if (t.lanes == 1) {
    if (t.code == kDlBfloat && t.bits == 16) return ScalarType::kBFloat16;
    if (spec.bf16_bits && (t.code == kDlUInt || t.code == kDlInt) && t.bits == 16) {
      return ScalarType::kBFloat16;
    }
    if (t.code == kDlFloat && t.bits == 32) return ScalarType::kFloat32;
    if (t.code == kDlInt && t.bits == 32) return ScalarType::kInt32;
    if (spec.one_byte && t.code != kDlBool && t.bits == 8) return *spec.one_byte;
  }
  throw InvalidArgument(std::string(spec.name) + ": dtype " +
                        attr_text(obj, "dtype", describe_dl_dtype(t)) + " is not supported; " +
                        spec.name + " takes " + spec.takes);
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
  std::array<int64_t, 3> shape{0, 0, 0};
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
TensorView view_of(const DlTensor& t, const ArgSpec& spec, py::handle obj) {
  const char* name = spec.name;
  DeviceType device = DeviceType::kCpu;
  int device_index = 0;
  if (t.device.device_type == kDlCuda) {
    device = DeviceType::kCuda;
    device_index = t.device.device_id;
  } else if (t.device.device_type != kDlCpu && t.device.device_type != kDlCudaHost) {
    throw InvalidArgument(std::string(name) + ": device " +
                          attr_text(obj, "device", describe_dl_device(t.device.device_type)) +
                          " is not supported; moe-ep takes cpu and cuda tensors");
  }
  if (t.ndim < 1 || t.ndim > spec.max_ndim) {
    throw InvalidArgument(std::string(name) + ": " + std::to_string(t.ndim) + " dimensions; " +
                          (spec.max_ndim >= 3 ? std::string(name) + " takes 1-D to 3-D tensors"
                                              : std::string("moe-ep takes 1-D and 2-D tensors")));
  }
  const ScalarType dtype = map_dtype(t.dtype, spec, obj);
  check_compact(t, name);
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  if (t.ndim == 1) return TensorView::vector(data, dtype, t.shape[0], device, device_index);
  if (t.ndim == 2) {
    return TensorView::matrix(data, dtype, t.shape[0], t.shape[1], device, device_index);
  }
  return TensorView::tensor3(data, dtype, t.shape[0], t.shape[1], t.shape[2], device, device_index);
}

// True when obj's array interface says its memory is read-only.
bool read_only_array(py::handle obj) {
  const py::dict ai = obj.attr("__array_interface__");
  if (!ai.contains("data")) return false;
  const py::object data = ai["data"];
  return py::isinstance<py::tuple>(data) && py::len(data) >= 2 && py::tuple(data)[1].cast<bool>();
}

// A host array described by the numpy array interface (version 3): typestr, shape, strides in
// bytes (None when compact) and data = (address, read-only flag).
TensorView import_array_interface(py::handle obj, const ArgSpec& spec) {
  const char* name = spec.name;
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
             : kind == 'c' ? uint8_t(kDlComplex)
                           : uint8_t(255),
             static_cast<uint8_t>(8 * bytes), 1};
  std::array<int64_t, 3> dims{1, 1, 1};
  std::array<int64_t, 3> strides{1, 1, 1};
  const int known = t.ndim < 3 ? t.ndim : 3;  // view_of rejects other ranks
  for (int d = 0; d < known; ++d) dims[d] = shape[d].cast<int64_t>();
  t.shape = dims.data();
  if (ai.contains("strides") && !ai["strides"].is_none()) {
    const py::tuple st = ai["strides"];
    for (int d = 0; d < known; ++d) strides[d] = st[d].cast<int64_t>() / bytes;
    t.strides = strides.data();
  }
  return view_of(t, spec, obj);
}

}  // namespace

ImportScope::~ImportScope() {
  if (!committed_) return;  // the capsules are let go unconsumed with capsules_
  for (const py::object& capsule : capsules_) {
    // The same capsule may have been passed for two arguments: consume it once.
    if (!PyCapsule_IsValid(capsule.ptr(), kDlCapsuleName)) continue;
    auto* managed =
        static_cast<DlManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kDlCapsuleName));
    PyCapsule_SetName(capsule.ptr(), kDlUsedCapsuleName);
    if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  }
}

TensorView ImportScope::import(py::handle obj, const ArgSpec& spec) {
  try {
    return import_unchecked(obj, spec);
  } catch (const Error&) {
    throw;
  } catch (py::error_already_set& e) {
    // The producer's own refusal (e.g. torch's for a tensor that needs grad, a type without
    // __dlpack__ support): an argument error like any other, with its Python type.
    throw InvalidArgument(std::string(spec.name) + ": " + e.what());
  } catch (const std::exception& e) {
    throw InvalidArgument(std::string(spec.name) + ": " + e.what());
  }
}

TensorView ImportScope::import_unchecked(py::handle obj, const ArgSpec& spec) {
  const char* name = spec.name;
  if (obj.is_none()) {
    throw InvalidArgument(std::string(name) + " is None; " + name + " takes " + spec.takes);
  }
  const bool has_array_interface = py::hasattr(obj, "__array_interface__");
  if (spec.writable && has_array_interface && read_only_array(obj)) {
    throw InvalidArgument(std::string(name) +
                          ": the array is read-only (writeable=False) but the call writes its "
                          "result into it; pass a writable array (or none, to have it allocated)");
  }
  py::object capsule;
  if (PyCapsule_CheckExact(obj.ptr())) {
    capsule = py::reinterpret_borrow<py::object>(obj);
  } else if (py::hasattr(obj, "__dlpack__")) {
    try {
      capsule = obj.attr("__dlpack__")();
    } catch (py::error_already_set& e) {
      // numpy refuses to export read-only arrays through an unversioned capsule (it has no
      // read-only flag); their __array_interface__ describes the same memory, still without a
      // copy.
      if (!e.matches(PyExc_BufferError) || !has_array_interface) throw;
      return import_array_interface(obj, spec);
    }
  } else if (has_array_interface) {
    return import_array_interface(obj, spec);
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
  capsules_.push_back(capsule);  // alive (and its memory too) until the scope ends
  return view_of(managed->dl_tensor, spec, obj);
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
  ctx->shape = {view_.shape[0], view_.ndim >= 2 ? view_.shape[1] : 1,
                view_.ndim == 3 ? view_.shape[2] : 1};
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
  py::tuple shape(view_.ndim);
  for (int d = 0; d < view_.ndim; ++d) shape[d] = view_.shape[d];
  ai["shape"] = shape;
  ai["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(data), false);
  ai["strides"] = py::none();
  return ai;
}

}  // namespace moe_ep::python
