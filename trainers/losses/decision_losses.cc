// Menu KL / entropy, row entropy, value loss, all-action surrogate and decision
// PPO. Log-probs of -inf (impossible items) contribute 0 to every sum.
#include "trainers/losses/decision_losses.h"

#include <fmt/format.h>

#include "core/error.h"
#include "trainers/losses/tensor_checks.h"

namespace rlid::trainers {
namespace {

// Valid items with a finite log-prob; (clean logp, p) with p = 0 elsewhere.
struct MenuProbs {
  torch::Tensor valid, logp, p;
};

MenuProbs Probs(const torch::Tensor& logp, const torch::Tensor& item_mask) {
  if (!logp.defined() || logp.dim() != 2)
    throw ConfigError(
        fmt::format("menu log-probs have shape {}, expected [B,K]", ShapeString(logp)));
  torch::Tensor mask = BoolMask("item_mask", item_mask, logp);
  torch::Tensor valid = mask & torch::isfinite(logp);
  torch::Tensor l = Clean(logp, valid);
  return {valid, l, Clean(torch::exp(l), valid)};
}

}  // namespace

torch::Tensor MenuKl(const torch::Tensor& logp, const torch::Tensor& ref_logp,
                     const torch::Tensor& item_mask) {
  RequireSameShape("ref_logp", ref_logp, "logp", logp);
  MenuProbs m = Probs(logp, item_mask);
  torch::Tensor ref = torch::where(m.valid, ref_logp.detach().to(logp.device(), logp.scalar_type()), m.logp);
  return (m.p * (m.logp - ref)).sum(1);
}

torch::Tensor MenuEntropy(const torch::Tensor& logp, const torch::Tensor& item_mask) {
  MenuProbs m = Probs(logp, item_mask);
  return -(m.p * m.logp).sum(1);
}

torch::Tensor RowEntropy(const torch::Tensor& row_logp) {
  MenuProbs m = Probs(row_logp, torch::Tensor());
  return -(m.p * m.logp).sum(1);
}

torch::Tensor ValueLoss(const torch::Tensor& values, const torch::Tensor& old_values,
                        const torch::Tensor& returns, double clip, double count) {
  if (!values.defined() || values.dim() != 1)
    throw ConfigError(fmt::format("values have shape {}, expected [N]", ShapeString(values)));
  RequireSameShape("returns", returns, "values", values);
  torch::Tensor r = returns.to(values.device(), values.scalar_type()).detach();
  torch::Tensor unclipped = (values - r).square();
  torch::Tensor per;
  if (clip > 0) {
    RequireSameShape("old_values", old_values, "values", values);
    torch::Tensor old = old_values.to(values.device(), values.scalar_type()).detach();
    torch::Tensor clipped = (old + torch::clamp(values - old, -clip, clip) - r).square();
    per = 0.5 * torch::maximum(unclipped, clipped);
  } else {
    per = 0.5 * unclipped;
  }
  double denom = count >= 0 ? count : static_cast<double>(values.size(0));
  return per.sum() / (denom > 0 ? denom : 1.0);
}

torch::Tensor AllActionSurrogate(const torch::Tensor& logp, const torch::Tensor& item_mask,
                                 const torch::Tensor& q_hat) {
  RequireSameShape("q_hat", q_hat, "logp", logp);
  MenuProbs m = Probs(logp, item_mask);
  torch::Tensor q = Clean(q_hat.to(logp.device(), logp.scalar_type()).detach(), m.valid);
  torch::Tensor baseline = (m.p.detach() * q).sum(1, /*keepdim=*/true);
  torch::Tensor advantage = Clean(q - baseline, m.valid);
  return (m.p * advantage).sum(1);
}

LossResult DecisionPpoLoss(const LossConfig& cfg, const torch::Tensor& logp,
                           const torch::Tensor& old_logp, const torch::Tensor& advantages,
                           GlobalCounts counts, const torch::Tensor& behav_logp) {
  if (!logp.defined() || logp.dim() != 1)
    throw ConfigError(
        fmt::format("decision log-probs have shape {}, expected [B]", ShapeString(logp)));
  RequireSameShape("old_logp", old_logp, "logp", logp);
  RequireSameShape("advantages", advantages, "logp", logp);
  PolicyLossInputs in;
  in.log_prob = logp.unsqueeze(1);
  in.old_log_prob = old_logp.unsqueeze(1);
  in.advantages = advantages;
  in.counts = counts;
  if (behav_logp.defined()) {
    RequireSameShape("behav_logp", behav_logp, "logp", logp);
    in.behav_log_prob = behav_logp.unsqueeze(1);
  }
  return PolicyLoss(cfg, KlConfig{}, in);
}

}  // namespace rlid::trainers
