#include "policy/runtime.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <cctype>
#include <fstream>
#include <thread>

// OpenBLAS's kernel family for this CPU ("SkylakeX", "Haswell", ... or
// "Prescott", its SSE3 fallback when it does not recognise the CPU, several
// times slower). Weak: resolved from the OpenBLAS that LibTorch loads, null
// with another BLAS.
extern "C" __attribute__((weak)) char* openblas_get_corename();

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

namespace {

std::string BlasName() {
  std::string blas = "unknown";
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("openblas-openmp") != std::string::npos) {
      blas = "OpenBLAS (OpenMP)";
      break;
    }
    if (line.find("openblas-pthread") != std::string::npos) {
      blas = "OpenBLAS (pthread)";
      break;
    }
    if (line.find("/blas/libblas") != std::string::npos) blas = "reference BLAS (slow!)";
  }
  return blas;
}

std::string OpenBlasCore() {
  if (openblas_get_corename == nullptr) return "";
  const char* core = openblas_get_corename();
  return core ? core : "";
}

}  // namespace

std::string TorchSummary() {
  std::string blas = BlasName();
  if (blas.rfind("OpenBLAS", 0) == 0 && !OpenBlasCore().empty())
    blas += fmt::format(", {} kernels", OpenBlasCore());
  return fmt::format("LibTorch {}, {} threads, BLAS {}", TORCH_VERSION, at::get_num_threads(),
                     blas);
}

std::string BlasWarning() {
  const std::string blas = BlasName();
  if (blas.rfind("reference", 0) == 0)
    return "LibTorch runs on the reference BLAS (~25x slower than OpenBLAS): install "
           "libopenblas0-openmp (scripts/setup.sh does)";
  std::string core = OpenBlasCore();
  for (auto& c : core) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (core == "prescott" && __builtin_cpu_supports("avx2"))
    return fmt::format(
        "OpenBLAS did not recognise this CPU and runs its SSE3 (Prescott) kernels although the CPU "
        "has AVX2{}: matrix products are several times slower than they could be. Start rlid with "
        "OPENBLAS_CORETYPE={} set to use the right kernels (measured on such a VM: torch::mm "
        "15.5 -> 90 GFLOP/s on one thread, `rlid bench flops`)",
        __builtin_cpu_supports("avx512f") ? " and AVX-512" : "",
        __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell");
  return "";
}

}  // namespace rlid::policy
