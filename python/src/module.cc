// PYBIND11_MODULE(_rlid): the version and the binding groups.
#include <pybind11/pybind11.h>

#include "core/log.h"
#include "python/src/bindings.h"

PYBIND11_MODULE(_rlid, m) {
  m.doc() = "rlid's C++ core (use the `rlid` package, not this module)";
  m.attr("version_string") = rlid::VersionString();
  m.attr("__version__") = RLID_PACKAGE_VERSION;
  rlid::python::BindErrors(m);
  rlid::python::BindEnvs(m);
  rlid::python::BindStore(m);
#ifdef RLID_PYTHON_WITH_TORCH
  m.attr("with_torch") = true;
  rlid::python::BindPolicy(m);
  rlid::python::BindTraining(m);
#else
  m.attr("with_torch") = false;
#endif
}
