// KL estimators (registered at the bottom) and the two placements' helpers.
#include "trainers/losses/kl.h"

#include <fmt/format.h>

#include "core/error.h"
#include "trainers/losses/tensor_checks.h"

namespace rlid::trainers {
namespace {

class K1 : public KlEstimator {
 public:
  torch::Tensor Estimate(const torch::Tensor& d) const override { return d; }
};

class Abs : public KlEstimator {
 public:
  torch::Tensor Estimate(const torch::Tensor& d) const override { return d.abs(); }
};

class K2 : public KlEstimator {
 public:
  torch::Tensor Estimate(const torch::Tensor& d) const override { return 0.5 * d.square(); }
};

// exp(-d) + d - 1 with -d clamped to +-20 first, the result clamped to +-10.
class K3 : public KlEstimator {
 public:
  torch::Tensor Estimate(const torch::Tensor& d) const override {
    torch::Tensor neg = torch::clamp(-d, -20.0, 20.0);
    return torch::clamp(torch::exp(neg) - neg - 1.0, -10.0, 10.0);
  }
};

const Registrar<KlEstimatorRegistry> kK1("k1", "d = logp - ref (unbiased, high variance)",
                                         [] { return std::make_unique<K1>(); });
const Registrar<KlEstimatorRegistry> kAbs("abs", "|d|", [] { return std::make_unique<Abs>(); });
const Registrar<KlEstimatorRegistry> kK2("k2", "d^2 / 2 (gradient d)",
                                         [] { return std::make_unique<K2>(); });
const Registrar<KlEstimatorRegistry> kK3("k3", "exp(-d) + d - 1, clamped (low variance)",
                                         [] { return std::make_unique<K3>(); });

}  // namespace

torch::Tensor KlPenalty(const KlConfig& cfg, const torch::Tensor& log_prob,
                        const torch::Tensor& ref_log_prob, const torch::Tensor& mask) {
  cfg.Validate();
  RequireSameShape("ref_log_prob", ref_log_prob, "log_prob", log_prob);
  RequireSameShape("mask", mask, "log_prob", log_prob);
  auto estimator = KlEstimatorRegistry::Global().Make(cfg.estimator);
  torch::Tensor m = mask.to(torch::kBool);
  torch::Tensor d = Clean(log_prob, m) - Clean(ref_log_prob.detach().to(log_prob.device(), log_prob.scalar_type()), m);
  torch::Tensor value = estimator->Estimate(d);
  if (cfg.straight_through) {
    torch::Tensor surrogate = 0.5 * d.square();
    value = (surrogate - surrogate.detach()) + value.detach();
  }
  return Clean(value, m);
}

torch::Tensor KlShapedRewards(const KlConfig& cfg, const torch::Tensor& token_rewards,
                              const torch::Tensor& log_prob, const torch::Tensor& ref_log_prob,
                              const torch::Tensor& mask) {
  RequireSameShape("log_prob", log_prob, "token_rewards", token_rewards);
  torch::NoGradGuard no_grad;
  torch::Tensor m = mask.to(torch::kBool);
  torch::Tensor kl = KlPenalty(cfg, log_prob.to(token_rewards.scalar_type()), ref_log_prob, m);
  return Clean(token_rewards, m) - cfg.coef * kl;
}

}  // namespace rlid::trainers
