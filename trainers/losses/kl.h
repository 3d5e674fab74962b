// KL to the reference policy as pure tensor functions (docs/algorithms.md,
// "KL to the reference policy"): the per-token estimators k1, abs, k2, k3
// (registered by name), the straight-through variant (estimator value, k2
// gradient), and the reward placement r_t -= beta * kl_t. The loss placement
// lives in PolicyLoss (losses.h); the exact menu KL of the decision plane in
// decision_losses.h.
#pragma once

#include <torch/torch.h>

#include "core/registry.h"
#include "trainers/losses/loss_config.h"

namespace rlid::trainers {

class KlEstimator {
 public:
  static constexpr const char* kRegistryKind = "KL estimator";
  virtual ~KlEstimator() = default;
  // d = logp - ref (any shape) -> per-element estimate, differentiable in d.
  virtual torch::Tensor Estimate(const torch::Tensor& d) const = 0;
};
using KlEstimatorRegistry = Registry<KlEstimator>;

// kl_t [B,T] for log_prob / ref_log_prob [B,T] and a bool mask [B,T]; padded
// positions are 0 and carry no gradient whatever they hold. Gradient flows
// into log_prob (straight_through: value of the estimator, gradient d).
torch::Tensor KlPenalty(const KlConfig& cfg, const torch::Tensor& log_prob,
                        const torch::Tensor& ref_log_prob, const torch::Tensor& mask);

// Reward placement: token_rewards - coef * kl_t on valid tokens (no gradient);
// padded positions are returned as 0. log_prob is the policy that produced the
// rollout (old_log_prob in a trainer).
torch::Tensor KlShapedRewards(const KlConfig& cfg, const torch::Tensor& token_rewards,
                              const torch::Tensor& log_prob, const torch::Tensor& ref_log_prob,
                              const torch::Tensor& mask);

}  // namespace rlid::trainers
