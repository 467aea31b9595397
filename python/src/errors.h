// The error family of moe_ep._C: moe_ep.Error and one class per ErrorCode, each deriving from
// Error and the matching built-in (ValueError, RuntimeError, TimeoutError), and the translator
// that raises them for C++ moe_ep::Error exceptions.
#pragma once

#include <pybind11/pybind11.h>

namespace moe_ep::python {

void register_errors(pybind11::module_& m);

}  // namespace moe_ep::python
