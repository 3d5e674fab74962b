// The pieces of the `rlid._rlid` extension module (pybind11), one file each:
// errors (rlid::Error -> the Python classes of rlid/errors.py), envs (make,
// reset, step, menu, compile), the run store (read-only SQL) and, when built
// with LibTorch, policies and training (torch/). The Python
// package in ../rlid wraps them; users import `rlid`, never `_rlid`.
#pragma once

#include <pybind11/pybind11.h>

namespace rlid::python {

// Translates every rlid::Error (and std::exception) raised across the module
// into the matching rlid.errors class, carrying the message and the hint.
void BindErrors(pybind11::module_& m);
void BindEnvs(pybind11::module_& m);
void BindStore(pybind11::module_& m);
#ifdef RLID_PYTHON_WITH_TORCH
// With LibTorch (python/src/torch/): checkpoints (readout, sample) and training.
void BindPolicy(pybind11::module_& m);
void BindTraining(pybind11::module_& m);
#endif

}  // namespace rlid::python
