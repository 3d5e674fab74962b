// Audit check 0, finite: every parameter of the model is finite.
#include <fmt/format.h>

#include <algorithm>

#include "trainers/analysis/audit/audit_internal.h"

namespace rlid::trainers::audit_internal {

AuditCheck Finite(policy::TransformerLM& model) {
  AuditCheck c{"finite", "Finite weights: every parameter of the model is finite"};
  torch::NoGradGuard ng;
  int64_t tensors = 0, values = 0, bad_tensors = 0;
  std::string list;
  for (const auto& item : model->named_parameters()) {
    const auto flat = item.value().detach().reshape(-1);
    const int64_t n = flat.numel();
    int64_t nan = 0, inf = 0;
    for (int64_t i = 0; i < n; i += kChunk) {
      auto ch = flat.slice(0, i, std::min(n, i + kChunk));
      nan += torch::isnan(ch).sum().item<int64_t>();
      inf += torch::isinf(ch).sum().item<int64_t>();
    }
    ++tensors;
    values += n;
    if (nan + inf == 0) continue;
    if (++bad_tensors <= 4)
      list += fmt::format("{}{}: {} NaN, {} Inf of {}", list.empty() ? "" : "; ", item.key(), nan,
                          inf, n);
  }
  c.passed = bad_tensors == 0;
  c.numbers = {{"parameter tensors checked", std::to_string(tensors)},
               {"values checked", std::to_string(values)},
               {"tensors with non-finite values", std::to_string(bad_tensors)}};
  if (!c.passed)
    c.note = "FAIL: non-finite weights: " + list + (bad_tensors > 4 ? "; ..." : "") +
             ". The other checks were not run; reload or retrain the checkpoint.";
  return c;
}

}  // namespace rlid::trainers::audit_internal
