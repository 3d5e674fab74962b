// LibTorch process settings. Declared without LibTorch headers so the CLI can
// configure threads without compiling torch.h.
#pragma once

#include <string>

namespace rlid::policy {

// Sets LibTorch's intra-op threads (it starts at 1 on this machine); <= 0 means
// one per hardware core. Also sets inter-op threads to 1.
void SetNumThreads(int threads);
int NumThreads();
// "LibTorch 1.13.0, 2 threads, BLAS OpenBLAS (OpenMP), SkylakeX kernels" for
// logs and reports.
std::string TorchSummary();
// A warning when the BLAS runs far below this CPU's speed: reference BLAS, or
// OpenBLAS on its SSE3 fallback ("Prescott") on a CPU with AVX2 (OpenBLAS did
// not recognise the CPU model, as on some VMs). Empty when there is nothing to say.
std::string BlasWarning();

}  // namespace rlid::policy
