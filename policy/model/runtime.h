// LibTorch process settings and what the process runs on. Declared without
// LibTorch headers so the CLI can configure threads without compiling torch.h.
#pragma once

#include <string>

namespace rlid::policy {

// Sets LibTorch's intra-op threads; <= 0 means one per hardware core. Also sets
// inter-op threads to 1.
void SetNumThreads(int threads);
int NumThreads();
// "LibTorch 2.11.0, 2 threads, CPU BLAS MKL, CUDA 13.0 with 1 GPU (NVIDIA H200)"
// for logs and reports.
std::string TorchSummary();
// The lines `rlid --version` prints after rlid's own version: the LibTorch
// version, whether CUDA (and which c10d backends) are compiled in, and every
// device this process can see.
std::string RuntimeReport();
// GPUs this process can use (0 without a driver or a CUDA build).
int CudaDeviceCount();

}  // namespace rlid::policy
