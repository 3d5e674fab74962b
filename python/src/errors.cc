// rlid::Error -> rlid.errors.<Class>(message, hint). The classes live in
// Python (rlid/errors.py) so that they can subclass both rlid.Error and the
// builtin a Python user expects (ConfigError is a ValueError, IoError an
// OSError, ...); they are looked up when the first error crosses.
#include <pybind11/pybind11.h>

#include <exception>
#include <string>

#include "core/error.h"
#include "core/interrupt.h"
#include "python/src/bindings.h"

namespace py = pybind11;

namespace rlid::python {
namespace {

// The rlid.errors class for an rlid::Error, by its dynamic type.
const char* ClassName(const Error& e) {
  if (dynamic_cast<const Interrupted*>(&e)) return "Interrupted";
  if (dynamic_cast<const ConfigError*>(&e)) return "ConfigError";
  if (dynamic_cast<const IoError*>(&e)) return "IoError";
  if (dynamic_cast<const EnvError*>(&e)) return "EnvError";
  if (dynamic_cast<const NumericError*>(&e)) return "NumericError";
  if (dynamic_cast<const DistError*>(&e)) return "DistError";
  if (dynamic_cast<const InternalError*>(&e)) return "InternalError";
  return "Error";
}

void Raise(const char* cls, const std::string& message, const std::string& hint) {
  py::object type = py::module_::import("rlid.errors").attr(cls);
  py::object value = type(message, hint);
  PyErr_SetObject(type.ptr(), value.ptr());
}

}  // namespace

void BindErrors(py::module_& m) {
  (void)m;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      Raise(ClassName(e), e.what(), e.hint());
    }
  });
}

}  // namespace rlid::python
