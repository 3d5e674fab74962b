// PYBIND11_MODULE(_rlid): the version and the three binding groups.
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
}
