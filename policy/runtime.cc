#include "policy/runtime.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <fstream>
#include <thread>

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

std::string TorchSummary() {
  std::string blas = "unknown";
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("openblas-openmp") != std::string::npos) { blas = "OpenBLAS (OpenMP)"; break; }
    if (line.find("openblas-pthread") != std::string::npos) { blas = "OpenBLAS (pthread)"; break; }
    if (line.find("/blas/libblas") != std::string::npos) blas = "reference BLAS (slow!)";
  }
  return fmt::format("LibTorch {}, {} threads, BLAS {}", TORCH_VERSION, at::get_num_threads(), blas);
}

}  // namespace rlid::policy
