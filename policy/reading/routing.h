// Mixture-of-experts routing of the same token ids in two models: which experts
// each response token went through in the rollout engine and in the trainer.
// With the same weights the two differ only where rounding (another dtype,
// another kernel) moves a token's router logits across a top-k boundary; that
// is the routing half of the train-rollout mismatch TIS, IcePop and GSPO were
// made for (docs/engines.md).
#pragma once

#include <cstdint>
#include <vector>

#include "policy/model/model.h"
#include "policy/reading/scoring.h"

namespace rlid::policy {

struct RoutingComparison {
  int64_t pairs = 0;      // (response token, sparse layer) pairs compared
  int64_t differing = 0;  // of them, those whose chosen experts differ as sets
  double share() const { return pairs > 0 ? static_cast<double>(differing) / static_cast<double>(pairs) : 0.0; }
};

// Runs `a` and `b` (no gradient) over each request's prompt ++ response and
// compares, for every response token and sparse layer, the experts chosen at
// the position that predicts the token (what its log-prob was computed
// through). Both models must share the architecture (ConfigError otherwise);
// models without sparse layers compare nothing. The forwards are not booked
// into any budget: this is a measurement.
RoutingComparison CompareRouting(TransformerLM& a, TransformerLM& b,
                                 const std::vector<ScoreRequest>& requests);

}  // namespace rlid::policy
