// Advantage estimators as pure tensor functions (docs/algorithms.md,
// "Advantages"): gae, grpo (with / without std), rloo, reinforce_pp,
// reinforce_pp_baseline and gigpo, registered by name, plus the decision-plane GAE over
// packed episodes. Inputs are float64 [B] / [B,T]; padded positions (mask 0)
// may hold any junk and never change a result.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/registry.h"
#include "trainers/losses/loss_config.h"

namespace rlid::trainers {

struct AdvantageInputs {
  torch::Tensor scores;         // [B] outcome per response, or undefined
  torch::Tensor token_rewards;  // [B,T] per-token rewards, or undefined (exactly one of the two)
  torch::Tensor response_mask;  // [B,T] 0/1; may be undefined when token_rewards is given
  torch::Tensor values;         // [B,T] value estimates V(s_t) (gae only)
  // [B] V after each row's last valid position (gae only): the estimate where a
  // time limit cut the episode, 0 after a terminal state. Undefined = all 0.
  torch::Tensor end_values;
  std::vector<int64_t> groups;  // [B] group id per response (grpo, rloo, reinforce_pp_baseline)
  // Step rows (gigpo): row i is one step of episode episodes[i], rows of an
  // episode in time order, scores[i] its reward r_t; anchors[i] names its state
  // (steps of one group with equal anchors form a step group).
  std::vector<int64_t> episodes;
  std::vector<uint64_t> anchors;
};

struct AdvantageResult {
  torch::Tensor advantages;  // [B,T] (0 at padded positions)
  // reinforce_pp: discounted returns before whitening; gae: advantages + values
  // (the value target); every other estimator: equal to advantages.
  torch::Tensor returns;
  // What the estimator reports about its inputs, as metrics (gigpo:
  // GigpoStepGroupMetrics); empty for the others.
  std::vector<std::pair<std::string, double>> metrics;
};

class AdvantageEstimator {
 public:
  static constexpr const char* kRegistryKind = "advantage estimator";
  virtual ~AdvantageEstimator() = default;
  virtual AdvantageResult Compute(const AdvantageConfig& cfg, const AdvantageInputs& in) const = 0;
  // True when it reads per-step rewards and values (its `returns` are the value
  // target); false when it scores whole responses or episodes.
  virtual bool uses_values() const = 0;
  // True when it compares responses of one group (a group of one gives 0).
  virtual bool needs_groups() const = 0;
  // True when its rows are the steps of episodes (AdvantageInputs::episodes,
  // anchors) rather than one outcome per response.
  virtual bool needs_steps() const { return false; }
};
using AdvantageRegistry = Registry<AdvantageEstimator>;

// Validates cfg and the inputs' shapes, then runs the registered estimator.
AdvantageResult ComputeAdvantages(const AdvantageConfig& cfg, const AdvantageInputs& in);

// The validation step of ComputeAdvantages: shapes checked (ConfigError naming
// them), tensors converted to float64, response_mask made a bool [B,T] mask,
// values cleaned. For callers that transform the inputs first (KL in the reward).
AdvantageInputs CheckAdvantageInputs(const AdvantageConfig& cfg, const AdvantageInputs& in);

// ---- building blocks ---------------------------------------------------------

// s_i: scores, or sum_t token_rewards * mask.
torch::Tensor SequenceScores(const AdvantageInputs& in);
// r_t [B,T]: token_rewards * mask, or each score placed at its response's last
// valid token (OpenRLHF's convention; rows without valid tokens get nothing).
torch::Tensor TokenRewards(const AdvantageInputs& in);
// Per-group baseline use: A_i = s_i - mean_g (std_norm: / (std_g + eps), unbiased
// std). Groups of one and groups whose scores are all equal give exactly 0.
torch::Tensor GroupNormalizedScores(const torch::Tensor& scores, const std::vector<int64_t>& groups,
                                    bool std_norm, double std_eps);
// GiGPO (arXiv 2505.10978) on step rows: A = A^E + step_weight · A^S, where A^E
// normalises each episode's return Σ_t r_t within its group (every episode
// counted once) and A^S normalises each step's return-to-go Σ_k γ^k r_{t+k}
// within its step group (same group, same anchor), both as GroupNormalizedScores.
torch::Tensor GigpoAdvantages(const torch::Tensor& rewards, const std::vector<int64_t>& groups,
                              const std::vector<int64_t>& episodes,
                              const std::vector<uint64_t>& anchors, const AdvantageConfig& cfg);
// GiGPO's two terms per step row (float64): A^E of the row's episode, A^S of
// its step, and how many rows share its step group (1: no other row of its
// group reached its state, so A^S = 0).
struct GigpoTerms {
  torch::Tensor episode_term, step_term;
  std::vector<int64_t> step_group_size;
};
GigpoTerms GigpoParts(const torch::Tensor& rewards, const std::vector<int64_t>& groups,
                      const std::vector<int64_t>& episodes, const std::vector<uint64_t>& anchors,
                      const AdvantageConfig& cfg);
// Whether step groups formed, over the step rows: gigpo/step_group_size (the
// mean size of a row's step group), gigpo/step_group_size_max and
// gigpo/step_term_nonzero (the share of rows whose A^S is not 0).
std::vector<std::pair<std::string, double>> GigpoStepGroupMetrics(const GigpoTerms& t);
// A_i = s_i - mean_{j != i} s_j; groups of one (and all-equal groups) give 0.
torch::Tensor LeaveOneOutScores(const torch::Tensor& scores, const std::vector<int64_t>& groups);
// G_t = r_t + gamma G_{t+1}, the recursion running over valid tokens only
// (padded positions are skipped, neither discounted nor reset); 0 at padding.
torch::Tensor DiscountedReturns(const torch::Tensor& rewards, const torch::Tensor& mask,
                                double gamma);
// (x - mu) * rsqrt(var_unbiased + 1e-8) over all valid tokens of the batch;
// 0 at padding, and 0 everywhere when fewer than two tokens are valid.
torch::Tensor MaskedWhiten(const torch::Tensor& x, const torch::Tensor& mask);

// ---- decision plane ----------------------------------------------------------

// Decisions of several episodes packed back to back in one [N] tensor.
struct DecisionGaeInputs {
  torch::Tensor rewards;      // [N] reward after decision t
  torch::Tensor values;       // [N] V(s_t)
  torch::Tensor episode_end;  // [N] bool/0-1: t is the last decision of its episode in this batch
  // [N] V(s_{t+1}) where episode_end is set: 0 after a terminal state, the value
  // estimate after a time-limit cut or a batch boundary; ignored elsewhere.
  // Undefined = all 0 (every episode terminated).
  torch::Tensor end_values;
};
// delta_t = r_t + gamma V(s_{t+1}) - V(s_t); A_t = delta_t + gamma lambda A_{t+1}
// within an episode. Returns advantages [N] and returns = advantages + values.
AdvantageResult GaeAdvantages(const DecisionGaeInputs& in, double gamma, double lambda);

}  // namespace rlid::trainers
