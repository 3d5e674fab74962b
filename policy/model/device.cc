#include "policy/model/device.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "policy/model/runtime.h"

namespace rlid::policy {
namespace {

// The index of "cuda:N", -1 for a bare "cuda", -2 when `spec` is not CUDA.
int CudaIndex(const std::string& spec) {
  if (spec == "cuda") return -1;
  if (spec.rfind("cuda:", 0) != 0 || spec.size() == 5 || spec.size() > 8) return -2;
  for (size_t i = 5; i < spec.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(spec[i]))) return -2;
  return std::stoi(spec.substr(5));
}

std::string Found(int gpus) {
  if (gpus > 0) return fmt::format("{} GPU{} ({})", gpus, gpus == 1 ? "" : "s", TorchSummary());
#ifdef RLID_TORCH_CUDA
  return "no GPU: this LibTorch has CUDA " RLID_TORCH_CUDA
         " compiled in, but the CUDA driver reports no device";
#else
  return "no GPU: this LibTorch was built without CUDA";
#endif
}

}  // namespace

bool IsDeviceSpec(const std::string& spec) {
  return spec == "cpu" || spec == "auto" || CudaIndex(spec) >= -1;
}

torch::Device ResolveDevice(const std::string& spec, int local_rank, int local_ranks) {
  if (!IsDeviceSpec(spec))
    throw ConfigError(fmt::format("unknown device '{}'", spec),
                      fmt::format("run.device is one of {}", kDeviceChoices));
  if (spec == "cpu") return torch::kCPU;
  const int gpus = CudaDeviceCount();
  if (spec == "auto") {
    if (gpus >= std::max(local_ranks, local_rank + 1)) {
      spdlog::info("run.device = auto: using cuda:{} ({})", local_rank, TorchSummary());
      return {torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank)};
    }
    spdlog::info("run.device = auto: using the CPU ({})",
                 gpus == 0 ? Found(0)
                           : fmt::format("{} GPU(s) for {} local ranks", gpus, local_ranks));
    return torch::kCPU;
  }
  int index = CudaIndex(spec);
  if (index == -1) index = local_rank;
  if (gpus == 0)
    throw ConfigError(fmt::format("run.device = '{}' but {}", spec, Found(0)),
                      "use run.device = \"cpu\" (or \"auto\", which falls back to the CPU), "
                      "or run on a machine whose GPU `rlid --version` lists");
  if (index >= gpus)
    throw ConfigError(
        fmt::format("run.device = '{}' needs GPU cuda:{} but {} found", spec, index, Found(gpus)),
        "with --nproc N each rank uses the GPU of its LOCAL_RANK: start at most as many ranks "
        "per machine as it has GPUs, or set CUDA_VISIBLE_DEVICES");
  return {torch::kCUDA, static_cast<c10::DeviceIndex>(index)};
}

}  // namespace rlid::policy

namespace rlid::policy {
namespace {

template <typename T>
torch::Tensor Upload(const std::vector<T>& v, torch::Dtype dtype, const torch::Device& device) {
  auto host = torch::tensor(v, dtype);
  if (device.is_cpu()) return host;
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace

torch::Tensor HostToDevice(const std::vector<int64_t>& v, const torch::Device& device) {
  return Upload(v, torch::kInt64, device);
}

torch::Tensor HostToDevice(const std::vector<double>& v, const torch::Device& device) {
  return Upload(v, torch::kFloat64, device);
}

}  // namespace rlid::policy
