#include "policy/model/runtime.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <thread>

#ifdef RLID_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace rlid::policy {

void SetNumThreads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  static bool interop_set = false;
  if (!interop_set) {
    try {
      at::set_num_interop_threads(1);
    } catch (const std::exception&) {
      // Already started; harmless.
    }
    interop_set = true;
  }
}

int NumThreads() { return at::get_num_threads(); }

int CudaDeviceCount() {
#ifdef RLID_TORCH_CUDA
  return static_cast<int>(torch::cuda::device_count());
#else
  return 0;
#endif
}

namespace {

std::string CpuBlas() {
  if (at::hasMKL()) return "MKL";
  if (at::hasLAPACK()) return "LAPACK";
  return "ATen's own kernels";
}

// "NVIDIA H200, 139 GiB, sm_90" for GPU i.
std::string GpuName(int i, bool details) {
#ifdef RLID_TORCH_CUDA
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(i);
  if (!details) return p->name;
  return fmt::format("{}, {:.0f} GiB, sm_{}{}", p->name, p->totalGlobalMem / double(1 << 30),
                     p->major, p->minor);
#else
  return "";
#endif
}

// "CUDA 13.0 with 1 GPU (NVIDIA H200)", "CUDA 13.0 compiled in, no GPU", "no CUDA".
std::string CudaSummary() {
#ifdef RLID_TORCH_CUDA
  const int n = CudaDeviceCount();
  if (n == 0) return "CUDA " RLID_TORCH_CUDA " compiled in, no GPU";
  std::string names;
  for (int i = 0; i < n; ++i) names += fmt::format("{}{}", i ? ", " : "", GpuName(i, false));
  return fmt::format("CUDA " RLID_TORCH_CUDA " with {} GPU{} ({})", n, n == 1 ? "" : "s", names);
#else
  return "no CUDA";
#endif
}

}  // namespace

std::string TorchSummary() {
  return fmt::format("LibTorch {}, {} threads, CPU BLAS {}, {}", TORCH_VERSION,
                     at::get_num_threads(), CpuBlas(), CudaSummary());
}

std::string RuntimeReport() {
  std::string out = fmt::format("LibTorch {} (CPU BLAS {})\n", TORCH_VERSION, CpuBlas());
#ifdef RLID_TORCH_CUDA
  out += "CUDA compiled in: yes (CUDA " RLID_TORCH_CUDA ")\n";
  out += "c10d backends: gloo, nccl\n";
#else
  out += "CUDA compiled in: no\nc10d backends: gloo\n";
#endif
  out += fmt::format("devices: cpu ({} cores)", std::thread::hardware_concurrency());
  const int n = CudaDeviceCount();
  for (int i = 0; i < n; ++i) out += fmt::format(", cuda:{} ({})", i, GpuName(i, true));
#ifdef RLID_TORCH_CUDA
  if (n == 0) out += "; no GPU visible to CUDA";
#endif
  return out;
}

}  // namespace rlid::policy
