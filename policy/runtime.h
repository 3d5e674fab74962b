// LibTorch process settings. Declared without LibTorch headers so the CLI can
// configure threads without compiling torch.h.
#pragma once

#include <string>

namespace rlid::policy {

// Sets LibTorch's intra-op threads (it starts at 1 on this machine); <= 0 means
// one per hardware core. Also sets inter-op threads to 1.
void SetNumThreads(int threads);
int NumThreads();
// "LibTorch 1.13.1, 2 threads, BLAS: openblas (openmp)" for logs and reports.
std::string TorchSummary();

}  // namespace rlid::policy
