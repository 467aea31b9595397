// The Python error family of moe_ep._C (errors.h).
#include "errors.h"

#include <exception>
#include <string>

#include "moe_ep/errors.h"

namespace py = pybind11;

namespace moe_ep::python {
namespace {

// One Python class per ErrorCode, each deriving from moe_ep.Error and the matching built-in
// (ValueError, RuntimeError, TimeoutError), so callers can catch either.
struct ErrorClasses {
  PyObject* base = nullptr;
  PyObject* by_code[7] = {};
};
ErrorClasses g_errors;

PyObject* new_error_class(py::module_& m, const char* name, PyObject* bases, const char* code,
                          const char* doc) {
  const std::string qualified = std::string("moe_ep.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  if (code != nullptr) PyObject_SetAttrString(cls, "code", py::str(code).ptr());
  m.add_object(name, py::handle(cls));
  return cls;
}

}  // namespace

void register_errors(py::module_& m) {
  g_errors.base = new_error_class(m, "Error", PyExc_Exception, nullptr,
                                  "Base of every moe-ep error; .code names the ErrorCode.");
  struct Spec {
    ErrorCode code;
    const char* name;
    PyObject* builtin;
    const char* doc;
  };
  const Spec specs[] = {
      {ErrorCode::kInvalidArgument, "InvalidArgument", PyExc_ValueError,
       "A value breaks a rule; nothing was changed and the op stays usable."},
      {ErrorCode::kInvalidUsage, "InvalidUsage", PyExc_RuntimeError,
       "A call out of order (stale handle, poisoned op); the op stays as it was."},
      {ErrorCode::kTimeout, "Timeout", PyExc_TimeoutError,
       "A bounded wait expired (a peer is missing or dead); the op is poisoned."},
      {ErrorCode::kRemoteError, "RemoteError", PyExc_RuntimeError,
       "Another rank failed during a collective call; the op is poisoned."},
      {ErrorCode::kCudaError, "CudaError", PyExc_RuntimeError, "A CUDA error; the op is poisoned."},
      {ErrorCode::kNcclError, "NcclError", PyExc_RuntimeError,
       "An NCCL error; the op is poisoned."},
      {ErrorCode::kInternal, "InternalError", PyExc_RuntimeError,
       "A broken invariant inside moe-ep; the op is poisoned."},
  };
  for (const Spec& s : specs) {
    py::tuple bases = py::make_tuple(py::handle(g_errors.base), py::handle(s.builtin));
    g_errors.by_code[static_cast<int>(s.code)] =
        new_error_class(m, s.name, bases.ptr(), to_string(s.code), s.doc);
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(g_errors.by_code[static_cast<int>(e.code())], e.what());
    }
  });
}

}  // namespace moe_ep::python
