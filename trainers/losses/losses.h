// Token-plane policy losses as pure tensor functions (docs/algorithms.md,
// "Policy loss", "Train-vs-rollout engine correction", "KL"): the surrogate
// (ppo_clip with dual clip and clip-higher, gspo, gspo_token, cispo; registered
// by name), the engine correction (tis / icepop / reject at token or sequence
// level), the KL term, and the five aggregation modes with GLOBAL denominators.
// Every trainer (token GRPO family, decision PPO with T = 1) calls PolicyLoss.
// All tensors are float64 [B, T] unless noted; padded positions (mask 0) may
// hold any junk and never change a value or a gradient.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>

#include "core/registry.h"
#include "trainers/losses/loss_config.h"

namespace rlid::trainers {

// Denominators of the whole optimiser step (all micro-batches, all ranks).
// -1 = use this call's own counts. With engine.kind = "reject" they must be the
// counts after rejection (LocalCounts gives this call's share).
struct GlobalCounts {
  double tokens = -1;     // sum of the loss mask
  double sequences = -1;  // number of sequences with at least one valid token
};

// Only log_prob carries a gradient; every other tensor is detached.
struct PolicyLossInputs {
  torch::Tensor log_prob;          // [B,T] log pi_theta, requires grad
  torch::Tensor old_log_prob;      // [B,T] log pi_old (training engine)
  torch::Tensor advantages;        // [B] (per sequence) or [B,T]
  torch::Tensor response_mask;     // [B,T] 0/1 (bool, int or float); undefined = all valid
  torch::Tensor rollout_log_prob;  // [B,T] rollout engine; required when engine.kind != none
  torch::Tensor ref_log_prob;  // [B,T] reference policy; required when kl.coef > 0, placement loss
  // [B,T] log pi_behav: the training engine at the weights the batch was played
  // with, when they are older than old_log_prob's (asynchronous rollouts, with
  // staleness.kind = decoupled: old_log_prob is then pi_prox). Undefined = the
  // batch is on-policy for old_log_prob. When defined, the engine correction
  // compares it (not old_log_prob) with rollout_log_prob, and every token is
  // weighted by the staleness correction (CorrectStaleness).
  torch::Tensor behav_log_prob;
  GlobalCounts counts;
};

struct LossResult {
  torch::Tensor loss;                     // scalar, differentiable w.r.t. log_prob
  std::map<std::string, double> metrics;  // see docs/losses.md for names
};

// The whole token-plane loss: engine correction, surrogate, aggregation, KL.
LossResult PolicyLoss(const LossConfig& loss, const KlConfig& kl, const PolicyLossInputs& in);

// This call's counts after engine rejection (sum them over micro-batches and
// ranks to build GlobalCounts).
GlobalCounts LocalCounts(const LossConfig& loss, const PolicyLossInputs& in);

// ---- building blocks (exposed for trainers and tests) ------------------------

// Per-token losses L [B,T] -> scalar. `mask` is the loss mask; `norm` is the
// seq_mean_token_sum_norm divisor (0 = T). A zero denominator gives 0.
torch::Tensor Aggregate(const torch::Tensor& loss_mat, const torch::Tensor& mask,
                        Aggregation mode, double norm = 0.0, GlobalCounts counts = {});

// Engine correction for one batch: per-token detached weights and the loss mask.
struct EngineCorrection {
  torch::Tensor weight;                   // [B,T] detached; 1 where no correction applies
  torch::Tensor loss_mask;                // [B,T] bool; response mask minus rejected tokens
  std::map<std::string, double> metrics;  // engine/kl, engine/weight_mean, engine/*_frac
};
// old / rollout: [B,T]; mask: [B,T] bool. rollout may be undefined when kind = none.
EngineCorrection CorrectEngine(const EngineConfig& cfg, const torch::Tensor& old_log_prob,
                               const torch::Tensor& rollout_log_prob, const torch::Tensor& mask);

// Staleness correction for one batch (decoupled PPO): per token, detached,
// w = exp(prox - behav), and above cfg.cap 0 (cap_mode mask, AReaL) or cap (clamp). Metrics
// staleness/kl (mean of behav - prox over the mask: the k1 estimate of KL(pi_behav || pi_prox)),
// staleness/ratio_mean, staleness/weight_mean and staleness/capped_frac.
struct StalenessCorrection {
  torch::Tensor weight;  // [B,T] detached
  std::map<std::string, double> metrics;
};
StalenessCorrection CorrectStaleness(const StalenessConfig& cfg, const torch::Tensor& prox_log_prob,
                                     const torch::Tensor& behav_log_prob,
                                     const torch::Tensor& mask);

// A surrogate's per-token output. Inputs are sanitised (padded positions = 0)
// and advantages are [B,T].
struct SurrogateOutput {
  torch::Tensor loss;           // [B,T] per-token loss L
  torch::Tensor clipped;        // [B,T] bool: clip_frac numerator
  torch::Tensor clipped_lower;  // [B,T] bool: dual clip active (false when not applicable)
};

class PolicyLossFn {
 public:
  static constexpr const char* kRegistryKind = "policy loss";
  virtual ~PolicyLossFn() = default;
  // log_prob carries the gradient; mask is the bool loss mask.
  virtual SurrogateOutput Compute(const LossConfig& cfg, const torch::Tensor& log_prob,
                                  const torch::Tensor& old_log_prob,
                                  const torch::Tensor& advantages,
                                  const torch::Tensor& mask) const = 0;
};
using PolicyLossRegistry = Registry<PolicyLossFn>;

// Masked mean over a bool mask; 0 when the mask is empty.
double MaskedMean(const torch::Tensor& x, const torch::Tensor& mask);

}  // namespace rlid::trainers
