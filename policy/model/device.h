// Where a run's tensors live: resolves `run.device` ("cpu", "cuda", "cuda:N",
// "auto") to a torch::Device once, at the start of every command that builds a
// model, so that a missing GPU is a config error (exit 2) and not a crash deep
// inside LibTorch.
#pragma once

#include <torch/torch.h>

#include <string>

#include "policy/model/precision.h"

namespace rlid::policy {

// The device names `run.device` accepts, for config validation and hints.
inline constexpr const char* kDeviceChoices = "\"cpu\", \"cuda\", \"cuda:N\" or \"auto\"";

// Resolves `spec` for local rank `local_rank` of `local_ranks` on this machine.
// "auto" is CUDA device `local_rank` when every local rank has a GPU of its
// own (so a job never mixes CPU and CUDA ranks), else the CPU, and logs which;
// "cuda" is device `local_rank` (one GPU per rank). Throws ConfigError naming
// the device asked for and the devices found when the GPU is absent or the
// index is out of range.
torch::Device ResolveDevice(const std::string& spec, int local_rank = 0, int local_ranks = 1);

// The torch dtype of a precision.
inline torch::Dtype TorchDtype(Precision p) {
  return p == Precision::kBFloat16 ? torch::kBFloat16 : torch::kFloat32;
}

// True for the spellings ResolveDevice accepts (without looking for devices).
bool IsDeviceSpec(const std::string& spec);

}  // namespace rlid::policy

namespace rlid::policy {

// A host vector as a tensor on `device`. On CUDA the copy goes through pinned
// memory without blocking the host (the caching host allocator keeps the buffer
// alive until the copy has run), so building an index or an input on the host
// costs no device synchronisation.
torch::Tensor HostToDevice(const std::vector<int64_t>& v, const torch::Device& device);
torch::Tensor HostToDevice(const std::vector<double>& v, const torch::Device& device);

}  // namespace rlid::policy
